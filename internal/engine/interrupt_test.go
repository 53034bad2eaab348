package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
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
		if ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing && ev.BytesDone >= 4<<20 {
			cancel()
		}
	}
	e.onEvent.Store(&stop)
	rec, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != record.PhasePreparing {
		t.Fatalf("first Run = %v (%#v), want an interruption in Preparing", err, se)
	}
	if want := "run apply again to continue from Preparing"; se.Action != want {
		t.Errorf("action = %q, want %q", se.Action, want)
	}
	if rec.Phase != record.PhasePreparing || rec.PowerOff == nil || !rec.PowerOff.Done {
		t.Fatalf("record after interruption: phase %s, powerOff %+v", rec.Phase, rec.PowerOff)
	}
	last := rec.Errors[len(rec.Errors)-1]
	if last.Class != record.ClassInterrupted || last.Phase != record.PhasePreparing {
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

// A run that cannot renew its lease (the API server is unreachable) stops
// before the lease can expire for anyone else, instead of going on with the
// source it holds; the next run continues from the checkpoint.
func TestUnrenewableLeaseStopsTheRun(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, esxisim.VMSpec{Name: "l1", Disks: []esxisim.DiskSpec{{CapacityBytes: 48 << 20}},
		NICs: []esxisim.NICSpec{{Network: "VM Network"}}, Power: esxisim.PoweredOff})
	spec := e.spec("l1", "l1")
	e.host.SetCommandDelay(300 * time.Millisecond) // a copy of 48 one-MiB chunks takes > 14 s
	en := e.engine()
	done := make(chan error, 1)
	var ended time.Time
	go func() {
		_, err := en.Run(e.ctx(2*time.Minute), spec)
		ended = time.Now()
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for len(e.ddReads(0)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the copy did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.c.StopAPIServer()
	down := time.Now()
	// Longer than the 3 s lease of the test engine.
	time.Sleep(5 * time.Second)
	if err := e.c.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	err := <-done
	if err == nil || ended.After(back) {
		t.Fatalf("the run went on without its lease: ended %v after the outage began (API back after %v), error %v",
			ended.Sub(down), back.Sub(down), err)
	}
	if !strings.Contains(err.Error(), "lease could not be renewed") {
		t.Errorf("error = %v, want it to say the lease could not be renewed", err)
	}
	e.host.SetCommandDelay(0)
	e.mustComplete(e.engine(), spec)
}
