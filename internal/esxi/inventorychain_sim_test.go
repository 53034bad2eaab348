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
