package esxi

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// chainVM adds a VM whose one disk runs on the standard three-level chain
// (mid and top deltas over a thin base on another datastore).
func chainVM(t *testing.T, env *simEnv, name string, mid, top vmdk.Format) (int, esxisim.DiskFiles) {
	t.Helper()
	const capacity = 24 << 20
	cs, err := esxisim.SnapshotChainSpec("datastore1", name, name, capacity, mid, top, "datastore2")
	if err != nil {
		t.Fatal(err)
	}
	id, f, err := env.srv.AddVM(esxisim.VMSpec{Name: name, Snapshots: true, Disks: []esxisim.DiskSpec{{
		CapacityBytes: capacity, Thin: true, Content: cs.Base, Deltas: cs.Deltas, BaseDatastore: "datastore2"}}})
	if err != nil {
		t.Fatal(err)
	}
	return id, f.Disks[0]
}

func TestInventoryChainFromSimulatedSnapshots(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	id, fd := chainVM(t, env, "chained", vmdk.SESparse, vmdk.VMFSSparse)
	vm, err := env.client(t).VM(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	wantNoProblems(t, vm.Problems)
	d := vm.Disks[0]
	if !d.Thin || !d.OnSnapshotDelta || d.DescriptorPath != fd.Chain.Top {
		t.Errorf("disk %+v: want thin (from the base), on a delta, descriptor %s", d, fd.Chain.Top)
	}
	ch := d.Chain
	if ch == nil || !ch.Complete || len(ch.Problems) != 0 || len(ch.Links) != 3 {
		t.Fatalf("chain %+v", ch)
	}
	var sum int64
	for i, l := range ch.Links {
		want := fd.Chain.Links[i]
		fi, err := os.Stat(want.LocalExtent)
		if err != nil {
			t.Fatal(err)
		}
		if l.DescriptorPath != want.Descriptor || len(l.ExtentPaths) != 1 || l.ExtentPaths[0] != want.Extent ||
			!strings.EqualFold(l.CreateType, string(want.Format)) || l.ExtentBytes != fi.Size() {
			t.Errorf("link %d = %+v, want %+v (extent %d bytes)", i, l, want, fi.Size())
		}
		sum += fi.Size()
	}
	if base := ch.Links[2]; !strings.HasPrefix(base.DescriptorPath, "/vmfs/volumes/datastore2/") || !base.Thin {
		t.Errorf("base %+v: want the thin base on datastore2", base)
	}
	if ch.CopyBytes != sum || ch.CapacityBytes != fd.CapacityBytes || !ch.BaseThin {
		t.Errorf("copy %d (want %d), capacity %d (want %d), base thin %v", ch.CopyBytes, sum, ch.CapacityBytes, fd.CapacityBytes, ch.BaseThin)
	}
}

func TestInventoryChainBrokenParents(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	idMissing, fm := chainVM(t, env, "lost", vmdk.VMFSSparse, vmdk.SESparse)
	if err := os.Remove(fm.Chain.Links[2].LocalDescriptor); err != nil {
		t.Fatal(err)
	}
	idCID, fc := chainVM(t, env, "changed", vmdk.VMFSSparse, vmdk.SESparse)
	p := fc.Chain.Links[1].LocalDescriptor
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The middle link's CID changes after the top was taken from it.
	cid := fmt.Sprintf("%08x", fc.Chain.Links[1].CID)
	b = []byte(strings.Replace(string(b), "\nCID="+cid, fmt.Sprintf("\nCID=%08x", fc.Chain.Links[1].CID^1), 1))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	for _, tc := range []struct {
		id   int
		want string
	}{{idMissing, "descriptor could not be read"}, {idCID, "parentCID="}} {
		vm, err := c.VM(ctxT(t), tc.id)
		if err != nil {
			t.Fatal(err)
		}
		ch := vm.Disks[0].Chain
		if ch == nil || ch.Complete {
			t.Fatalf("vm %d chain %+v: want an incomplete chain", tc.id, ch)
		}
		found := false
		for _, pr := range ch.Problems {
			found = found || strings.Contains(pr.Message, tc.want)
		}
		if !found {
			t.Errorf("vm %d problems %+v, want one saying %q", tc.id, ch.Problems, tc.want)
		}
		if vm.Disks[0].Thin {
			t.Errorf("vm %d: thin without a complete chain", tc.id)
		}
	}
}

// wantGrainBytes is what a delta written by the simulator holds past its
// metadata: its grains, plus the grain tables ESXi appends among them in
// a vmfsSparse delta.
func wantGrainBytes(st *vmdk.ExtentStats) int64 {
	n := st.DataGrains * st.Format.GrainSize()
	if st.Format == vmdk.VMFSSparse {
		n += st.GrainTables * 4096 * 4
	}
	return n
}

func TestInventoryChainDeltaAllocatedBytes(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	idA, fa := chainVM(t, env, "sevmfs", vmdk.SESparse, vmdk.VMFSSparse)
	idB, fb := chainVM(t, env, "vmfsse", vmdk.VMFSSparse, vmdk.SESparse)
	idC, fc := chainVM(t, env, "hostile", vmdk.SESparse, vmdk.VMFSSparse)
	// The hostile VM's top delta claims a next free sector past its end.
	top, err := os.OpenFile(fc.Chain.Links[0].LocalExtent, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := top.WriteAt([]byte{0xff, 0xff, 0xff, 0x7f}, 28); err != nil {
		t.Fatal(err)
	}
	top.Close()
	// A running VM locks the delta it writes: its header cannot be read.
	cs, err := esxisim.SnapshotChainSpec("datastore1", "running", "running", 24<<20, vmdk.VMFSSparse, vmdk.SESparse, "")
	if err != nil {
		t.Fatal(err)
	}
	idD, fdf, err := env.srv.AddVM(esxisim.VMSpec{Name: "running", Snapshots: true, Power: esxisim.PoweredOn,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 24 << 20, Thin: true, Content: cs.Base, Deltas: cs.Deltas}}})
	if err != nil {
		t.Fatal(err)
	}
	fd := fdf.Disks[0]

	vms, _, err := env.client(t).Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int]VM{}
	for _, vm := range vms {
		byID[vm.VMID] = vm
	}
	for _, tc := range []struct {
		id int
		f  esxisim.DiskFiles
	}{{idA, fa}, {idB, fb}} {
		ch := byID[tc.id].Disks[0].Chain
		if ch == nil || !ch.Complete || len(ch.Links) != 3 {
			t.Fatalf("vm %d chain %+v", tc.id, ch)
		}
		for i, l := range ch.Links[:2] {
			st := tc.f.Chain.Links[i].Stats
			if want := wantGrainBytes(st); l.AllocatedBytes != want || want <= 0 {
				t.Errorf("vm %d %s: allocated %d, want %d (%d grains, %d grain tables)", tc.id, l.CreateType, l.AllocatedBytes, want, st.DataGrains, st.GrainTables)
			}
			if l.AllocatedBytes > l.ExtentBytes {
				t.Errorf("vm %d %s: allocated %d exceeds the file's %d bytes", tc.id, l.CreateType, l.AllocatedBytes, l.ExtentBytes)
			}
		}
		if base := ch.Links[2]; base.AllocatedBytes != -1 {
			t.Errorf("vm %d thin base: allocated %d, want -1 (unknown)", tc.id, base.AllocatedBytes)
		}
	}

	ch := byID[idC].Disks[0].Chain
	if ch == nil || ch.Complete || ch.Links[0].AllocatedBytes != -1 {
		t.Fatalf("hostile chain %+v: want incomplete, the top's allocation unknown", ch)
	}
	found := false
	for _, p := range ch.Problems {
		found = found || p.Source == fc.Chain.Links[0].Extent && strings.Contains(p.Message, "next free sector")
	}
	if !found {
		t.Errorf("hostile chain problems %+v: want one about the top delta's next free sector", ch.Problems)
	}
	if want := wantGrainBytes(fc.Chain.Links[1].Stats); ch.Links[1].AllocatedBytes != want {
		t.Errorf("hostile chain's sound middle delta: allocated %d, want %d", ch.Links[1].AllocatedBytes, want)
	}

	ch = byID[idD].Disks[0].Chain
	if ch == nil || !ch.Complete || len(ch.Problems) != 0 {
		t.Fatalf("running VM's chain %+v: a locked delta is no problem of the chain", ch)
	}
	if ch.Links[0].AllocatedBytes != -1 || ch.Links[0].ExtentBytes <= 0 {
		t.Errorf("running VM's locked top delta: allocated %d (want -1, unknown), length %d", ch.Links[0].AllocatedBytes, ch.Links[0].ExtentBytes)
	}
	if want := wantGrainBytes(fd.Chain.Links[1].Stats); ch.Links[1].AllocatedBytes != want {
		t.Errorf("running VM's older delta: allocated %d, want %d", ch.Links[1].AllocatedBytes, want)
	}

	// Each delta header is read in the same exec as the extent lengths,
	// quoted, one sector.
	dds := 0
	for _, c := range env.srv.Commands() {
		for _, line := range strings.Split(c, "\n") {
			if !strings.Contains(line, "; dd ") {
				continue
			}
			dds++
			if !strings.Contains(line, "dd 'if=/vmfs/volumes/") || !strings.Contains(line, " bs=512 skip=0 count=1 ") {
				t.Errorf("header read %q: want a quoted path, one 512-byte sector", line)
			}
			if !strings.Contains(c, "stat -c ") {
				t.Errorf("header read in an exec without the stat of the lengths:\n%s", c)
			}
		}
	}
	if dds != 8 {
		t.Errorf("%d delta header reads, want 8 (two deltas in each of four VMs)", dds)
	}
}
