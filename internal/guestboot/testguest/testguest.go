// Package testguest gives tests a real guest disk: the VMware-style Debian
// 12 image tools/guest/build.sh makes (MBR, one ext4 partition, BIOS GRUB,
// an initramfs with IDE and pvscsi drivers but no virtio, a boot marker on
// ttyS0 and qemu-guest-agent). The image is built once per machine into
// .testbin/guest/ (or $VMMIGRATION_TESTBIN/guest/) and reused while the
// builder is unchanged; concurrent test binaries wait for one build.
// Building needs root and the packages of scripts/ensure-guest-deps.sh.
package testguest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/modroot"
)

// Variant is how the guest boots.
type Variant string

// Variants, as tools/guest/build.sh takes them.
const (
	// BIOS: MBR, one ext4 partition (the root), GRUB for BIOS.
	BIOS Variant = "bios"
	// EFI: GPT, an EFI system partition (FAT, GRUB at EFI/BOOT/BOOTX64.EFI
	// and Debian's stub EFI/debian/grub.cfg), then the ext4 root.
	EFI Variant = "efi"
)

// Facts about the images, for assertions.
const (
	// Marker is the line the guest prints on ttyS0 after multi-user.target.
	Marker = "VMMIGRATION-GUEST-BOOTED"
	// RootUUID is the root file system's UUID (root=UUID=... in grub.cfg).
	RootUUID = "6d1c3f4e-8a0b-4c55-9a57-0b1d2c3e4f50"
	// Format is the image format.
	Format = "raw"
	// PartitionStart is the first sector of the first partition (the root
	// for BIOS, the EFI system partition for EFI).
	PartitionStart = 2048
	// ESPSectors is the size of the EFI variant's system partition.
	ESPSectors = 128 << 20 / SectorSize
	// SectorSize is the images' sector size in bytes.
	SectorSize = 512
	// VirtualSize is the images' size in bytes.
	VirtualSize = 1 << 30
)

// RootOffset is the byte offset of the root file system in a variant.
func RootOffset(v Variant) int64 {
	if v == EFI {
		return (PartitionStart + ESPSectors) * SectorSize
	}
	return PartitionStart * SectorSize
}

// EnvTestBin is the environment variable naming the folder the image is
// cached under (in guest/); .testbin in the repository root when unset,
// as for the test cluster's binaries.
const EnvTestBin = "VMMIGRATION_TESTBIN"

type built struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

var images = map[Variant]*built{BIOS: {}, EFI: {}}

// Image returns the path of the BIOS guest image, building it first when
// the cache has none from the current builder. Tests must not write to it:
// boot it with guestboot (which never writes images) or work on Copy.
func Image(t testing.TB) string {
	t.Helper()
	return ImageOf(t, BIOS)
}

// ImageOf is Image for a variant.
func ImageOf(t testing.TB, v Variant) string {
	t.Helper()
	b, ok := images[v]
	if !ok {
		t.Fatalf("guest image: unknown variant %q", v)
	}
	b.once.Do(func() { b.path, b.took, b.err = build(v) })
	if b.err != nil {
		t.Fatalf("guest image (%s): %v", v, b.err)
	}
	return b.path
}

// BuildTime is how long getting the variant's image took in this process
// (near zero when the cached image was reused); zero before it is asked for.
func BuildTime(v Variant) time.Duration {
	if b, ok := images[v]; ok {
		return b.took
	}
	return 0
}

// Copy copies the BIOS guest image into the test's temporary folder, for
// tests that modify it (conversion), and returns the copy's path.
func Copy(t testing.TB) string {
	t.Helper()
	src := Image(t)
	dst := filepath.Join(t.TempDir(), "guest.raw")
	if err := copySparse(src, dst); err != nil {
		t.Fatalf("copying the guest image: %v", err)
	}
	return dst
}

func build(v Variant) (string, time.Duration, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", 0, err
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "tools", "guest", "build.sh"), string(v))
	cmd.Env = os.Environ()
	if dir := os.Getenv(EnvTestBin); dir != "" {
		cmd.Env = append(cmd.Env, "TESTBIN_DIR="+dir)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tail := stderr.String()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return "", 0, fmt.Errorf("tools/guest/build.sh: %v (root and the packages of scripts/ensure-guest-deps.sh are needed):\n%s", err, tail)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	path := lines[len(lines)-1]
	if _, err := os.Stat(path); err != nil {
		return "", 0, fmt.Errorf("tools/guest/build.sh printed %q: %w", path, err)
	}
	return path, time.Since(start), nil
}

// copySparse copies src to dst, leaving holes for the zero blocks.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		out.Close()
		return err
	}
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < size; {
		n, err := in.ReadAt(buf, off)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				out.Close()
				return werr
			}
		}
		off += int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			out.Close()
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := out.Truncate(size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RootFS reads the root file system of a raw image of this guest (or of
// a converted copy) with debugfs from e2fsprogs, without mounting it.
type RootFS struct {
	t      testing.TB
	device string
}

// OpenRootFS returns the root file system of the raw image at path, an
// image of variant v.
func OpenRootFS(t testing.TB, path string, v Variant) RootFS {
	return RootFS{t: t, device: fmt.Sprintf("%s?offset=%d", path, RootOffset(v))}
}

// InitramfsModules returns the kernel modules (names without .ko*) in the
// image's initramfs.
func (r RootFS) InitramfsModules() map[string]bool {
	r.t.Helper()
	// The initrd of the installed kernel (not a backup such as
	// initrd.img-<version>.pre-v2v, which virt-v2v leaves).
	var initrd string
	boot := r.List("/boot")
	for _, name := range boot {
		if version, ok := strings.CutPrefix(name, "vmlinuz-"); ok && slices.Contains(boot, "initrd.img-"+version) {
			initrd = "initrd.img-" + version
		}
	}
	if initrd == "" {
		r.t.Fatalf("no kernel with its initrd in /boot: %q", boot)
	}
	files, err := cpioNames(r.Read("/boot/" + initrd))
	if err != nil {
		r.t.Fatalf("reading %s: %v", initrd, err)
	}
	modules := map[string]bool{}
	for _, name := range files {
		base := path.Base(name)
		if i := strings.Index(base, ".ko"); i > 0 {
			modules[base[:i]] = true
		}
	}
	return modules
}

func (r RootFS) debugfs(request string) []byte {
	r.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("debugfs", "-R", request, r.device)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("debugfs -R %q: %v: %s", request, err, stderr.String())
	}
	return stdout.Bytes()
}

// Read returns a file's content.
func (r RootFS) Read(name string) []byte {
	r.t.Helper()
	out := filepath.Join(r.t.TempDir(), "f")
	r.debugfs(fmt.Sprintf("dump %s %s", name, out))
	b, err := os.ReadFile(out)
	if err != nil {
		r.t.Fatalf("%s is not in the image: %v", name, err)
	}
	return b
}

// List returns the names in a folder.
func (r RootFS) List(dir string) []string {
	r.t.Helper()
	var names []string
	// "ls -p" prints /inode/mode/uid/gid/name/size/ lines.
	sc := bufio.NewScanner(bytes.NewReader(r.debugfs("ls -p " + dir)))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "/")
		if len(fields) >= 6 && fields[5] != "." && fields[5] != ".." {
			names = append(names, fields[5])
		}
	}
	return names
}

// cpioNames lists the files of an initramfs: uncompressed "newc" cpio
// archives (early firmware) followed by a gzip-compressed one.
func cpioNames(b []byte) ([]string, error) {
	var names []string
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		magic, err := r.Peek(6)
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		switch {
		case string(magic) == "070701":
			n, err := readCPIO(r)
			if err != nil {
				return nil, err
			}
			names = append(names, n...)
			// Archives are padded with zeros to a 512-byte boundary.
			for {
				c, err := r.Peek(1)
				if err != nil || c[0] != 0 {
					break
				}
				_, _ = r.ReadByte()
			}
		case magic[0] == 0x1f && magic[1] == 0x8b:
			z, err := gzip.NewReader(r)
			if err != nil {
				return nil, err
			}
			n, err := readCPIO(bufio.NewReader(z))
			return append(names, n...), err
		default:
			return nil, fmt.Errorf("unknown initramfs part starting % x (not gzip or newc cpio)", magic)
		}
	}
}

// readCPIO reads one newc archive up to its TRAILER!!! entry.
func readCPIO(r *bufio.Reader) ([]string, error) {
	var names []string
	var off int64
	skip := func(n int64) error {
		_, err := io.CopyN(io.Discard, r, n)
		off += n
		return err
	}
	for {
		hdr := make([]byte, 110)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return nil, fmt.Errorf("cpio header: %w", err)
		}
		off += 110
		if string(hdr[:6]) != "070701" {
			return nil, fmt.Errorf("bad cpio magic %q", hdr[:6])
		}
		field := func(i int) (int64, error) {
			return strconv.ParseInt(string(hdr[6+8*i:14+8*i]), 16, 64)
		}
		size, err := field(6)
		if err != nil {
			return nil, err
		}
		nameSize, err := field(11)
		if err != nil {
			return nil, err
		}
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		off += nameSize
		if err := skip((4 - off%4) % 4); err != nil {
			return nil, err
		}
		n := strings.TrimRight(string(name), "\x00")
		if n == "TRAILER!!!" {
			return names, nil
		}
		names = append(names, n)
		if err := skip(size + (4-(off+size)%4)%4); err != nil {
			return nil, err
		}
	}
}
