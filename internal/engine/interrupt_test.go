package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// TestInterruptDuringCopy cancels the run in the middle of the disk copy
// (as a Ctrl-C or a timeout would) and runs again with a new engine (a new
// process): the copy resumes after the verified chunks, nothing is created
// twice and the source is powered off once.
func TestInterruptDuringCopy(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: "app01", Disks: []esxisim.DiskSpec{{CapacityBytes: 12 << 20}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.9"},
	})
	spec := e.spec("app01", "app01")
	spec.PowerOffPolicy = "graceful_then_hard"
	// Slow the host down so that the copy takes a while.
	e.host.SetCommandDelay(40 * time.Millisecond)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := func(ev engine.Event) {
		if ev.Kind == engine.EventProgress && ev.Phase == engine.PhasePreparing && ev.BytesDone >= 4<<20 {
			cancel()
		}
	}
	e.onEvent.Store(&stop)
	rec, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != engine.PhasePreparing {
		t.Fatalf("first Run = %v (%#v), want an interruption in Preparing", err, se)
	}
	if want := "run apply again to continue from Preparing"; se.Action != want {
		t.Errorf("action = %q, want %q", se.Action, want)
	}
	if rec.Phase != engine.PhasePreparing || rec.PowerOff == nil || !rec.PowerOff.Done {
		t.Fatalf("record after interruption: phase %s, powerOff %+v", rec.Phase, rec.PowerOff)
	}
	last := rec.Errors[len(rec.Errors)-1]
	if last.Class != engine.ClassInterrupted || last.Phase != engine.PhasePreparing {
		t.Errorf("last history entry = %+v", last)
	}
	st, err := transfer.Inspect(transfer.Disk{Path: rec.Disks[0].SourcePath, SizeBytes: rec.Disks[0].SizeBytes}, rec.Disks[0].StagedPath, spec.CopyChunkSize)
	if err != nil || st.State != transfer.StatePartial || st.VerifiedBytes < 3<<20 {
		t.Fatalf("staged copy after interruption: %+v, %v", st, err)
	}
	firstReads := e.ddReads(0)
	mark := len(e.host.CommandLog())

	e.host.SetCommandDelay(0)
	rec = e.mustComplete(e.engine(), spec)

	// The second run read nothing the journal had verified.
	for _, r := range e.ddReads(mark) {
		var off int64
		for i := len(r) - 1; i >= 0; i-- {
			if r[i] == '@' {
				for _, c := range r[i+1:] {
					off = off*10 + int64(c-'0')
				}
				break
			}
		}
		if off < st.VerifiedBytes {
			t.Errorf("second run re-read %s, below the %d verified bytes", r, st.VerifiedBytes)
		}
	}
	if len(firstReads) == 0 {
		t.Error("the first run read nothing")
	}
	if got, want := rec.Disks[0].SourceSHA256, files.Disks[0].SHA256(); got != want {
		t.Errorf("sha = %s, want %s", got, want)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "app01-disk-0"); got != files.Disks[0].SHA256() {
		t.Errorf("received sha = %s", got)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power commands, want 1", n)
	}
	if len(e.dataVolumes()) != 1 || len(e.vms()) != 1 {
		t.Errorf("%d DataVolumes, %d VMs", len(e.dataVolumes()), len(e.vms()))
	}
}
