package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

func TestWarmDeltaEstimate(t *testing.T) {
	vm := &esxi.VM{Disks: []esxi.Disk{
		{Device: "scsi0:0", CapacityBytes: 10 << 30},
		// On a snapshot whose links' allocation is known: what they hold.
		{Device: "scsi0:1", CapacityBytes: 100 << 30, Chain: &esxi.DiskChain{Links: []esxi.ChainLink{{AllocatedBytes: 1 << 30}, {AllocatedBytes: 9 << 30}}}},
		// Unknown allocation on one link: the capacity.
		{Device: "scsi0:2", CapacityBytes: 20 << 30, Chain: &esxi.DiskChain{Links: []esxi.ChainLink{{AllocatedBytes: -1}, {AllocatedBytes: 1 << 30}}}},
		// No delta for an independent disk.
		{Device: "scsi0:3", CapacityBytes: 500 << 30, Independent: true},
	}}
	need, alloc := engine.WarmDeltaEstimate(vm, 3)
	if alloc != 40<<30 {
		t.Errorf("allocated %d, want 40 GiB", alloc)
	}
	if want := int64(3) * ((40 << 30) / 100 * engine.WarmDeltaGrowthPercent); need != want {
		t.Errorf("need %d, want %d (10%% of 40 GiB for each of 3 rounds)", need, want)
	}
	if need, _ := engine.WarmDeltaEstimate(&esxi.VM{Disks: []esxi.Disk{{CapacityBytes: 1<<63 - 1}}}, engine.MaxPrecopyRounds); need <= 0 {
		t.Errorf("need %d for a huge disk: overflowed", need)
	}
}

// TestWarmDatastoreSpaceVerdict: the free space of the datastore that
// receives the deltas, as listsummary reports it, is judged alike at plan
// and at apply. Less than the estimate blocks a warm migration at
// Validated, before any snapshot or power-off; a cold migration of the
// same VM is not judged on it; enough space passes and the warm migration
// completes.
func TestWarmDatastoreSpaceVerdict(t *testing.T) {
	e := newEnv(t)
	const capacity = 64 << 20 // thick: the estimate's basis is its capacity
	rounds := 2
	need := int64(rounds) * (capacity / 100 * engine.WarmDeltaGrowthPercent)
	for _, c := range []struct {
		name  string
		mode  string
		spare int64 // free space beyond what the datastore holds now, minus need
		fails bool
	}{
		{name: "tight", mode: engine.ModeWarm, spare: -(1 << 20), fails: true},
		{name: "cold ignores it", mode: engine.ModeCold, spare: -(1 << 20)},
		{name: "enough", mode: engine.ModeWarm, spare: 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "space-" + strings.ReplaceAll(c.name, " ", "-")
			e.host.AddVM(t, esxisim.VMSpec{Name: name, Disks: []esxisim.DiskSpec{{CapacityBytes: capacity, Content: []esxisim.Extent{{Offset: 0, Length: 1 << 20, Seed: 5}}}},
				NICs: []esxisim.NICSpec{{Network: "VM Network"}}, Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"}})
			e.host.SetDatastoreCapacity("datastore1", 0)
			free, err := e.host.DatastoreFree("datastore1")
			if err != nil {
				t.Fatal(err)
			}
			used := esxisim.DefaultDatastoreCapacity - free
			e.host.SetDatastoreCapacity("datastore1", used+need+c.spare)
			defer e.host.SetDatastoreCapacity("datastore1", 0)

			spec := e.spec(name, name)
			spec.Mode = c.mode
			if c.mode == engine.ModeWarm {
				spec.PrecopyRounds = rounds
			}
			en := e.engine()
			plan, err := en.Preview(e.ctx(20*time.Second), spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge, ResumeFromRecord: true})
			if err != nil {
				t.Fatalf("Preview: %v", err)
			}
			var space *preflight.Check
			for i, ch := range plan.Checks.Checks {
				if ch.ID == engine.CheckWarmDatastoreSpace {
					space = &plan.Checks.Checks[i]
				} else if !ch.Passed && ch.Severity == preflight.Blocker {
					t.Fatalf("check %s blocks too: %s", ch.ID, ch.Message)
				}
			}
			switch {
			case c.mode == engine.ModeCold:
				if space != nil {
					t.Fatalf("a cold migration judged on delta space: %+v", space)
				}
			case space == nil:
				t.Fatalf("no %s check in %+v", engine.CheckWarmDatastoreSpace, plan.Checks.Checks)
			case space.Severity != preflight.Blocker || space.Passed == c.fails:
				t.Fatalf("%s: severity %s passed %v, want a blocker that fails=%v: %s", space.ID, space.Severity, space.Passed, c.fails, space.Message)
			default:
				for _, want := range []string{`Datastore "datastore1"`, "10% of the disks' 64 MiB allocated for each of the 2 precopy snapshot(s)", map[bool]string{true: "less than the estimated 12.8 MiB", false: "estimated at 12.8 MiB"}[c.fails]} {
					if !strings.Contains(space.Message, want) {
						t.Errorf("message %q lacks %q", space.Message, want)
					}
				}
				if c.fails && !strings.Contains(space.Message, `use mode "cold"`) {
					t.Errorf("message %q does not say what to do", space.Message)
				}
			}

			rec, runErr := en.Run(e.ctx(90*time.Second), spec)
			if len(rec.Preflight) != len(plan.Checks.Checks) {
				t.Fatalf("apply ran %d checks, plan %d (run error: %v)", len(rec.Preflight), len(plan.Checks.Checks), runErr)
			}
			for i, want := range plan.Checks.Checks {
				got := rec.Preflight[i]
				if got.ID != want.ID || got.Severity != string(want.Severity) || got.Passed != want.Passed || got.Message != want.Message {
					t.Errorf("check %d: apply %+v, plan %+v", i, got, want)
				}
			}
			if c.fails {
				var se *engine.StopError
				if !errors.As(runErr, &se) || se.Phase != record.PhaseValidated || se.Reason != "PreflightFailed" {
					t.Fatalf("apply = %v, want a stop at Validated", runErr)
				}
				if rec.PowerOff != nil || rec.Warm != nil && len(rec.Warm.Snapshots) > 0 || len(e.host.SnapshotEvents()) != 0 {
					t.Errorf("a blocked warm migration acted: power-off %+v, warm %+v, host snapshots %v", rec.PowerOff, rec.Warm, e.host.SnapshotEvents())
				}
				return
			}
			if runErr != nil || rec.Phase != record.PhaseCompleted {
				t.Fatalf("apply = %v in %s", runErr, rec.Phase)
			}
		})
	}
}

// A .vmx whose workingDir names another datastore has its deltas judged
// on that datastore, not on the one holding the VM's folder.
func TestWarmDatastoreSpaceHonoursWorkingDir(t *testing.T) {
	e := newEnv(t)
	const capacity = 64 << 20
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "wd", Disks: []esxisim.DiskSpec{{CapacityBytes: capacity}},
		NICs: []esxisim.NICSpec{{Network: "VM Network"}}, Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"}})
	// A second datastore, made by a VM that lives there.
	e.host.AddVM(t, esxisim.VMSpec{Name: "other", Datastore: "datastore2", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}},
		NICs: []esxisim.NICSpec{{Network: "VM Network"}}, Power: esxisim.PoweredOff})
	vmx := filepath.Join(files.LocalDir, "wd.vmx")
	b, err := os.ReadFile(vmx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vmx, append(b, "workingDir = \"/vmfs/volumes/datastore2/wd-snaps\"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("wd", "wd")
	spec.Mode, spec.PrecopyRounds = engine.ModeWarm, 1
	need := int64(capacity / 100 * engine.WarmDeltaGrowthPercent)
	tight := func(name string) {
		e.host.SetDatastoreCapacity(name, 0)
		free, err := e.host.DatastoreFree(name)
		if err != nil {
			t.Fatal(err)
		}
		e.host.SetDatastoreCapacity(name, esxisim.DefaultDatastoreCapacity-free+need-1)
	}
	defer e.host.SetDatastoreCapacity("datastore1", 0)
	defer e.host.SetDatastoreCapacity("datastore2", 0)
	check := func() preflight.Check { t.Helper(); return warmSpaceCheck(t, e, spec) }
	tight("datastore1") // the VM's folder is full: it does not matter
	if c := check(); !c.Passed || !strings.Contains(c.Message, `Datastore "datastore2"`) || !strings.Contains(c.Message, "workingDir /vmfs/volumes/datastore2/wd-snaps") {
		t.Errorf("with room on the working directory's datastore: %+v", c)
	}
	e.host.SetDatastoreCapacity("datastore1", 0)
	tight("datastore2")
	if c := check(); c.Passed || !strings.Contains(c.Message, `Datastore "datastore2"`) {
		t.Errorf("with the working directory's datastore full: %+v", c)
	}
}

// Once the migration's first snapshot exists, only the rounds still to be
// taken count: the first delta's space is in the datastore's free space.
func TestWarmDatastoreSpaceCountsRoundsLeft(t *testing.T) {
	e := newEnv(t)
	const capacity = 64 << 20
	id, _ := e.host.AddVM(t, esxisim.VMSpec{Name: "left", Disks: []esxisim.DiskSpec{{CapacityBytes: capacity}},
		NICs: []esxisim.NICSpec{{Network: "VM Network"}}, Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"}})
	spec := e.spec("left", "left")
	spec.Mode, spec.PrecopyRounds = engine.ModeWarm, 3
	per := int64(capacity / 100 * engine.WarmDeltaGrowthPercent)
	space := func() preflight.Check { t.Helper(); return warmSpaceCheck(t, e, spec) }
	if c := space(); !strings.Contains(c.Message, "estimated at "+engine.WarmBytes(3*per)) {
		t.Errorf("before any snapshot: %s", c.Message)
	}
	c, err := e.reg.Client(hostName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SnapshotCreate(e.ctx(10*time.Second), id, engine.WarmSnapshotName(spec, 1), "first round"); err != nil {
		t.Fatal(err)
	}
	if c := space(); !strings.Contains(c.Message, "estimated at "+engine.WarmBytes(2*per)) || !strings.Contains(c.Message, "2 precopy snapshot(s) still to take") || !strings.Contains(c.Message, "the 1 taken already") {
		t.Errorf("after the first round's snapshot: %s", c.Message)
	}
}

// warmSpaceCheck is the warm_datastore_space check of spec's preview.
func warmSpaceCheck(t *testing.T, e *env, spec engine.Spec) preflight.Check {
	t.Helper()
	p, err := e.engine().Preview(e.ctx(20*time.Second), spec, engine.PreviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Checks.Checks {
		if c.ID == engine.CheckWarmDatastoreSpace {
			return c
		}
	}
	t.Fatalf("no %s check", engine.CheckWarmDatastoreSpace)
	return preflight.Check{}
}
