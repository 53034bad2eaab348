package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// snapshotCreates counts the snapshots the host took for VM id.
func snapshotCreates(e *env, id int) int {
	n := 0
	for _, ev := range e.host.SnapshotEvents() {
		if ev.Op == "create" && ev.VMID == id {
			n++
		}
	}
	return n
}

// A guest that writes little between rounds ends a precopy of at most 4
// rounds after the second, whose delta is under precopy_stop_bytes: two
// snapshots in all, the decision recorded once and kept by an apply
// interrupted right after it, and the files the precopy copied reused at
// cutover under the links of the shorter chain.
func TestWarmPrecopyStopsEarlyWhenADeltaIsSmall(t *testing.T) {
	e := newEnv(t)
	id, files, m := addWarmVM(t, e, "stopearly")
	node := files.Disks[0].Controller
	spec := e.spec("stopearly", "stopearly")
	spec.Mode, spec.PrecopyRounds, spec.PrecopyStopBytes = engine.ModeWarm, 4, engine.DefaultPrecopyStopBytes

	var reasons []string
	seed := uint64(40)
	hook := func(ev engine.Event) {
		switch {
		case strings.Contains(ev.Message, "of 4: copied"):
			seed++
			m.write(t, e.host, id, node, int64(seed)<<16, 4096, seed)
		case strings.HasPrefix(ev.Message, "precopy ends after round"):
			reasons = append(reasons, ev.Message)
		}
	}
	// The first apply stops right after the decision, before the copied
	// files are moved to their links.
	ctx, cancel := context.WithCancel(t.Context())
	stopHook := func(ev engine.Event) {
		hook(ev)
		if strings.HasPrefix(ev.Message, "precopy ends after round") {
			cancel()
		}
	}
	e.onEvent.Store(&stopHook)
	_, err := e.engine().Run(ctx, spec)
	cancel()
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted {
		t.Fatalf("Run = %v, want an interruption right after the stop decision", err)
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)
	e.onEvent.Store(nil)

	if n := snapshotCreates(e, id); n != 2 {
		t.Errorf("the host took %d snapshots, want 2", n)
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "round 2 of 4") || !strings.Contains(reasons[0], fmt.Sprint(engine.DefaultPrecopyStopBytes)) {
		t.Errorf("stop events %q, want one naming round 2 of 4 and the limit", reasons)
	}
	w := rec.Warm
	if w == nil || w.Rounds != 4 || len(w.Snapshots) != 2 || w.Stopped == nil {
		t.Fatalf("warm evidence %+v", w)
	}
	st := w.Stopped
	if st.Round != 2 || st.Limit != engine.DefaultPrecopyStopBytes || st.Bytes != w.Snapshots[1].CopiedBytes || st.Bytes <= 0 || st.Bytes > st.Limit {
		t.Errorf("stop %+v, round 2 copied %d", st, w.Snapshots[1].CopiedBytes)
	}
	if st.Renamed != len(st.Renames) || len(st.Renames) != 2 || st.Renames[0] != (record.WarmRename{Disk: 0, From: 3, To: 1}) {
		t.Errorf("renames %+v (%d done), want links 3,4 moved to 1,2", st.Renames, st.Renamed)
	}
	if len(rec.Disks[0].Chain) == 0 || w.CutoverBytes <= 0 || w.CutoverBytes > warmCapacity/8 {
		t.Errorf("cutover copied %d bytes of chain %+v: the precopied files were not reused", w.CutoverBytes, rec.Disks[0].Chain)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "stopearly-disk-0"); got != m.sha() || rec.Disks[0].GuestSHA256 != m.sha() {
		t.Errorf("received %s, guest %s, want %s", got, rec.Disks[0].GuestSHA256, m.sha())
	}
	sourceClean(t, e, id, files, "stopearly", m.sha())
}

// With precopy_stop_bytes 0 every round is taken, however little the
// guest writes.
func TestWarmPrecopyStopBytesZeroTakesEveryRound(t *testing.T) {
	e := newEnv(t)
	id, files, m := addWarmVM(t, e, "allrounds")
	node := files.Disks[0].Controller
	spec := e.spec("allrounds", "allrounds")
	spec.Mode, spec.PrecopyRounds, spec.PrecopyStopBytes = engine.ModeWarm, 3, 0
	seed := uint64(60)
	hook := func(ev engine.Event) {
		if strings.Contains(ev.Message, "of 3: copied") {
			seed++
			m.write(t, e.host, id, node, int64(seed)<<16, 4096, seed)
		}
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)
	e.onEvent.Store(nil)
	if n := snapshotCreates(e, id); n != 3 {
		t.Errorf("the host took %d snapshots, want 3", n)
	}
	if w := rec.Warm; w == nil || len(w.Snapshots) != 3 || w.Stopped != nil || w.CutoverBytes > warmCapacity/8 {
		t.Errorf("warm evidence %+v", w)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "allrounds-disk-0"); got != m.sha() {
		t.Errorf("received %s, want %s", got, m.sha())
	}
	sourceClean(t, e, id, files, "allrounds", m.sha())
}
