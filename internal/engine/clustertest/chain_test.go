//go:build linux

package clustertest

import (
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// A VM whose disks run on snapshots is migrated in cluster execution: each
// copy Job flattens its disk's chain in the claim (the base copied, each
// delta applied in place), so the claims hold what the guest saw, the
// record holds every chain file's size and SHA-256 and the guest-visible
// SHA-256 as local execution records them, each claim asks for exactly
// its disk and holds it alone (the delta copies were kept in the disk's
// journal claim, made for each disk and gone at Completed), and the
// source's chain was only read.
func TestSnapshotChainFlattenedInCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const size = 32 * mib
	cs, err := esxisim.SnapshotChainSpec("datastore1", "cx-snap", "cx-snap", size, vmdk.SESparse, vmdk.VMFSSparse, "")
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := e.host.AddVM(esxisim.VMSpec{Name: "cx-snap", Snapshots: true,
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: size, Thin: true, Content: cs.Base, Deltas: cs.Deltas},
			{CapacityBytes: 24 * mib, Content: []esxisim.Extent{{Offset: 0, Length: 24 * mib, Seed: 31}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, d := range files.Disks {
		for _, l := range d.Chain.Links {
			before[l.LocalExtent] = fileSHA256(t, l.LocalExtent)
		}
	}
	rec := e.mustComplete(e.spec("cx-snap", "cx-snap"))

	for i, d := range rec.Disks {
		want := files.Disks[i].SHA256()
		if d.SourceSHA256 != want || d.GuestSHA256 != want {
			t.Errorf("disk %d: recorded source %s, guest %s; the chain reads %s", i, d.SourceSHA256, d.GuestSHA256, want)
		}
		img := e.sim.ReceivedPath(e.ns, d.DataVolume)
		if got, err := convert.FileSHA256(img); err != nil || got != want {
			t.Errorf("disk %d: claim holds %s (%v), the chain reads %s", i, got, err, want)
		}
		var extents int
		for _, f := range d.Chain {
			if f.Kind != record.ChainFileExtent {
				continue
			}
			extents++
			if f.Bytes <= 0 || len(f.SHA256) != 64 {
				t.Errorf("disk %d: chain file %s recorded as %d bytes, SHA-256 %q", i, f.SourcePath, f.Bytes, f.SHA256)
			}
		}
		if extents != len(files.Disks[i].Chain.Links) {
			t.Errorf("disk %d: %d extents recorded, the chain has %d links", i, extents, len(files.Disks[i].Chain.Links))
		}
	}
	e.checkClaimsHoldDisks(rec)
	if n := len(e.messages("keeps the copy's journal and side files beside the claim")); n != 2 {
		t.Errorf("%d journal claims made, want one per disk", n)
	}
	for p, sum := range before {
		if got := fileSHA256(t, p); got != sum {
			t.Errorf("source chain file %s changed", p)
		}
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	e.checkCleanedUp("cx-snap")
}
