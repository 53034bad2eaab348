package convert

// Guest conversion with virt-v2v 2.2: the step that makes a guest installed
// on ESXi boot on KubeVirt. A VMware guest's initramfs carries only the
// drivers of the disks it was installed on (IDE, pvscsi); on KubeVirt's
// virtio disks it cannot find its root file system and stops in the
// initramfs shell. virt-v2v-in-place inspects the guest, installs the
// virtio drivers (rebuilding a Linux guest's initramfs; installing
// virtio-win drivers into a Windows guest), removes VMware Tools and fixes
// the bootloader, all inside the disk images.
//
// Making a conversion resumable is the caller's job, because the tool
// rewrites the images in place and a conversion cut short (crash, timeout,
// cancel) leaves them half converted. The caller should:
//
//  1. record the source image's SHA-256 (Tool.Convert's sidecar has it);
//  2. convert a copy, never the only copy: copy the staged image to
//     <image>.v2v.tmp, run V2V.Convert on the copy, and only when it
//     succeeds rename it over the image (fsync it and the folder first);
//  3. record the converted image's SHA-256 and the evidence next to it
//     (e.g. <image>.v2v.json) before the rename, so that a restart which
//     finds the image matching that record skips the conversion, and one
//     that finds a leftover .tmp deletes it and starts again from step 2.
//
// virt-v2v runs libguestfs's helper VM. It gets LIBGUESTFS_BACKEND=direct,
// and TCG is forced whenever guestboot.ProbeAccel finds KVM unusable
// (libguestfs otherwise opens a nested /dev/kvm by itself and hangs).
// Under TCG on 2 cores a Debian conversion takes 90-170 s, most of it the
// initramfs rebuild.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
)

// Sentinel errors of guest conversion, matched with errors.Is.
var (
	// ErrV2VMissing: virt-v2v or a tool it needs is absent or broken; the
	// error names the Debian packages to install.
	ErrV2VMissing = errors.New("virt-v2v not usable")
	// ErrNoVirtioWin: the guest is Windows and no virtio-win drivers are
	// where V2V.VirtioWin points.
	ErrNoVirtioWin = errors.New("no virtio-win drivers for a Windows guest")
	// ErrV2VFailed: virt-v2v ran and failed; the error holds its message.
	ErrV2VFailed = errors.New("virt-v2v failed")
)

// V2VPackages are the Debian packages guest conversion needs (installed by
// scripts/ensure-guest-deps.sh): virt-v2v needs nbdkit and nbdinfo
// although Debian's package does not depend on them, and libguestfs builds
// its helper VM from a kernel installed on the host.
var V2VPackages = []string{"virt-v2v", "libguestfs-tools", "guestfs-tools", "nbdkit", "libnbd-bin", "linux-image-cloud-amd64"}

// EnvVirtioWin is the variable virt-v2v reads for the virtio-win drivers
// (a folder or virtio-win.iso).
const EnvVirtioWin = "VIRTIO_WIN"

// DefaultVirtioWin is where Debian-family packages put virtio-win.
const DefaultVirtioWin = "/usr/share/virtio-win"

// V2V runs virt-v2v's tools. The zero value finds them in PATH, probes the
// accelerator and uses $VIRTIO_WIN or /usr/share/virtio-win.
type V2V struct {
	// VirtioWin is where the Windows virtio drivers are (a folder or an
	// ISO); $VIRTIO_WIN, else DefaultVirtioWin, when empty.
	VirtioWin string
	// Accel is the accelerator for libguestfs's helper VM; the zero value
	// means guestboot.ProbeAccel().
	Accel guestboot.Accel
	// TempDir holds virt-v2v's temporary overlays (VIRT_V2V_TMPDIR); the
	// system default (/var/tmp) if empty. libguestfs keeps its appliance
	// in its own cache (LIBGUESTFS_CACHEDIR, default /var/tmp), built on
	// the first run and reused after.
	TempDir string
	// StallTimeout is how long a tool may print nothing before it is
	// killed with its helper VM and the conversion fails with
	// ErrV2VStalled; DefaultV2VStallTimeout when zero.
	StallTimeout time.Duration
}

// V2VTools is what Probe found.
type V2VTools struct {
	// Version is virt-v2v's version, e.g. "2.2.0".
	Version string
	// NBDKitVersion is nbdkit's, e.g. "1.32.5".
	NBDKitVersion string
	// Paths of the binaries, by name.
	Paths map[string]string
}

// V2VDisk is one disk image of a guest, in the guest's disk order.
type V2VDisk struct {
	Path   string
	Format Format // Raw or QCOW2
}

// Firmware kinds of an inspected guest.
const (
	FirmwareBIOS = "bios"
	FirmwareUEFI = "uefi"
)

// InspectedOS is what inspection found in a guest.
type InspectedOS struct {
	// Type is "linux" or "windows".
	Type string
	// Distro is e.g. "debian", "rhel", "windows".
	Distro string
	// Version is "major.minor" ("12.15" for Debian 12.15); Major and Minor
	// are its parts.
	Version      string
	Major, Minor int
	// OSInfo is the libosinfo short ID, e.g. "debian12", "win2k22".
	OSInfo string
	// Arch is e.g. "x86_64".
	Arch string
	// ProductName is what the guest calls itself, e.g. "Windows Server
	// 2022 Standard" (Debian reports its version, "12.15").
	ProductName string
	// Firmware is FirmwareUEFI when the first disk has a GPT with an EFI
	// system partition (the rule virt-v2v applies), else FirmwareBIOS.
	Firmware string
}

// V2VEvidence records a conversion, for the migration's status and logs.
type V2VEvidence struct {
	// Tool is the program that ran, "virt-v2v-in-place" or "virt-v2v".
	Tool string
	// Version is virt-v2v's version.
	Version string
	// Accel is the accelerator libguestfs's helper VM ran with.
	Accel guestboot.Accel
	// OS is the guest as virt-v2v saw it.
	OS InspectedOS
	// Converted is virt-v2v's own summary line, e.g. "Converting 12.15 to
	// run on KVM".
	Converted string
	// Drivers says what virt-v2v did about drivers, from its messages,
	// e.g. "This guest has virtio drivers installed.".
	Drivers []string
	// Warnings are virt-v2v's warnings.
	Warnings []string
	// Messages are all of virt-v2v's progress messages, in order.
	Messages []string
	// Duration is how long the conversion ran.
	Duration time.Duration
}

// Probe checks that virt-v2v-in-place, virt-v2v, virt-inspector, nbdkit (with its file plugin) and nbdinfo are installed
// and run, and returns their versions. Its error wraps ErrV2VMissing and
// names the Debian packages to install.
func (v *V2V) Probe(ctx context.Context) (V2VTools, error) {
	tools := V2VTools{Paths: map[string]string{}}
	needs := map[string]string{
		"virt-v2v":          "virt-v2v",
		"virt-v2v-in-place": "virt-v2v",
		"virt-inspector":    "guestfs-tools",
		"nbdkit":            "nbdkit",
		"nbdinfo":           "libnbd-bin",
	}
	var problems []string
	missing := map[string]bool{}
	for name, pkg := range needs {
		p, err := exec.LookPath(name)
		if err != nil {
			problems = append(problems, name+" is not installed")
			missing[pkg] = true
			continue
		}
		tools.Paths[name] = p
	}
	if p := tools.Paths["virt-v2v"]; p != "" {
		out, err := runQuiet(ctx, nil, p, "--version")
		if m := versionRe.FindStringSubmatch(out); err == nil && m != nil {
			tools.Version = m[1]
		} else {
			problems = append(problems, fmt.Sprintf("virt-v2v --version: %v %s", err, out))
			missing["virt-v2v"] = true
		}
	}
	if p := tools.Paths["nbdkit"]; p != "" {
		out, err := runQuiet(ctx, nil, p, "--version")
		if m := versionRe.FindStringSubmatch(out); err == nil && m != nil {
			tools.NBDKitVersion = m[1]
		}
		// virt-v2v serves local disks with nbdkit's file plugin.
		if out, err := runQuiet(ctx, nil, p, "file", "--dump-plugin"); err != nil {
			problems = append(problems, fmt.Sprintf("nbdkit's file plugin does not load: %v %s", err, firstLine(out)))
			missing["nbdkit"] = true
		}
	}
	if len(problems) > 0 {
		var pkgs []string
		for _, p := range V2VPackages {
			if missing[p] {
				pkgs = append(pkgs, p)
			}
		}
		return tools, fmt.Errorf("%w: %s; install the Debian packages %s (apt-get install --no-install-recommends %s, or scripts/ensure-guest-deps.sh)",
			ErrV2VMissing, strings.Join(problems, "; "), strings.Join(pkgs, " "), strings.Join(V2VPackages, " "))
	}
	return tools, nil
}

var versionRe = regexp.MustCompile(`\b(\d+\.\d+\.\d+)\b`)

// V2VOptions tune Convert.
type V2VOptions struct {
	// OS is the guest's inspection, when the caller has it. When
	// nil, Convert first identifies the guest with virt-inspector (about
	// 20-40 s under TCG) to refuse a Windows guest with no virtio-win
	// drivers before changing anything.
	OS *InspectedOS
}

// Convert converts the guest on disks in place with virt-v2v-in-place so
// that it boots on KubeVirt (virtio disks and NIC, q35). The images are
// modified: see the package notes for making this resumable. A Windows
// guest needs the virtio-win drivers (V2V.VirtioWin); without them Convert
// fails with ErrNoVirtioWin before running anything that writes.
func (v *V2V) Convert(ctx context.Context, disks []V2VDisk, opts V2VOptions) (V2VEvidence, error) {
	start := time.Now()
	tools, err := v.Probe(ctx)
	if err != nil {
		return V2VEvidence{}, err
	}
	var osInfo InspectedOS
	if opts.OS != nil {
		osInfo = *opts.OS
	} else if osInfo, err = v.identify(ctx, tools, disks); err != nil {
		return V2VEvidence{}, err
	}
	if osInfo.Type == "windows" {
		if err := v.checkVirtioWin(); err != nil {
			return V2VEvidence{}, err
		}
	}
	if osInfo.Firmware == "" {
		if osInfo.Firmware, err = detectFirmware(ctx, disks[0]); err != nil {
			return V2VEvidence{}, err
		}
	}
	dir, err := os.MkdirTemp(v.TempDir, "v2v-convert-")
	if err != nil {
		return V2VEvidence{}, err
	}
	defer os.RemoveAll(dir)
	input, err := inputArgs(disks, dir)
	if err != nil {
		return V2VEvidence{}, err
	}
	args := append([]string{"--machine-readable"}, input...)
	stdout, stderr, err := v.run2(ctx, tools.Paths["virt-v2v-in-place"], args, dir)
	if err != nil {
		return V2VEvidence{}, err
	}
	ev := V2VEvidence{
		Tool:     "virt-v2v-in-place",
		Version:  tools.Version,
		Accel:    v.accel(),
		OS:       osInfo,
		Duration: time.Since(start),
	}
	ev.readMessages(stdout, stderr)
	if ev.Converted == "" {
		return ev, fmt.Errorf("%w: virt-v2v-in-place exited 0 without converting the guest: %s", ErrV2VFailed, strings.Join(ev.Messages, "; "))
	}
	return ev, nil
}

// identify finds the guest's OS type with virt-inspector, read-only.
func (v *V2V) identify(ctx context.Context, tools V2VTools, disks []V2VDisk) (InspectedOS, error) {
	args := []string{"--no-applications", "--no-icon"}
	for _, d := range disks {
		abs, err := checkDisk(d)
		if err != nil {
			return InspectedOS{}, err
		}
		args = append(args, "--format="+string(d.Format), "-a", abs)
	}
	out, err := v.run(ctx, tools.Paths["virt-inspector"], args, "")
	if err != nil {
		return InspectedOS{}, err
	}
	var doc struct {
		OS []inspectedXML `xml:"operatingsystem"`
	}
	if err := xml.Unmarshal(out, &doc); err != nil {
		return InspectedOS{}, fmt.Errorf("%w: virt-inspector's report: %v", ErrV2VFailed, err)
	}
	if len(doc.OS) == 0 {
		return InspectedOS{}, fmt.Errorf("%w: virt-inspector found no operating system on the disks", ErrV2VFailed)
	}
	return doc.OS[0].os(), nil
}

// checkVirtioWin fails unless the virtio-win folder or ISO exists (a
// folder must not be empty).
func (v *V2V) checkVirtioWin() error {
	where := v.virtioWin()
	st, err := os.Stat(where)
	if err == nil && st.IsDir() {
		var entries []os.DirEntry
		if entries, err = os.ReadDir(where); err == nil && len(entries) == 0 {
			err = errors.New("the folder is empty")
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v; install the virtio-win drivers there (a folder or virtio-win.iso) or point $%s at them",
			ErrNoVirtioWin, where, err, EnvVirtioWin)
	}
	return nil
}

func (v *V2V) virtioWin() string {
	if v.VirtioWin != "" {
		return v.VirtioWin
	}
	if env := os.Getenv(EnvVirtioWin); env != "" {
		return env
	}
	return DefaultVirtioWin
}

func (v *V2V) accel() guestboot.Accel {
	if v.Accel.Name != "" {
		return v.Accel
	}
	return guestboot.ProbeAccel()
}

// env is the environment of virt-v2v's tools: this program's, with the
// libguestfs backend settings for the accelerator, VIRTIO_WIN, and the
// temporary folder.
func (v *V2V) env() []string {
	drop := map[string]bool{"LIBGUESTFS_BACKEND": true, "LIBGUESTFS_BACKEND_SETTINGS": true, EnvVirtioWin: true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	env = append(env, v.accel().LibguestfsEnv()...)
	env = append(env, EnvVirtioWin+"="+v.virtioWin())
	if v.TempDir != "" {
		env = append(env, "VIRT_V2V_TMPDIR="+v.TempDir)
	}
	return env
}

// inputArgs selects the disks: -i disk for one, else a minimal libvirt
// domain (virt-v2v's -i disk takes a single disk).
func inputArgs(disks []V2VDisk, dir string) ([]string, error) {
	if len(disks) == 0 {
		return nil, errors.New("convert: no disks")
	}
	abs := make([]string, len(disks))
	for i, d := range disks {
		p, err := checkDisk(d)
		if err != nil {
			return nil, err
		}
		abs[i] = p
	}
	if len(disks) == 1 {
		return []string{"-i", "disk", "-if", string(disks[0].Format), abs[0]}, nil
	}
	var b bytes.Buffer
	b.WriteString("<domain type='kvm'>\n  <name>guest</name>\n  <memory>1048576</memory>\n  <vcpu>1</vcpu>\n")
	b.WriteString("  <os><type>hvm</type><boot dev='hd'/></os>\n  <features><acpi/><apic/></features>\n  <devices>\n")
	for i, d := range disks {
		fmt.Fprintf(&b, "    <disk type='file' device='disk'><driver name='qemu' type='%s'/><source file='", d.Format)
		if err := xml.EscapeText(&b, []byte(abs[i])); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "'/><target dev='sd%c' bus='scsi'/></disk>\n", 'a'+i)
	}
	b.WriteString("  </devices>\n</domain>\n")
	domain := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(domain, b.Bytes(), 0o600); err != nil {
		return nil, err
	}
	return []string{"-i", "libvirtxml", domain}, nil
}

func checkDisk(d V2VDisk) (string, error) {
	if d.Format != Raw && d.Format != QCOW2 {
		return "", fmt.Errorf("convert: disk %s: format %q, want raw or qcow2", d.Path, d.Format)
	}
	abs, err := filepath.Abs(d.Path)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("convert: disk: %w", err)
	}
	return abs, nil
}

// inspectedXML is an <operatingsystem> element of virt-inspector's report.
type inspectedXML struct {
	Name        string `xml:"name"`
	Distro      string `xml:"distro"`
	OSInfo      string `xml:"osinfo"`
	Arch        string `xml:"arch"`
	Major       int    `xml:"major_version"`
	Minor       int    `xml:"minor_version"`
	ProductName string `xml:"product_name"`
}

func (x inspectedXML) os() InspectedOS {
	return InspectedOS{
		Type:        x.Name,
		Distro:      x.Distro,
		Version:     fmt.Sprintf("%d.%d", x.Major, x.Minor),
		Major:       x.Major,
		Minor:       x.Minor,
		OSInfo:      x.OSInfo,
		Arch:        x.Arch,
		ProductName: x.ProductName,
	}
}

// v2vMessage is one line of virt-v2v's --machine-readable standard output.
type v2vMessage struct {
	Message string `json:"message"`
	Type    string `json:"type"` // "message", "info", "warning"
}

// readMessages fills the evidence from virt-v2v's --machine-readable
// output: one JSON object a line for each progress message, warning and
// informational message (e.g. "This guest has virtio drivers installed."),
// the same text also printed plainly. Both streams are read.
func (ev *V2VEvidence) readMessages(streams ...[]byte) {
	for _, stream := range streams {
		sc := bufio.NewScanner(bytes.NewReader(stream))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			var m v2vMessage
			if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &m) != nil || m.Message == "" {
				continue
			}
			ev.add(m)
		}
	}
}

func (ev *V2VEvidence) add(m v2vMessage) {
	text := strings.TrimSpace(m.Message)
	ev.Messages = append(ev.Messages, text)
	if m.Type == "warning" {
		ev.Warnings = append(ev.Warnings, text)
	}
	if strings.HasPrefix(text, "Converting ") && strings.HasSuffix(text, " to run on KVM") {
		ev.Converted = text
	}
	if strings.Contains(strings.ToLower(text), "driver") {
		ev.Drivers = append(ev.Drivers, text)
	}
}

// GPT partition type of an EFI system partition, as stored on disk
// (C12A7328-F81F-11D2-BA4B-00A0C93EC93B, mixed-endian).
var espType = []byte{0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b}

// detectFirmware reads the disk's partition table: UEFI when it is a GPT
// with an EFI system partition, else BIOS.
func detectFirmware(ctx context.Context, d V2VDisk) (string, error) {
	head, err := readHead(ctx, d, 34*512)
	if err != nil {
		return "", err
	}
	if len(head) < 34*512 || string(head[512:520]) != "EFI PART" {
		return FirmwareBIOS, nil
	}
	entries := binary.LittleEndian.Uint64(head[512+72:])
	count := binary.LittleEndian.Uint32(head[512+80:])
	size := binary.LittleEndian.Uint32(head[512+84:])
	if entries != 2 || size < 128 {
		// Entries elsewhere than right after the header: read them there.
		end := int64(entries)*512 + int64(count)*int64(size)
		if end > 64<<20 {
			return "", fmt.Errorf("convert: %s: GPT entries at an unlikely place", d.Path)
		}
		if head, err = readHead(ctx, d, int(end)); err != nil {
			return "", err
		}
	}
	for i := uint32(0); i < count; i++ {
		off := int64(entries)*512 + int64(i)*int64(size)
		if off+16 > int64(len(head)) {
			break
		}
		if bytes.Equal(head[off:off+16], espType) {
			return FirmwareUEFI, nil
		}
	}
	return FirmwareBIOS, nil
}

// readHead returns the first n bytes the guest sees on the disk: read
// directly from a raw image, through qemu-img dd from another format.
func readHead(ctx context.Context, d V2VDisk, n int) ([]byte, error) {
	if d.Format == Raw {
		f, err := os.Open(d.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b := make([]byte, n)
		m, err := io.ReadFull(f, b)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		return b[:m], nil
	}
	out, err := os.CreateTemp("", "v2v-head-")
	if err != nil {
		return nil, err
	}
	out.Close()
	defer os.Remove(out.Name())
	abs, err := filepath.Abs(d.Path)
	if err != nil {
		return nil, err
	}
	var t Tool
	if _, err := t.run(ctx, "dd", "-f", string(d.Format), "-O", "raw", "bs=512", "count="+strconv.Itoa((n+511)/512), "if="+abs, "of="+out.Name()); err != nil {
		return nil, err
	}
	return os.ReadFile(out.Name())
}

// runQuiet runs a short command and returns its combined output.
func runQuiet(ctx context.Context, env []string, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
