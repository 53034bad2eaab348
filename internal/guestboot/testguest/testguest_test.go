package testguest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImage checks the built guest is installed VMware-style: an MBR with
// one bootable Linux partition at 1 MiB, GRUB reading the root by UUID with
// a serial console, the boot marker unit enabled, and an initramfs with IDE
// and pvscsi drivers but no virtio driver at all.
func TestImage(t *testing.T) {
	img := Image(t)
	t.Logf("guest image %s (build or reuse took %s)", img, BuildTime().Round(1e6))

	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != VirtualSize {
		t.Errorf("image size %d, want %d", st.Size(), VirtualSize)
	}

	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mbr := make([]byte, SectorSize)
	if _, err := io.ReadFull(f, mbr); err != nil {
		t.Fatal(err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa {
		t.Fatalf("no MBR boot signature: % x", mbr[510:])
	}
	var parts []string
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i : 446+16*(i+1)]
		if e[4] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("boot=%#x type=%#x start=%d sectors=%d",
			e[0], e[4], binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])))
	}
	want := fmt.Sprintf("boot=0x80 type=0x83 start=%d sectors=%d", PartitionStart, VirtualSize/SectorSize-PartitionStart)
	if len(parts) != 1 || parts[0] != want {
		t.Fatalf("partitions %q, want [%q]", parts, want)
	}
	// GRUB's boot code is in the MBR: not all zero before the table.
	if bytes.Equal(mbr[:440], make([]byte, 440)) {
		t.Error("MBR has no boot code (grub-install did not run)")
	}

	fs := rootFS{t: t, device: fmt.Sprintf("%s?offset=%d", img, PartitionStart*SectorSize)}

	grubCfg := fs.read("/boot/grub/grub.cfg")
	for _, s := range []string{"root=UUID=" + RootUUID, "console=ttyS0,115200n8", "terminal_output serial"} {
		if !bytes.Contains(grubCfg, []byte(s)) {
			t.Errorf("grub.cfg lacks %q", s)
		}
	}
	if got := fs.read("/etc/systemd/system/vmmigration-booted.service"); !bytes.Contains(got, []byte(Marker)) {
		t.Errorf("boot marker unit does not print %s: %q", Marker, got)
	}
	if wants := fs.list("/etc/systemd/system/multi-user.target.wants"); !contains(wants, "vmmigration-booted.service") {
		t.Errorf("boot marker unit not enabled for multi-user.target (wants: %q)", wants)
	}

	var initrd string
	for _, name := range fs.list("/boot") {
		if strings.HasPrefix(name, "initrd.img-") {
			initrd = name
		}
	}
	if initrd == "" {
		t.Fatalf("no initrd in /boot: %q", fs.list("/boot"))
	}
	files, err := cpioNames(fs.read("/boot/" + initrd))
	if err != nil {
		t.Fatalf("reading %s: %v", initrd, err)
	}
	modules := map[string]bool{}
	for _, name := range files {
		base := path.Base(name)
		if i := strings.Index(base, ".ko"); i > 0 {
			modules[base[:i]] = true
		}
	}
	for _, m := range []string{"ata_piix", "ata_generic", "sd_mod", "vmw_pvscsi"} {
		if !modules[m] {
			t.Errorf("initramfs lacks %s", m)
		}
	}
	for m := range modules {
		if strings.HasPrefix(m, "virtio") || m == "ahci" {
			t.Errorf("initramfs has %s; a VMware-installed guest has no virtio or AHCI driver", m)
		}
	}
	if t.Failed() {
		t.Logf("initramfs modules: %v", modules)
	}
}

// rootFS reads the image's ext4 file system with debugfs (e2fsprogs),
// without mounting it.
type rootFS struct {
	t      *testing.T
	device string
}

func (r rootFS) debugfs(request string) []byte {
	r.t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("debugfs", "-R", request, r.device)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("debugfs -R %q: %v: %s", request, err, stderr.String())
	}
	return stdout.Bytes()
}

func (r rootFS) read(name string) []byte {
	r.t.Helper()
	out := filepath.Join(r.t.TempDir(), "f")
	r.debugfs(fmt.Sprintf("dump %s %s", name, out))
	b, err := os.ReadFile(out)
	if err != nil {
		r.t.Fatalf("%s is not in the image: %v", name, err)
	}
	return b
}

// list returns the names in a folder ("ls -p" prints /ino/mode/uid/gid/name/size/).
func (r rootFS) list(dir string) []string {
	r.t.Helper()
	var names []string
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
