package esxi

import (
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// Creating a snapshot twice by one name makes one snapshot; a create whose
// reply was lost after the host took it is found by name, not taken again;
// removal by id is idempotent and leaves other snapshots alone.
func TestSimSnapshotCreateRemove(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	id, _, err := env.srv.AddVM(esxisim.VMSpec{Name: "web", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}, Power: esxisim.PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	ctx := ctxT(t)
	keep, err := c.SnapshotCreate(ctx, id, "before upgrade", "kept by the owner")
	if err != nil {
		t.Fatal(err)
	}
	name := `vmmigration 'web'; $(reboot)`
	env.srv.DropAfterRunning("snapshot.create", 1)
	if _, err := c.SnapshotCreate(ctx, id, name, "taken by a migration"); err == nil {
		t.Fatal("the lost reply was not reported")
	}
	if env.srv.LostReplies() != 1 {
		t.Fatalf("LostReplies() = %d, want 1", env.srv.LostReplies())
	}
	got, err := c.SnapshotCreate(ctx, id, name, "taken by a migration")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.SnapshotCreate(ctx, id, name, "taken by a migration")
	if err != nil || again.ID != got.ID {
		t.Fatalf("second create: %+v, %v; want snapshot %d", again, err, got.ID)
	}
	tree, err := c.Snapshots(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	all := FindSnapshots(tree, func(Snapshot) bool { return true })
	if len(all) != 2 || all[0].ID != keep.ID || all[1].Name != name || all[1].Description != "taken by a migration" || got.ID == keep.ID {
		t.Fatalf("tree %+v, want the owner's snapshot and one named %q", all, name)
	}
	env.srv.DropAfterRunning("snapshot.remove", 1)
	if err := c.SnapshotRemove(ctx, id, got.ID); err == nil {
		t.Fatal("the lost reply was not reported")
	}
	if err := c.SnapshotRemove(ctx, id, got.ID); err != nil {
		t.Fatalf("removing a removed snapshot: %v", err)
	}
	s, err := c.SnapshotByName(ctx, id, name)
	if err != nil || s != nil {
		t.Fatalf("SnapshotByName after removal: %+v, %v", s, err)
	}
	if s, err := c.SnapshotByName(ctx, id, "before upgrade"); err != nil || s == nil || s.ID != keep.ID {
		t.Fatalf("the owner's snapshot: %+v, %v", s, err)
	}
}
