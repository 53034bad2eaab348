package provider_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func sortStrings(s []string) { sort.Strings(s) }

// addTrapVMs fills a simulated host with the VMs whose names, paths and
// files are the traps real hosts set for parsers: display names with
// spaces, parentheses and brackets, a multi-line annotation whose later line
// starts with digits, a datastore name with a colon, disks in a subfolder and
// on another datastore, a `..` in a disk path (inside and escaping the
// datastores), snapshots, two VMs with one name, and a registered VM whose
// .vmx is gone (getallvms prints "Skipping invalid VM").
func addTrapVMs(t *testing.T, host *acctest.ESXiHost) {
	t.Helper()
	host.AddVM(t, esxisim.VMSpec{
		Name: "web 01 (prod) [eu]", GuestOS: "rhel9-64", CPUs: 2, MemoryMiB: 4096, HardwareVersion: 19,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Thin: true}},
		NICs: []esxisim.NICSpec{
			{Network: "VM Network", MAC: "00:50:56:01:02:03"},
			{Network: "DMZ (vlan 20)", MAC: "00:50:56:01:02:04", Adapter: "e1000e"},
		},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.1.2.3"},
		Annotation: "Owner: team-a\n2024 moved from rack 7\nline three",
	})
	host.AddVM(t, esxisim.VMSpec{
		Name: "efi-sb", Datastore: "san:gold", GuestOS: "windows2019srv-64", Firmware: "efi", SecureBoot: true,
		CPUs: 4, MemoryMiB: 8192, HardwareVersion: 14,
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: 4 << 20},
			{CapacityBytes: 2 << 20, Subdir: "data", Controller: "sata0:1", Thin: true},
			{CapacityBytes: 1 << 20, Datastore: "datastore2", Controller: "nvme0:0"},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:0a:0b:0c"}},
		Power: esxisim.PoweredOff,
	})
	host.AddVM(t, esxisim.VMSpec{Name: "snap", Snapshots: true, Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	host.AddVM(t, esxisim.VMSpec{Name: "dup", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	host.AddVM(t, esxisim.VMSpec{Name: "dup", Datastore: "datastore2", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})

	// A disk named through ".." that stays on the datastore, and one that
	// tries to leave /vmfs/volumes.
	_, dotdot := host.AddVM(t, esxisim.VMSpec{Name: "dotdot", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}, {CapacityBytes: 1 << 20}}})
	rewriteVMX(t, dotdot.LocalDir, "dotdot.vmx", func(vmx string) string {
		vmx = strings.Replace(vmx, `scsi0:0.fileName = "dotdot.vmdk"`, `scsi0:0.fileName = "../dotdot/dotdot.vmdk"`, 1)
		return strings.Replace(vmx, `scsi0:1.fileName = "dotdot_1.vmdk"`, `scsi0:1.fileName = "../../../../etc/shadow.vmdk"`, 1)
	})

	// Registered, then its .vmx disappears.
	_, gone := host.AddVM(t, esxisim.VMSpec{Name: "gone"})
	if err := os.Remove(filepath.Join(gone.LocalDir, "gone.vmx")); err != nil {
		t.Fatal(err)
	}
}

func rewriteVMX(t *testing.T, dir, name string, edit func(string) string) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	after := edit(string(b))
	if after == string(b) {
		t.Fatalf("rewriteVMX: %s unchanged; the fixture no longer matches the simulator's .vmx", p)
	}
	if err := os.WriteFile(p, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
}

// breakChain removes the base descriptor of a snapshot VM's first disk, as
// when a datastore holding it is gone: a chain that cannot be migrated.
func breakChain(t *testing.T, files *esxisim.VMFiles) {
	t.Helper()
	links := files.Disks[0].Chain.Links
	if err := os.Remove(links[len(links)-1].LocalDescriptor); err != nil {
		t.Fatal(err)
	}
}
