package testguest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImage checks the built guest is installed VMware-style: an MBR with
// one bootable Linux partition at 1 MiB, GRUB reading the root by UUID with
// a serial console, the boot marker unit enabled, and an initramfs with IDE
// and pvscsi drivers but no virtio driver at all.
func TestImage(t *testing.T) {
	img := Image(t)
	t.Logf("guest image %s (build or reuse took %s)", img, BuildTime(BIOS).Round(1e6))

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

	fs := OpenRootFS(t, img, BIOS)

	grubCfg := fs.Read("/boot/grub/grub.cfg")
	for _, s := range []string{"root=UUID=" + RootUUID, "console=ttyS0,115200n8", "terminal_output serial"} {
		if !bytes.Contains(grubCfg, []byte(s)) {
			t.Errorf("grub.cfg lacks %q", s)
		}
	}
	// udev's per-event limit raised for busy machines, on the kernel command
	// line for the initramfs and in udev.conf for the root: a killed udev
	// worker leaves the NIC unnamed and unconfigured.
	if !bytes.Contains(grubCfg, []byte("udev.event_timeout=900")) {
		t.Error("grub.cfg lacks udev.event_timeout=900")
	}
	if got := fs.Read("/etc/udev/udev.conf"); !bytes.Contains(got, []byte("\nevent_timeout=900\n")) {
		t.Errorf("udev.conf does not raise event_timeout: %q", got)
	}
	if got := fs.Read("/etc/systemd/system/vmmigration-booted.service"); !bytes.Contains(got, []byte(Marker)) {
		t.Errorf("boot marker unit does not print %s: %q", Marker, got)
	}
	if wants := fs.List("/etc/systemd/system/multi-user.target.wants"); !slices.Contains(wants, "vmmigration-booted.service") {
		t.Errorf("boot marker unit not enabled for multi-user.target (wants: %q)", wants)
	}

	checkInitramfs(t, fs)
}

// checkInitramfs: IDE and pvscsi drivers, no virtio or AHCI driver.
func checkInitramfs(t *testing.T, fs RootFS) {
	t.Helper()
	modules := fs.InitramfsModules()
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

// TestImageEFI checks the EFI variant: a GPT with an EFI system partition
// holding GRUB at the removable-media path and Debian's stub grub.cfg
// pointing at the root by UUID, the ESP in fstab, and the same
// VMware-style initramfs.
func TestImageEFI(t *testing.T) {
	img := ImageOf(t, EFI)
	t.Logf("guest image %s (build or reuse took %s)", img, BuildTime(EFI).Round(1e6))
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 34*SectorSize)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	if string(head[512:520]) != "EFI PART" {
		t.Fatalf("no GPT header: %q", head[512:520])
	}
	esp := "\x28\x73\x2a\xc1\x1f\xf8\xd2\x11\xba\x4b\x00\xa0\xc9\x3e\xc9\x3b"
	linuxFS := "\xaf\x3d\xc6\x0f\x83\x84\x72\x47\x8e\x79\x3d\x69\xd8\x47\x7d\xe4"
	entry := func(i int) (string, uint64, uint64) {
		e := head[1024+128*i:]
		return string(e[:16]), binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
	}
	if typ, first, last := entry(0); typ != esp || first != PartitionStart || last != PartitionStart+ESPSectors-1 {
		t.Errorf("partition 1: type % x, sectors %d-%d; want the EFI system partition at %d-%d", typ, first, last, PartitionStart, PartitionStart+ESPSectors-1)
	}
	if typ, first, _ := entry(1); typ != linuxFS || int64(first)*SectorSize != RootOffset(EFI) {
		t.Errorf("partition 2: type % x, first sector %d; want a Linux file system at byte %d", typ, first, RootOffset(EFI))
	}

	espDev := fmt.Sprintf("%s@@%d", img, PartitionStart*SectorSize)
	for _, name := range []string{"::/EFI/BOOT/BOOTX64.EFI", "::/EFI/debian/grub.cfg"} {
		out, err := exec.Command("mtype", "-i", espDev, name).Output()
		if err != nil || len(out) == 0 {
			t.Errorf("ESP lacks %s: %v", name, err)
			continue
		}
		if strings.HasSuffix(name, "grub.cfg") && !bytes.Contains(out, []byte("search.fs_uuid "+RootUUID)) {
			t.Errorf("%s does not find the root by UUID:\n%s", name, out)
		}
	}

	fs := OpenRootFS(t, img, EFI)
	if got := fs.Read("/etc/fstab"); !bytes.Contains(got, []byte(" /boot/efi vfat ")) {
		t.Errorf("fstab does not mount the ESP:\n%s", got)
	}
	if got := fs.Read("/boot/grub/grub.cfg"); !bytes.Contains(got, []byte("root=UUID="+RootUUID)) {
		t.Errorf("grub.cfg lacks root=UUID=%s", RootUUID)
	}
	checkInitramfs(t, fs)
}
