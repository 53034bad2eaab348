package testguest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
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

	fs := OpenRootFS(t, img)

	grubCfg := fs.Read("/boot/grub/grub.cfg")
	for _, s := range []string{"root=UUID=" + RootUUID, "console=ttyS0,115200n8", "terminal_output serial"} {
		if !bytes.Contains(grubCfg, []byte(s)) {
			t.Errorf("grub.cfg lacks %q", s)
		}
	}
	if got := fs.Read("/etc/systemd/system/vmmigration-booted.service"); !bytes.Contains(got, []byte(Marker)) {
		t.Errorf("boot marker unit does not print %s: %q", Marker, got)
	}
	if wants := fs.List("/etc/systemd/system/multi-user.target.wants"); !slices.Contains(wants, "vmmigration-booted.service") {
		t.Errorf("boot marker unit not enabled for multi-user.target (wants: %q)", wants)
	}

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
