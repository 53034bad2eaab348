package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// twoDiskVM is a powered-off VM whose first disk copies in a moment and
// whose second takes a while on a host slowed down per command.
func twoDiskVM(e *env, name string) *esxisim.VMFiles {
	_, files := e.host.AddVM(e.t, esxisim.VMSpec{
		Name: name,
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: 2 << 20, Content: []esxisim.Extent{{Offset: 0, Length: 2 << 20, Seed: 11}}},
			{CapacityBytes: 48 << 20, Content: []esxisim.Extent{{Offset: 0, Length: 48 << 20, Seed: 12}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOff, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.7"},
	})
	e.host.SetCommandDelay(40 * time.Millisecond)
	return files
}

// checkDataVolumesHoldSources checks that every disk's copy is its source
// disk and that its DataVolume received exactly that.
func (e *env) checkDataVolumesHoldSources(rec record.Record, files *esxisim.VMFiles) {
	e.t.Helper()
	for i, d := range rec.Disks {
		if d.SourceSHA256 != files.Disks[i].SHA256() {
			e.t.Errorf("disk %d: copied %s, source %s", i, d.SourceSHA256, files.Disks[i].SHA256())
		}
		if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.SourceSHA256 {
			e.t.Errorf("disk %d: DataVolume %s received %s, want %s", i, d.DataVolume, got, d.SourceSHA256)
		}
	}
}

// Without guest conversion, a disk whose copy is verified is sent to its
// DataVolume while the VM's other disks still copy: the upload of disk 0
// starts before disk 1's copy ends, and both DataVolumes receive exactly
// their source disks.
func TestDiskUploadsWhileTheNextCopies(t *testing.T) {
	e := newEnv(t)
	files := twoDiskVM(e, "pipe01")
	var sentEarly atomic.Bool
	var copiedAfter atomic.Int64
	watch := func(ev engine.Event) {
		switch {
		case strings.HasPrefix(ev.Message, "disk 0: sending its image while the other disks are prepared"):
			sentEarly.Store(true)
		case sentEarly.Load() && ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing && ev.Disk == 1 &&
			strings.Contains(ev.Message, "copied"):
			copiedAfter.Add(1)
		}
	}
	e.onEvent.Store(&watch)
	rec := e.mustComplete(e.engine(), e.spec("pipe01", "pipe01"))
	e.onEvent.Store(nil)
	if !sentEarly.Load() || copiedAfter.Load() == 0 {
		t.Errorf("disk 0 sent during the copy: %v; disk 1 copy reports after it: %d", sentEarly.Load(), copiedAfter.Load())
	}
	e.checkDataVolumesHoldSources(rec, files)
	if n := len(e.sim.IssuedUploadTokens()); n != 2 {
		t.Errorf("%d uploads, want one per disk", n)
	}
}

// A run stopped right after disk 0 was sent during the copy resumes with
// disk 1's copy and never sends disk 0 again.
func TestEarlyUploadSurvivesInterruption(t *testing.T) {
	e := newEnv(t)
	twoDiskVM(e, "pipe02")
	spec := e.spec("pipe02", "pipe02")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var once atomic.Bool
	stop := func(ev engine.Event) {
		if !strings.HasPrefix(ev.Message, "disk 0: sending its image") || !once.CompareAndSwap(false, true) {
			return
		}
		// Disk 1's copy waits on the host from now on, so that disk 0
		// arrives while it still copies however slow the upload is on a
		// busy machine; the run is stopped once the record says so.
		e.host.SetCommandDelay(2 * time.Second)
		go func() {
			for ctx.Err() == nil {
				if r, err := e.engine().Load(t.Context(), e.ns, "pipe02"); err == nil && r.Disks[0].Uploaded {
					cancel()
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	rec := e.runInterrupted(ctx, spec, record.PhasePreparing, stop)
	if !rec.Disks[0].Uploaded || rec.Disks[0].DataVolumeUID == "" || rec.Disks[1].Acquired {
		t.Fatalf("after the interruption: disk 0 uploaded %v (DataVolume %q), disk 1 acquired %v",
			rec.Disks[0].Uploaded, rec.Disks[0].DataVolumeUID, rec.Disks[1].Acquired)
	}
	e.host.SetCommandDelay(40 * time.Millisecond)
	tokens := len(e.sim.IssuedUploadTokens())
	rec = e.mustComplete(e.engine(), spec)
	if n := len(e.sim.IssuedUploadTokens()) - tokens; n != 1 {
		t.Errorf("the resumed run made %d uploads, want 1 (disk 1 only)", n)
	}
	for i, d := range rec.Disks {
		if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.SourceSHA256 {
			t.Errorf("disk %d: DataVolume received %s, want %s", i, got, d.SourceSHA256)
		}
	}
}

// In warm mode the disks' chains are flattened after the cutover, side by
// side; without guest conversion, the disk flattened first is sent to its
// DataVolume while the other still flattens. Each DataVolume receives its
// disk's final content, and each disk is sent once.
func TestWarmDiskUploadsWhileTheNextFlattens(t *testing.T) {
	e := newEnv(t)
	id, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: "pipew", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: 4 << 20, Thin: true, Content: []esxisim.Extent{{Offset: 0, Length: 1 << 20, Seed: 21}}},
			{CapacityBytes: 64 << 20, Content: []esxisim.Extent{{Offset: 0, Length: 64 << 20, Seed: 22}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.7"},
	})
	spec := e.spec("pipew", "pipew")
	spec.Mode, spec.PrecopyRounds = engine.ModeWarm, 1
	// The guest writes into both disks' snapshot deltas during the precopy.
	var once atomic.Bool
	var sentEarly atomic.Int64
	sentEarly.Store(-1)
	hook := func(ev engine.Event) {
		if ev.Kind == engine.EventProgress && strings.HasPrefix(ev.Message, "precopy:") && once.CompareAndSwap(false, true) {
			for i, d := range files.Disks {
				b := make([]byte, 8<<10)
				esxisim.PatternBytes(b, uint64(30+i), 2<<20)
				if err := e.host.GuestWrite(id, d.Controller, 2<<20, b); err != nil {
					t.Errorf("guest write: %v", err)
				}
			}
		}
		if strings.HasSuffix(ev.Message, ": sending its image while the other disks are prepared") {
			var i int64
			if strings.HasPrefix(ev.Message, "disk 1") {
				i = 1
			}
			sentEarly.Store(i)
		}
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)
	e.onEvent.Store(nil)
	if !once.Load() {
		t.Fatal("the guest never wrote during the precopy")
	}
	if sentEarly.Load() < 0 {
		t.Error("no disk was sent while the other flattened")
	}
	for i, d := range rec.Disks {
		if !d.Uploaded || d.GuestSHA256 == "" {
			t.Errorf("disk %d: uploaded %v, guest sha %q", i, d.Uploaded, d.GuestSHA256)
		}
		if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.GuestSHA256 {
			t.Errorf("disk %d: DataVolume %s received %s, want the flattened %s", i, d.DataVolume, got, d.GuestSHA256)
		}
		// The guest's write is in the flattened content: it differs from
		// the base the precopy copied.
		if d.GuestSHA256 == files.Disks[i].SHA256() {
			t.Errorf("disk %d: the flattened content is the base's, without the guest's write", i)
		}
	}
	if n := len(e.sim.IssuedUploadTokens()); n != 2 {
		t.Errorf("%d uploads, want one per disk", n)
	}
}

// pauseLastCopy makes disk 1's copy wait at half way until the engine
// says it is sending disk 1 as its copy is verified (or 60 s pass), so
// that the send starts while the copy still runs; after that, stop (if
// set) is called once when disk 1's copy reaches three quarters.
func pauseLastCopy(stop func()) (hook func(engine.Event), streamed, reached *atomic.Bool, copiedAfter *atomic.Int64) {
	streamed, reached, copiedAfter = new(atomic.Bool), new(atomic.Bool), new(atomic.Int64)
	release := make(chan struct{})
	var paused, stopped atomic.Bool
	hook = func(ev engine.Event) {
		switch {
		case strings.HasPrefix(ev.Message, "disk 1: sending its image to DataVolume") && strings.HasSuffix(ev.Message, "as its copy is verified"):
			if streamed.CompareAndSwap(false, true) {
				close(release)
			}
		case strings.HasPrefix(ev.Message, "disk 1: its image reached DataVolume"):
			reached.Store(true)
		case ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing && ev.Disk == 1 && strings.HasPrefix(ev.Message, "disk 1: copied"):
			if streamed.Load() {
				copiedAfter.Add(1)
			}
			if ev.Percent >= 50 && paused.CompareAndSwap(false, true) {
				select {
				case <-release:
				case <-time.After(60 * time.Second):
				}
			}
			if stop != nil && streamed.Load() && ev.Percent >= 75 && stopped.CompareAndSwap(false, true) {
				stop()
			}
		}
	}
	return hook, streamed, reached, copiedAfter
}

// The last disk still copying is sent to its DataVolume as its copy
// verifies it: the send starts before the copy ends, and the DataVolume
// holds exactly the source disk, recorded as sent raw with the copy's
// SHA-256.
func TestLastDiskUploadsAsItCopies(t *testing.T) {
	e := newEnv(t)
	files := twoDiskVM(e, "pipe03")
	hook, streamed, reached, copiedAfter := pauseLastCopy(nil)
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), e.spec("pipe03", "pipe03"))
	e.onEvent.Store(nil)
	if !streamed.Load() || !reached.Load() || copiedAfter.Load() == 0 {
		t.Errorf("disk 1 sent as it copied: %v, arrived with its copy: %v, copy progress after the send began: %d", streamed.Load(), reached.Load(), copiedAfter.Load())
	}
	d := rec.Disks[1]
	if !d.Uploaded || d.UploadFormat != "raw" || d.UploadSHA256 != d.SourceSHA256 || d.UploadBytes != d.SizeBytes {
		t.Errorf("disk 1's upload evidence: uploaded %v, %s, %d bytes, sha %s (copy %s)", d.Uploaded, d.UploadFormat, d.UploadBytes, d.UploadSHA256, d.SourceSHA256)
	}
	e.checkDataVolumesHoldSources(rec, files)
	if n := len(e.sim.IssuedUploadTokens()); n != 2 {
		t.Errorf("%d uploads, want one per disk", n)
	}
}

// A run stopped while the last disk is sent as it copies leaves neither
// the disk recorded as sent nor its DataVolume taken as imported: the
// resumed run finishes the copy from its journal, sends the disk again,
// and its DataVolume holds exactly the source disk.
func TestLastDiskUploadSurvivesInterruption(t *testing.T) {
	// With dd reads (ESXi 6.x) and through the host's Python (7 and 8).
	for _, python := range []string{"", esxisim.HostPython()} {
		name := "dd"
		if python != "" {
			name = "python"
		}
		t.Run(name, func(t *testing.T) { lastDiskUploadSurvivesInterruption(t, python) })
	}
}

func lastDiskUploadSurvivesInterruption(t *testing.T, python string) {
	e := newEnv(t)
	e.host.SetPython(python)
	files := twoDiskVM(e, "pipe04")
	spec := e.spec("pipe04", "pipe04")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hook, streamed, _, _ := pauseLastCopy(cancel)
	rec := e.runInterrupted(ctx, spec, record.PhasePreparing, hook)
	if !streamed.Load() {
		t.Fatal("disk 1 was never sent as it copied")
	}
	if d := rec.Disks[1]; d.Uploaded || d.Acquired || d.Imported {
		t.Fatalf("after the interruption disk 1 is uploaded %v, acquired %v, imported %v", d.Uploaded, d.Acquired, d.Imported)
	}
	rec = e.mustComplete(e.engine(), spec)
	e.checkDataVolumesHoldSources(rec, files)
	if python != "" && !slices.ContainsFunc(e.host.Commands(), func(c string) bool { return strings.HasPrefix(c, "/bin/python -c ") }) {
		t.Error("the host has Python, but no disk was read through it")
	}
}
