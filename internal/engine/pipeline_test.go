package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
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
		case strings.HasPrefix(ev.Message, "disk 0: sending its image while the other disks copy"):
			sentEarly.Store(true)
		case sentEarly.Load() && ev.Kind == engine.EventProgress && ev.Phase == engine.PhasePreparing && ev.Disk == 1 &&
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
	for i, d := range rec.Disks {
		if d.SourceSHA256 != files.Disks[i].SHA256() {
			t.Errorf("disk %d: copied %s, source %s", i, d.SourceSHA256, files.Disks[i].SHA256())
		}
		if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.SourceSHA256 {
			t.Errorf("disk %d: DataVolume %s received %s, want %s", i, d.DataVolume, got, d.SourceSHA256)
		}
	}
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
		// Stop the run once the record says disk 0 arrived.
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
	rec := e.runInterrupted(ctx, spec, engine.PhasePreparing, stop)
	if !rec.Disks[0].Uploaded || rec.Disks[0].DataVolumeUID == "" || rec.Disks[1].Acquired {
		t.Fatalf("after the interruption: disk 0 uploaded %v (DataVolume %q), disk 1 acquired %v",
			rec.Disks[0].Uploaded, rec.Disks[0].DataVolumeUID, rec.Disks[1].Acquired)
	}
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
