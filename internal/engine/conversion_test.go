package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
)

// TestConversionIsACheckpoint interrupts a migration while the real
// virt-v2v converts the guest, and runs again with a new engine: the
// conversion runs again from the unchanged copied image (its leftover
// copy is replaced, never imported), once it finished it is never run
// again, and the DataVolume receives the converted image, whose SHA-256
// differs from the source's and is recorded with what virt-v2v saw.
func TestConversionIsACheckpoint(t *testing.T) {
	img := testguest.Image(t)
	e := newEnv(t)
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "guest01", GuestOS: "debian12-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: fi.Size(), Thin: true, Content: []esxisim.Extent{}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}}})
	if err := convert.CopySparse(img, files.Disks[0].LocalFlat); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("guest01", "guest01")
	spec.Conversion = engine.ConversionVirtV2V
	spec.Validation = engine.Validation{Timeout: time.Minute}

	var starts atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := func(ev engine.Event) {
		if strings.HasPrefix(ev.Message, "converting the guest") && starts.Add(1) == 1 {
			// virt-v2v is starting: stop the run while it works.
			go func() { time.Sleep(15 * time.Second); cancel() }()
		}
	}
	e.onEvent.Store(&stop)
	rec, err := e.engine().Run(ctx, spec)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != engine.PhaseConverting {
		t.Fatalf("first Run = %v, want an interruption in Converting", err)
	}
	if rec.Conversion != nil || rec.Disks[0].ConvertedSHA256 != "" {
		t.Fatalf("an interrupted conversion was recorded: %+v", rec.Conversion)
	}
	sourceSHA := rec.Disks[0].SourceSHA256

	ctx2, cancel2 := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel2()
	rec, err = e.engine().Run(ctx2, spec)
	e.onEvent.Store(nil)
	if err != nil || rec.Phase != engine.PhaseCompleted {
		t.Fatalf("second Run = %v in %s", err, rec.Phase)
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("virt-v2v started %d times, want 2 (once cut short, once to the end)", n)
	}
	d := rec.Disks[0]
	c := rec.Conversion
	if c == nil || c.Tool != "virt-v2v-in-place" || c.OS.Distro != "debian" || c.OS.Type != "linux" || c.Accelerator == "" || c.Seconds <= 0 {
		t.Fatalf("conversion evidence %+v", c)
	}
	if d.SourceSHA256 != sourceSHA || d.ConvertedSHA256 == "" || d.ConvertedSHA256 == sourceSHA || d.ArtifactSHA256 != d.ConvertedSHA256 {
		t.Errorf("checksums: source %s (was %s), converted %s, artifact %s", d.SourceSHA256, sourceSHA, d.ConvertedSHA256, d.ArtifactSHA256)
	}
	if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.ConvertedSHA256 {
		t.Errorf("the DataVolume received %s, want the converted image %s", got, d.ConvertedSHA256)
	}
	if left, _ := filepath.Glob(filepath.Join(spec.WorkDir, "*", "*", "*"+convert.TmpSuffix)); len(left) > 0 {
		t.Errorf("conversion copies left behind: %v", left)
	}
	// The source disk is only read.
	if sum, err := convert.FileSHA256(files.Disks[0].LocalFlat); err != nil || sum != sourceSHA {
		t.Errorf("the source disk changed: %s, %v (copied %s)", sum, err, sourceSHA)
	}
	// Completed: applying again converts nothing.
	if rec, err = e.engine().Run(e.ctx(time.Minute), spec); err != nil || rec.Phase != engine.PhaseCompleted || starts.Load() != 2 {
		t.Errorf("third Run = %v in %s after %d conversions", err, rec.Phase, starts.Load())
	}
}
