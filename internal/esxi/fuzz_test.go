package esxi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addSamples seeds f with every sample (source line stripped) whose name
// matches one of the substrings, plus their uncommented forms.
func addSamples(f *testing.F, subs ...string) {
	entries, err := os.ReadDir(filepath.Join("testdata", "samples"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		for _, s := range subs {
			if strings.Contains(e.Name(), s) {
				body := loadSample(f, e.Name())
				f.Add(body)
				f.Add(uncomment(body))
				break
			}
		}
	}
}

func FuzzParseGetAllVMs(f *testing.F) {
	addSamples(f, "getallvms", "inventory")
	f.Fuzz(func(t *testing.T, s string) {
		got, _ := ParseGetAllVMs(s)
		for _, v := range got.VMs {
			if v.VMID <= 0 {
				t.Fatalf("vmid %d", v.VMID)
			}
		}
	})
}

func FuzzParseVMX(f *testing.F) {
	addSamples(f, ".vmx", ".vmsd")
	f.Fuzz(func(t *testing.T, s string) {
		c, _ := ParseVMX(s)
		for _, d := range c.Disks {
			_, _ = ResolveDiskPath("/vmfs/volumes/ds/vm/vm.vmx", d.FileName)
		}
		_, _ = ParseVMSD(s)
	})
}

func FuzzParseDescriptor(f *testing.F) {
	addSamples(f, "vmdk")
	f.Fuzz(func(t *testing.T, s string) {
		d, _ := ParseDescriptor(s)
		if d.CapacityBytes() < 0 {
			t.Fatalf("negative capacity %d", d.CapacityBytes())
		}
	})
}

func FuzzParseSnapshotGet(f *testing.F) {
	addSamples(f, "snapshot")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseSnapshotGet(s)
	})
}

// FuzzParseVimDump covers get.guest, get.summary and fault detection.
func FuzzParseVimDump(f *testing.F) {
	addSamples(f, "get_", "get-", "vcl-", "getstate")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseGuestInfo(s)
		_, _ = ParseSummary(s)
		_ = ParseFault(s)
		_, _ = ParsePowerState(s)
		_, _ = ParseVMInventory(s)
	})
}
