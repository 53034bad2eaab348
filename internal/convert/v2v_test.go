package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
)

func TestV2VProbe(t *testing.T) {
	var v V2V
	tools, err := v.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tools.Version, "2.") || tools.NBDKitVersion == "" {
		t.Errorf("versions: virt-v2v %q nbdkit %q, want virt-v2v 2.x and an nbdkit version", tools.Version, tools.NBDKitVersion)
	}
	for _, name := range []string{"virt-v2v", "virt-v2v-in-place", "virt-inspector", "nbdkit", "nbdinfo"} {
		if tools.Paths[name] == "" {
			t.Errorf("no path for %s", name)
		}
	}
}

// TestV2VProbeMissing runs Probe with a PATH holding none of the tools:
// the error must name the packages to install.
func TestV2VProbeMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var v V2V
	_, err := v.Probe(context.Background())
	if !errors.Is(err, ErrV2VMissing) {
		t.Fatalf("Probe: %v, want ErrV2VMissing", err)
	}
	for _, want := range []string{"virt-v2v-in-place is not installed", "nbdkit libnbd-bin", "scripts/ensure-guest-deps.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestV2VWindowsWithoutDrivers refuses a Windows guest when virtio-win is
// not there, before virt-v2v-in-place touches the disk.
func TestV2VWindowsWithoutDrivers(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "win.raw")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(disk)
	for name, dir := range map[string]string{"absent": filepath.Join(t.TempDir(), "none"), "empty": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			v := V2V{VirtioWin: dir}
			_, err := v.Convert(context.Background(), []V2VDisk{{Path: disk, Format: Raw}},
				V2VOptions{OS: &InspectedOS{Type: "windows", Distro: "windows", Major: 10}})
			if !errors.Is(err, ErrNoVirtioWin) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Convert: %v, want ErrNoVirtioWin naming %s", err, dir)
			}
		})
	}
	t.Run("from $VIRTIO_WIN", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "virtio-win.iso")
		t.Setenv(EnvVirtioWin, dir)
		var v V2V
		_, err := v.Convert(context.Background(), []V2VDisk{{Path: disk, Format: Raw}},
			V2VOptions{OS: &InspectedOS{Type: "windows"}})
		if !errors.Is(err, ErrNoVirtioWin) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Convert: %v, want ErrNoVirtioWin naming $VIRTIO_WIN %s", err, dir)
		}
	})
	if after, _ := os.ReadFile(disk); string(after) != string(before) {
		t.Error("the disk changed")
	}
}

// TestReadMessages reads the output of a real virt-v2v-in-place run
// (stdout and stderr together, as a terminal shows them).
func TestReadMessages(t *testing.T) {
	out, err := os.ReadFile("testdata/v2v-in-place-debian12.out")
	if err != nil {
		t.Fatal(err)
	}
	var ev V2VEvidence
	ev.readMessages(out)
	if ev.Converted != "Converting 12.15 to run on KVM" {
		t.Errorf("Converted %q", ev.Converted)
	}
	if !slices.Equal(ev.Drivers, []string{"This guest has virtio drivers installed."}) {
		t.Errorf("Drivers %q", ev.Drivers)
	}
	if !slices.Equal(ev.Warnings, []string{"could not determine a way to update the configuration of Grub2"}) {
		t.Errorf("Warnings %q", ev.Warnings)
	}
	if len(ev.Messages) != 12 || ev.Messages[0] != "Setting up the source: -i disk /tmp/conv.raw" || ev.Messages[11] != "Finishing off" {
		t.Errorf("Messages (%d) %q", len(ev.Messages), ev.Messages)
	}
}

func TestDetectFirmware(t *testing.T) {
	dir := t.TempDir()
	mbr := make([]byte, 64<<10)
	mbr[510], mbr[511] = 0x55, 0xaa
	gpt := func(partType []byte) []byte {
		b := make([]byte, 64<<10)
		copy(b[512:], "EFI PART")
		// Entries from LBA 2, 128 of 128 bytes each.
		b[512+72] = 2
		b[512+80] = 128
		b[512+84] = 128
		copy(b[1024+128:], partType) // the second entry
		return b
	}
	linuxFS := []byte{0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4}
	for _, tc := range []struct {
		name string
		img  []byte
		want string
	}{
		{"mbr", mbr, FirmwareBIOS},
		{"gpt-esp", gpt(espType), FirmwareUEFI},
		{"gpt-no-esp", gpt(linuxFS), FirmwareBIOS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".raw")
			if err := os.WriteFile(p, tc.img, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := detectFirmware(context.Background(), V2VDisk{Path: p, Format: Raw})
			if err != nil || got != tc.want {
				t.Errorf("raw: %q, %v; want %q", got, err, tc.want)
			}
			// The same disk as qcow2, read through qemu-img.
			q := filepath.Join(dir, tc.name+".qcow2")
			var tool Tool
			if _, err := tool.run(context.Background(), "convert", "-f", "raw", "-O", "qcow2", p, q); err != nil {
				t.Fatal(err)
			}
			got, err = detectFirmware(context.Background(), V2VDisk{Path: q, Format: QCOW2})
			if err != nil || got != tc.want {
				t.Errorf("qcow2: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestDetectFirmwareGuests reads the real guest images: the MBR one boots
// with BIOS, the GPT one with an EFI system partition with UEFI.
func TestDetectFirmwareGuests(t *testing.T) {
	for v, want := range map[testguest.Variant]string{testguest.BIOS: FirmwareBIOS, testguest.EFI: FirmwareUEFI} {
		got, err := detectFirmware(context.Background(), V2VDisk{Path: testguest.ImageOf(t, v), Format: Raw})
		if err != nil || got != want {
			t.Errorf("%s image: %q, %v; want %q", v, got, err, want)
		}
	}
}

func TestInputArgs(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a&b.raw")
	b := filepath.Join(dir, "b.qcow2")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	one, err := inputArgs([]V2VDisk{{Path: a, Format: Raw}}, dir)
	if err != nil || strings.Join(one, " ") != "-i disk -if raw "+a {
		t.Errorf("one disk: %q, %v", one, err)
	}
	two, err := inputArgs([]V2VDisk{{Path: a, Format: Raw}, {Path: b, Format: QCOW2}}, dir)
	if err != nil || len(two) != 3 || two[1] != "libvirtxml" {
		t.Fatalf("two disks: %q, %v", two, err)
	}
	domain, err := os.ReadFile(two[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"<driver name='qemu' type='raw'/><source file='" + filepath.Join(dir, "a&amp;b.raw") + "'/><target dev='sda'",
		"<driver name='qemu' type='qcow2'/><source file='" + b + "'/><target dev='sdb'",
	} {
		if !strings.Contains(string(domain), want) {
			t.Errorf("domain XML lacks %q:\n%s", want, domain)
		}
	}
	if _, err := inputArgs([]V2VDisk{{Path: a, Format: VMDK}}, dir); err == nil {
		t.Error("a vmdk disk was accepted")
	}
}
