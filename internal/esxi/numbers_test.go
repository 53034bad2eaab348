package esxi

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func hasProblem(ps []Problem, sub string) bool {
	for _, p := range ps {
		if strings.Contains(p.String(), sub) {
			return true
		}
	}
	return false
}

// Numbers in a .vmx are bounded: nothing negative, zero or large enough to
// overflow a byte count reaches a VM's CPUs or memory.
func TestVMXHostileNumbers(t *testing.T) {
	for _, tc := range []struct {
		name, vmx   string
		cpus, cores int
		mem         int
		problem     string
	}{
		{"memSize past int64 bytes", "memSize = \"8796093022209\"\n", 1, 0, 0, "memSize"},
		{"memSize past int", "memSize = \"99999999999999999999999\"\n", 1, 0, 0, "out of range"},
		{"negative memSize", "memSize = \"-1024\"\n", 1, 0, 0, "memSize"},
		{"zero memSize", "memSize = \"0\"\nnumvcpus = \"2\"\n", 2, 0, 0, "memSize"},
		{"zero vcpus", "memSize = \"1024\"\nnumvcpus = \"0\"\n", 0, 0, 1024, "numvcpus"},
		{"huge vcpus", "memSize = \"1024\"\nnumvcpus = \"4294967297\"\n", 0, 0, 1024, "numvcpus"},
		{"cores not a divisor", "memSize = \"1024\"\nnumvcpus = \"4\"\ncpuid.coresPerSocket = \"3\"\n", 4, 0, 1024, "coresPerSocket"},
		{"negative cores", "memSize = \"1024\"\nnumvcpus = \"4\"\ncpuid.coresPerSocket = \"-2\"\n", 4, 0, 1024, "coresPerSocket"},
		{"sane", "memSize = \"8192\"\nnumvcpus = \"4\"\ncpuid.coresPerSocket = \"2\"\n", 4, 2, 8192, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, probs := ParseVMX(".encoding = \"UTF-8\"\ndisplayName = \"x\"\n" + tc.vmx)
			if c.CPUs != tc.cpus || c.CoresPerSocket != tc.cores || c.MemoryMiB != tc.mem {
				t.Errorf("CPUs %d cores %d memory %d MiB, want %d %d %d", c.CPUs, c.CoresPerSocket, c.MemoryMiB, tc.cpus, tc.cores, tc.mem)
			}
			if int64(c.MemoryMiB)<<20 < 0 {
				t.Errorf("memory %d MiB overflows in bytes", c.MemoryMiB)
			}
			switch {
			case tc.problem == "" && len(probs) > 0:
				t.Errorf("problems %v, want none", probs)
			case tc.problem != "" && !hasProblem(probs, tc.problem):
				t.Errorf("problems %v, want one about %q", probs, tc.problem)
			}
		})
	}
}

func TestVMSDAndSnapshotIDsNotNegative(t *testing.T) {
	v, probs := ParseVMSD("snapshot.current = \"-3\"\nsnapshot0.uid = \"-1\"\nsnapshot0.numDisks = \"0\"\n")
	if v.CurrentUID != 0 || len(v.Snapshots) != 1 || v.Snapshots[0].UID != 0 || !hasProblem(probs, "snapshot0.uid") {
		t.Errorf("VMSD %+v problems %v", v, probs)
	}
	snaps, probs := ParseSnapshotGet("Get Snapshot:\n|-ROOT\n--Snapshot Name        : s\n--Snapshot Id        : -7\n")
	for _, s := range snaps {
		if s.ID < 0 {
			t.Errorf("snapshot id %d", s.ID)
		}
	}
	if !hasProblem(probs, "snapshot id") {
		t.Errorf("problems %v, want one about the snapshot id", probs)
	}
}

func TestSummaryHostileNumbers(t *testing.T) {
	out := `(vim.vm.Summary) {
   config = (vim.vm.Summary.ConfigSummary) {
      name = "x",
      memorySizeMB = 8796093022209,
      numCpu = -4,
   },
   storage = (vim.vm.Summary.StorageSummary) {
      committed = -1,
   },
}`
	s, probs := ParseSummary(out)
	if s.MemoryMiB != 0 || s.CPUs != 0 || s.CommittedBytes != 0 {
		t.Errorf("summary memory %d cpus %d committed %d, want zeros", s.MemoryMiB, s.CPUs, s.CommittedBytes)
	}
	for _, want := range []string{"memorySizeMB", "numCpu", "committed"} {
		if !hasProblem(probs, want) {
			t.Errorf("problems %v, want one about %s", probs, want)
		}
	}
}

// hostileDescriptor has 65 extents of the largest size a single extent
// line may have: their sum overflows int64 bytes.
func hostileDescriptor() string {
	var sb strings.Builder
	sb.WriteString("# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"vmfs\"\n")
	for i := range 65 {
		fmt.Fprintf(&sb, "RW %d VMFS \"x-flat%d.vmdk\"\n", maxSectors, i)
	}
	return sb.String()
}

func TestDescriptorHostileNumbers(t *testing.T) {
	d, _ := ParseDescriptor(hostileDescriptor())
	if len(d.Extents) != 65 {
		t.Fatalf("%d extents parsed", len(d.Extents))
	}
	if n := d.CapacityBytes(); n != 0 {
		t.Errorf("CapacityBytes() = %d, want 0 for an overflowing sum", n)
	}
	if n, probs := DescriptorCapacity(d); n != 0 || len(probs) == 0 {
		t.Errorf("DescriptorCapacity = %d, %v", n, probs)
	}
	d.Extents = []Extent{{Sectors: -5}}
	if n := d.CapacityBytes(); n != 0 {
		t.Errorf("negative extent: CapacityBytes() = %d", n)
	}
	_, probs := ParseDescriptor("createType=\"vmfs\"\nRW 8 VMFS \"a.vmdk\" 99999999999999999999\n")
	if !hasProblem(probs, "offset") {
		t.Errorf("overflowing offset: problems %v", probs)
	}
	d, probs = ParseDescriptor("version=-1\ncreateType=\"vmfs\"\nRW 8 VMFS \"a.vmdk\"\n")
	if d.Version != 0 || !hasProblem(probs, "version") {
		t.Errorf("negative version %d, problems %v", d.Version, probs)
	}
}

func TestParseStatSize(t *testing.T) {
	const p = "/vmfs/volumes/ds1/vm/vm-flat.vmdk"
	for _, tc := range []struct {
		out  string
		want int64
		ok   bool
	}{
		{"8589934592 " + p + "\n", 8589934592, true},
		{"0 " + p, 0, true},
		{"-1 " + p + "\n", 0, false},
		{"+5 " + p + "\n", 0, false},
		{"9223372036854775808 " + p + "\n", 0, false},
		{"12 /vmfs/volumes/ds1/other\n", 0, false},
		{"12 " + p + "\n13 " + p + "\n", 0, false},
		{"", 0, false},
	} {
		n, err := ParseStatSize(tc.out, p)
		if n != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseStatSize(%q) = %d, %v; want %d, ok=%v", tc.out, n, err, tc.want, tc.ok)
		}
	}
}

// Against the simulated host: hostile numbers in one VM's files are that
// VM's problems, with its vmid, and never another VM's or host-wide.
func TestSimInventoryHostileNumbers(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	idBad, files, err := env.srv.AddVM(esxisim.VMSpec{Name: "bad", MemoryMiB: 1024, Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	idGood, _, err := env.srv.AddVM(esxisim.VMSpec{Name: "good", MemoryMiB: 2048, CPUs: 2, Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	vmxLocal := filepath.Join(files.LocalDir, path.Base(files.VMXPath))
	b, err := os.ReadFile(vmxLocal)
	if err != nil {
		t.Fatal(err)
	}
	vmx := strings.ReplaceAll(string(b), `memSize = "1024"`, `memSize = "8796093022209"`)
	if vmx == string(b) {
		t.Fatalf("no memSize line in\n%s", b)
	}
	if err := os.WriteFile(vmxLocal, []byte(vmx), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files.LocalDir, path.Base(files.Disks[0].Descriptor)), []byte(hostileDescriptor()), 0o644); err != nil {
		t.Fatal(err)
	}

	vms, hostProbs, err := env.client(t).Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range hostProbs {
		if p.HostWide {
			t.Errorf("host-wide problem: %v", p)
		}
	}
	var bad, good *VM
	for i := range vms {
		switch vms[i].VMID {
		case idBad:
			bad = &vms[i]
		case idGood:
			good = &vms[i]
		}
	}
	if bad == nil || good == nil {
		t.Fatalf("inventory %+v", vms)
	}
	if bad.MemoryMiB != 0 || int64(bad.MemoryMiB)<<20 < 0 {
		t.Errorf("hostile VM memory %d MiB", bad.MemoryMiB)
	}
	if len(bad.Disks) != 1 || bad.Disks[0].CapacityBytes != 0 {
		t.Errorf("hostile VM disks %+v, want one disk with capacity 0", bad.Disks)
	}
	if !hasProblem(bad.Problems, "memSize") || !hasProblem(bad.Problems, "overflows") {
		t.Errorf("hostile VM problems %v, want memSize and the capacity overflow", bad.Problems)
	}
	for _, p := range bad.Problems {
		if p.VMID != idBad || p.HostWide {
			t.Errorf("problem %v has vmid %d host-wide %v, want vmid %d", p, p.VMID, p.HostWide, idBad)
		}
	}
	if len(good.Problems) != 0 || good.MemoryMiB != 2048 || good.Disks[0].CapacityBytes != 1<<20 {
		t.Errorf("the other VM is affected: problems %v memory %d disks %+v", good.Problems, good.MemoryMiB, good.Disks)
	}
}

func TestGetAllVMsHostileVMIDs(t *testing.T) {
	out := "Vmid   Name   File   Guest OS   Version   Annotation\n" +
		"99999999999999999999   big    [ds1] big/big.vmx   otherGuest   vmx-13\n" +
		"Skipping invalid VM '0'\n" +
		"Skipping invalid VM '99999999999999999999'\n" +
		"Skipping invalid VM '12'\n"
	got, probs := ParseGetAllVMs(out)
	if len(got.VMs) != 0 {
		t.Errorf("VMs %+v, want none", got.VMs)
	}
	if len(got.Skipped) != 1 || got.Skipped[0] != 12 {
		t.Errorf("Skipped %v, want [12]", got.Skipped)
	}
	if len(probs) != 3 {
		t.Errorf("problems %v, want one per unusable vmid", probs)
	}
}

// vtpm.present is read as VMware writes it; anything else is the VM's
// problem, not a TPM.
func TestVMXVirtualTPM(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    bool
		problem bool
	}{{"TRUE", true, false}, {"FALSE", false, false}, {"maybe", false, true}} {
		c, probs := ParseVMX(".encoding = \"UTF-8\"\nmemSize = \"1024\"\nvtpm.present = \"" + tc.value + "\"\n")
		if c.VTPM != tc.want || hasProblem(probs, "vtpm.present") != tc.problem {
			t.Errorf("vtpm.present = %q: VTPM %v problems %v", tc.value, c.VTPM, probs)
		}
	}
	if c, _ := ParseVMX("memSize = \"1024\"\n"); c.VTPM {
		t.Error("a .vmx without vtpm.present has a TPM")
	}
}
