package engine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// smallFS mounts a tmpfs of the given size under the test's temporary
// folder (the tests run as root) and unmounts it at the end.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mounting a %s tmpfs (needs root): %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func randomVM(name string, size int64) esxisim.VMSpec {
	vm := smallVM(name, esxisim.PoweredOn)
	vm.Disks = []esxisim.DiskSpec{{CapacityBytes: size, Content: []esxisim.Extent{{Offset: 0, Length: size, Seed: 7}}}}
	return vm
}

// A work_dir too small for the disks is a blocker at plan and at apply,
// before the source is touched.
func TestWorkDirSpaceBlocks(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, randomVM("full1", 8<<20))
	spec := e.spec("full1", "full1")
	spec.WorkDir = smallFS(t, "4m")
	en := e.engine()
	p, err := en.Preview(t.Context(), spec, engine.PreviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := p.Blockers()
	if len(b) != 1 || b[0].ID != preflight.CheckWorkDirSpace || !strings.Contains(b[0].Message, spec.WorkDir) || !strings.Contains(b[0].Message, "8 MiB") {
		t.Fatalf("plan blockers = %+v", b)
	}
	_, err = en.Run(e.ctx(30*time.Second), spec)
	se := stopErr(t, err)
	if se.Phase != record.PhaseValidated || se.Reason != "PreflightFailed" || !strings.Contains(se.Message, preflight.CheckWorkDirSpace) {
		t.Errorf("apply = %v", err)
	}
	if n := powerChanges(e); len(n) != 0 {
		t.Errorf("power commands %q", n)
	}
}

// A work_dir that fills up while copying stops the migration for a human
// with the bytes still needed and the folder; the journal survives, and
// once there is room again the copy resumes and completes.
func TestWorkDirFullWhileCopying(t *testing.T) {
	e := newEnv(t)
	const size = 8 << 20
	e.host.AddVM(t, randomVM("full2", size))
	spec := e.spec("full2", "full2")
	spec.WorkDir = smallFS(t, "12m")
	filler := filepath.Join(spec.WorkDir, "filler")
	filled := false
	hook := func(ev engine.Event) {
		if ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing && ev.BytesDone > 0 && !filled {
			filled = true
			f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = f.Write(make([]byte, 8<<20)) // as much as fits
			_ = f.Close()
		}
	}
	e.onEvent.Store(&hook)
	en := e.engine()
	_, err := en.Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	staged := filepath.Join(spec.WorkDir, e.ns, "full2", "disk-0.raw")
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "WorkDirFull" || se.Phase != record.PhasePreparing ||
		!strings.Contains(se.Message, "still need up to ") || !strings.Contains(se.Message, filepath.Dir(staged)) ||
		!strings.Contains(se.Action, "free at least ") {
		t.Fatalf("stop = %v", err)
	}
	rec, err := en.Load(t.Context(), e.ns, "full2")
	if err != nil || rec.Phase != record.PhaseManualInterventionRequired {
		t.Fatalf("record %s, %v", rec.Phase, err)
	}
	st, err := transfer.Inspect(transfer.Disk{Path: rec.Disks[0].SourcePath, SizeBytes: size}, staged, spec.CopyChunkSize)
	if err != nil || st.State != transfer.StatePartial || st.VerifiedBytes == 0 {
		t.Fatalf("journal after the stop: %+v, %v", st, err)
	}
	// Room again: the copy resumes from the journal.
	e.onEvent.Store(nil)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	from := len(e.host.CommandLog())
	e.mustComplete(en, spec)
	var again int64
	for _, r := range e.ddReads(from) {
		if strings.HasSuffix(r, "@0") {
			again++
		}
	}
	if again != 0 {
		t.Errorf("the copy started over: %v", e.ddReads(from))
	}
}

// A work_dir that fills up while converting stops for a human too; the
// staged copy is kept and converting resumes once there is room.
func TestWorkDirFullWhileConverting(t *testing.T) {
	e := newEnv(t)
	const size = 8 << 20
	e.host.AddVM(t, randomVM("full3", size))
	spec := e.spec("full3", "full3")
	spec.TargetFormat = "qcow2"
	spec.WorkDir = smallFS(t, "20m")
	filler := filepath.Join(spec.WorkDir, "filler")
	hook := func(ev engine.Event) {
		if ev.Kind == engine.EventPhase && ev.Phase == record.PhaseConverting {
			f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = f.Write(make([]byte, 10<<20))
			_ = f.Close()
		}
	}
	e.onEvent.Store(&hook)
	en := e.engine()
	_, err := en.Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "WorkDirFull" || se.Phase != record.PhaseConverting ||
		!strings.Contains(se.Message, "while converting disk 0") || !strings.Contains(se.Message, "still need up to ") {
		t.Fatalf("stop = %v", err)
	}
	e.onEvent.Store(nil)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	from := len(e.host.CommandLog())
	e.mustComplete(en, spec)
	if reads := e.ddReads(from); len(reads) != 0 {
		t.Errorf("the staged copy was not reused: %v", reads)
	}
}
