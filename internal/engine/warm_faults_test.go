package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// The host takes the migration snapshot but the answer is lost: the retry
// finds the snapshot by name instead of taking a second one, and the
// migration completes with one snapshot, removed at the end. The host
// takes seSparse snapshots, as on VMFS 6.
func TestWarmSnapshotCreateReplyLost(t *testing.T) {
	e := newEnv(t)
	e.host.SetSnapshotFormat(vmdk.SESparse)
	id, files, m := addWarmVM(t, e, "lostsnap")
	node := files.Disks[0].Controller
	hook := func(ev engine.Event) {
		if strings.Contains(ev.Message, "precopy round 1 of 1: copied") {
			m.write(t, e.host, id, node, 6<<20, 12<<10, 11)
		}
	}
	e.onEvent.Store(&hook)
	defer e.onEvent.Store(nil)
	spec := e.spec("lostsnap", "lostsnap")
	spec.Mode = engine.ModeWarm
	e.host.DropAfterRunning("snapshot.create", 1)
	rec := e.mustComplete(e.engine(), spec)
	if e.host.LostReplies() != 1 {
		t.Fatalf("LostReplies() = %d, want 1", e.host.LostReplies())
	}
	if n := len(e.commands("snapshot.create")); n != 1 {
		t.Errorf("%d snapshot.create commands, want 1", n)
	}
	if w := rec.Warm; w == nil || len(w.Snapshots) != 1 || w.Snapshots[0].ID <= 0 || !w.Snapshots[0].Removed {
		t.Fatalf("warm evidence %+v", rec.Warm)
	}
	if f := rec.Disks[0].Chain; len(f) == 0 || f[0].Format != string(vmdk.SESparse) {
		t.Errorf("the chain copied at cutover is %+v, want a seSparse top", f)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "lostsnap-disk-0"); got != m.sha() {
		t.Errorf("received %s, want %s", got, m.sha())
	}
	sourceClean(t, e, id, files, "lostsnap", m.sha())
}

// Interrupted during the precopy, and again during the cutover copy, a
// warm migration resumes in a new process without a second snapshot or a
// second power-off, and the destination holds what the guest wrote up to
// the power-off.
func TestWarmResumesAfterInterruptions(t *testing.T) {
	e := newEnv(t)
	id, files, m := addWarmVM(t, e, "resumewarm")
	node := files.Disks[0].Controller
	spec := e.spec("resumewarm", "resumewarm")
	spec.Mode = engine.ModeWarm

	run := func(stopAt func(engine.Event) bool, write func()) (record.Record, error) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		hook := func(ev engine.Event) {
			if stopAt(ev) {
				if write != nil {
					write()
					write = nil
				}
				cancel()
			}
		}
		e.onEvent.Store(&hook)
		defer e.onEvent.Store(nil)
		return e.engine().Run(ctx, spec)
	}
	interrupted := func(err error, phase record.Phase) {
		t.Helper()
		var se *engine.StopError
		if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != phase {
			t.Fatalf("Run = %v, want an interruption in %s", err, phase)
		}
	}
	e.host.SetCommandDelay(20 * time.Millisecond)
	_, err := run(func(ev engine.Event) bool {
		return ev.Kind == engine.EventProgress && strings.HasPrefix(ev.Message, "precopy:") && ev.BytesDone >= 4<<20
	}, func() { m.write(t, e.host, id, node, 1<<20, 16<<10, 7) })
	interrupted(err, record.PhasePreparing)
	_, err = run(func(ev engine.Event) bool { return strings.HasPrefix(ev.Message, "cutover:") }, nil)
	interrupted(err, record.PhasePreparing)
	e.host.SetCommandDelay(0)
	rec := e.mustComplete(e.engine(), spec)

	if n := len(e.commands("snapshot.create")); n != 1 {
		t.Errorf("%d snapshot.create commands, want 1", n)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power commands, want 1", n)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "resumewarm-disk-0"); got != m.sha() || rec.Disks[0].GuestSHA256 != m.sha() {
		t.Errorf("received %s, guest %s, want %s", got, rec.Disks[0].GuestSHA256, m.sha())
	}
	if w := rec.Warm; w == nil || len(w.Snapshots) != 1 || !w.Snapshots[0].Removed || w.CutoverBytes <= 0 || w.CutoverBytes > warmCapacity/8 {
		t.Errorf("warm evidence %+v", rec.Warm)
	}
	sourceClean(t, e, id, files, "resumewarm", m.sha())
}

// Destroyed with rollback after the precopy, a warm migration removes its
// snapshot and leaves the running source as it was, its guest's writes
// consolidated into its base; a snapshot the owner took before is kept.
func TestWarmRollbackRemovesSnapshots(t *testing.T) {
	e := newEnv(t)
	id, files, m := addWarmVM(t, e, "rollwarm")
	node := files.Disks[0].Controller
	c, err := e.reg.Client(hostName)
	if err != nil {
		t.Fatal(err)
	}
	spec := e.spec("rollwarm", "rollwarm")
	spec.Mode = engine.ModeWarm
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hook := func(ev engine.Event) {
		if strings.Contains(ev.Message, "precopy round 1 of 1: copied") {
			m.write(t, e.host, id, node, 2<<20, 8<<10, 9)
			cancel()
		}
	}
	e.onEvent.Store(&hook)
	en := e.engine()
	rec, err := en.Run(ctx, spec)
	e.onEvent.Store(nil)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted {
		t.Fatalf("Run = %v, want an interruption", err)
	}
	if rec.Warm == nil || len(rec.Warm.Snapshots) != 1 || rec.Warm.Snapshots[0].ID <= 0 || rec.Warm.CutoverStarted != nil {
		t.Fatalf("after the precopy: warm %+v, power-off %+v", rec.Warm, rec.PowerOff)
	}
	// The owner's own snapshot, taken on top of the migration's.
	keep, err := c.SnapshotCreate(e.ctx(10*time.Second), id, "owner's", "")
	if err != nil {
		t.Fatal(err)
	}
	m.write(t, e.host, id, node, 5<<20, 4<<10, 10)
	// A rollback must leave the source as it was: a host that cannot
	// remove the snapshot stops it, and the record stays for a retry.
	e.host.FailVimCmd(100, esxisim.VimLoginReset)
	if _, err := en.Forget(t.Context(), e.ns, "rollwarm", engine.ForgetRollback, engine.ForgetOptions{WorkDir: spec.WorkDir}); err == nil {
		t.Fatal("the rollback succeeded although the snapshot could not be removed")
	}
	e.host.FailVimCmd(0, esxisim.VimLoginReset)
	if _, err := en.Load(t.Context(), e.ns, "rollwarm"); err != nil {
		t.Fatalf("the record is gone after a failed rollback: %v", err)
	}
	res, err := en.Forget(t.Context(), e.ns, "rollwarm", engine.ForgetRollback, engine.ForgetOptions{WorkDir: spec.WorkDir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Actions, "\n"), `removed the migration's snapshot "vmmigration `) {
		t.Errorf("actions %q do not say the snapshot was removed", res.Actions)
	}
	if st, _ := e.host.PowerState(id); st != esxisim.PoweredOn {
		t.Errorf("the source is %v after the rollback, want it running as before", st)
	}
	left, err := c.Snapshots(e.ctx(10*time.Second), id)
	if err != nil || len(left) != 1 || left[0].ID != keep.ID || len(left[0].Children) != 0 {
		t.Fatalf("snapshots after the rollback: %+v, %v; want only the owner's", left, err)
	}
	if err := c.SnapshotRemove(e.ctx(10*time.Second), id, keep.ID); err != nil {
		t.Fatal(err)
	}
	sourceClean(t, e, id, files, "rollwarm", m.sha())
}

// Destroyed with delete_policy keep while the host cannot remove the
// migration's snapshot, the resource still goes, and the actions say which
// snapshot to remove by hand.
func TestWarmForgetKeepReportsSnapshotLeft(t *testing.T) {
	e := newEnv(t)
	addWarmVM(t, e, "keepwarm")
	spec := e.spec("keepwarm", "keepwarm")
	spec.Mode = engine.ModeWarm
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hook := func(ev engine.Event) {
		if strings.Contains(ev.Message, "precopy round 1 of 1: copied") {
			cancel()
		}
	}
	e.onEvent.Store(&hook)
	en := e.engine()
	rec, _ := en.Run(ctx, spec)
	e.onEvent.Store(nil)
	if rec.Warm == nil || len(rec.Warm.Snapshots) != 1 || rec.Warm.Snapshots[0].ID <= 0 {
		t.Fatalf("warm evidence %+v", rec.Warm)
	}
	e.host.FailVimCmd(100, esxisim.VimLoginReset)
	res, err := en.Forget(t.Context(), e.ns, "keepwarm", engine.ForgetKeep, engine.ForgetOptions{WorkDir: spec.WorkDir})
	e.host.FailVimCmd(0, esxisim.VimLoginReset)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("could not remove the migration's snapshot %q (id %d)", rec.Warm.Snapshots[0].Name, rec.Warm.Snapshots[0].ID)
	if !strings.Contains(strings.Join(res.Actions, "\n"), want) {
		t.Errorf("actions %q do not say %q", res.Actions, want)
	}
	if _, err := en.Load(t.Context(), e.ns, "keepwarm"); !errors.Is(err, coord.ErrNoRecord) {
		t.Errorf("the record is still there: %v", err)
	}
}
