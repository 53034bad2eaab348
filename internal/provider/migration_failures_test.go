package provider_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// TestAccMigrationFailureRetryableRecovers: a DataVolume evicted once is a
// Retryable failure; the engine deletes and recreates it within the same
// apply, which succeeds, and errors lists the failed attempt.
func TestAccMigrationFailureRetryableRecovers(t *testing.T) {
	e := newMigrationEnv(t)
	_, files := e.host.AddVM(t, failVM("r1", esxisim.PoweredOff))
	e.sim.FailNextDataVolumes(1, "", "")
	const addr = "vmmigration_migration.r1"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: e.cfg(e.failingMigration("r1", "r1", 3, "")),
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(addr, map[string]string{
					"phase": "Completed", "power_off_action": "already_off",
					"disks.#": "1", "disks.0.data_volume": "r1-disk-0", "disks.0.source_sha256": files.Disks[0].SHA256(),
				}),
				resource.TestMatchResourceAttr(addr, "errors.0", regexp.MustCompile(`^`+errorEntryTime+
					regexp.QuoteMeta(`Importing attempt 1 (transient): DataVolume `+e.namespace+`/r1-disk-0 failed (Evicted: `+kubesim.DefaultTransientMessage+`)`)+
					`.*deleted it so that the next attempt recreates it`)),
				func(*terraform.State) error {
					rec := e.record(t, "r1").Record
					var importing []record.ErrorEntry
					for _, h := range rec.Errors {
						t.Logf("error entry: %s attempt %d (%s, reason %s): %s", h.Phase, h.Attempt, h.Class, h.Reason, h.Message)
						if h.Phase == record.PhaseImporting {
							importing = append(importing, h)
						}
					}
					if len(importing) != 1 || importing[0].Reason != "DataVolumeFailed" || importing[0].Class != record.ClassTransient {
						return fmt.Errorf("record errors %+v, want one transient DataVolumeFailed entry in Importing", rec.Errors)
					}
					// The evicted DataVolume was replaced, not duplicated.
					if dvs, vms := e.ours(t, "r1"); len(dvs) != 1 || len(vms) != 1 {
						return fmt.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
					}
					if got, ok := e.sim.ReceivedSHA256(e.namespace, "r1-disk-0"); !ok || got != files.Disks[0].SHA256() {
						return fmt.Errorf("destination received %q (%v), want the source's %s", got, ok, files.Disks[0].SHA256())
					}
					return nil
				},
			),
		}},
	})
}

// TestAccMigrationFailureRetriesExhaustedThenReset: hostd failing every
// vim-cmd during Discovering exhausts the retry budget: Failed, with the
// phase, the cleanup and the reset named. Nothing is saved in the state.
// Clearing the fault is not enough (Failed is terminal, and the host is not
// even contacted); the reset annotation lets the next apply complete.
func TestAccMigrationFailureRetriesExhaustedThenReset(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, failVM("h1", esxisim.PoweredOff))
	const addr = "vmmigration_migration.h1"
	cfg := e.cfg(e.failingMigration("h1", "h1", 2, ""))
	failed := e.hostdFailedRE("h1")
	var hostCmds int
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig:   func() { e.host.FailVimCmd(1000, esxisim.VimLoginReset) },
				Config:      cfg,
				ExpectError: failed,
			},
			notInState(addr),
			{
				// The cause is gone, but a Failed migration never restarts
				// by itself: same error, and the host is not contacted.
				PreConfig: func() {
					e.host.FailVimCmd(0, esxisim.VimLoginReset)
					rec := e.expectStopped(t, "h1", record.PhaseFailed, record.PhaseDiscovering, "RetriesExhausted")
					if rec.Attempts != 2 {
						t.Errorf("record attempts %d, want 2", rec.Attempts)
					}
					t.Logf("Failed record message: %s\naction: %s", rec.Message, rec.Action)
					hostCmds = len(e.host.Commands())
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				ExpectError:      failed,
			},
			{
				PreConfig: func() {
					if n := len(e.host.Commands()) - hostCmds; n != 0 {
						t.Errorf("applying a Failed migration sent %d commands to the host, want none", n)
					}
					e.expectStopped(t, "h1", record.PhaseFailed, record.PhaseDiscovering, "RetriesExhausted")
					e.resetFailed(t, "h1")
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "already_off"}),
					resource.TestMatchResourceAttr(addr, "errors.0", regexp.MustCompile(`^`+errorEntryTime+
						regexp.QuoteMeta(`Discovering attempt 1 (transient): `))),
					resource.TestMatchResourceAttr(addr, "errors.1", regexp.MustCompile(`^`+errorEntryTime+
						regexp.QuoteMeta(`Discovering attempt 2 (transient): `))),
					resource.TestMatchResourceAttr(addr, "errors.2", regexp.MustCompile(`^`+errorEntryTime+
						regexp.QuoteMeta(`Discovering attempt 2 (reentered): reset by annotation vmmigration.io/reset: re-entering Discovering with a fresh retry budget`)+`$`)),
					func(*terraform.State) error {
						cm := e.record(t, "h1")
						if v, ok := cm.Annotations[coord.AnnotationReset]; ok {
							return fmt.Errorf("reset annotation still on the ConfigMap: %q", v)
						}
						return nil
					},
				),
			},
		},
	})
}

// TestAccMigrationFailureImportExhaustedThenReset: DataVolumes failing
// beyond the budget after the source was powered off: Failed in Importing;
// the error names what was kept, that the source stays off, and the reset.
// After the reset the migration continues from Importing without powering
// anything off again.
func TestAccMigrationFailureImportExhaustedThenReset(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, failVM("x1", esxisim.PoweredOn))
	const addr = "vmmigration_migration.x1"
	cfg := e.cfg(e.failingMigration("x1", "x1", 2, `  power_off_policy = "hard"`))
	stagingDir := e.workDir + "/" + e.namespace + "/x1"
	failed := e.stopRE("x1", `migration failed in phase Importing: Importing did not succeed after 2 attempts; the last error: `+
		`DataVolume `+e.namespace+`/x1-disk-0 failed (Evicted: `+kubesim.DefaultTransientMessage+`); deleted it so that the next attempt recreates it. `+
		`Nothing was cleaned up; kept the staged copies under `+stagingDir+
		` (a reset resumes from them; deleting the resource removes them). The source VM's disks were never modified; `+
		`the source VM was powered off by this migration at `+rfc3339Token+` and stays off: power it on again if you abandon the migration. `+
		`Fix the cause, then add the annotation vmmigration.io/reset="true" to ConfigMap `+e.namespace+`/vmmigration-x1 and run apply again to retry Importing, `+
		`or delete the resource to forget the migration`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig:   func() { e.sim.FailNextDataVolumes(2, "", "") },
				Config:      cfg,
				ExpectError: failed,
			},
			{
				// Failed is terminal: the same message again, nothing done.
				PreConfig: func() {
					e.expectStopped(t, "x1", record.PhaseFailed, record.PhaseImporting, "RetriesExhausted")
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				ExpectError:      failed,
			},
			{
				PreConfig: func() {
					if dvs, _ := e.ours(t, "x1"); len(dvs) != 0 {
						t.Errorf("DataVolumes %v left by the Failed migration, want none", dvs)
					}
					e.resetFailed(t, "x1")
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "hard"}),
					func(*terraform.State) error {
						if n := e.count("power.off"); n != 1 {
							return fmt.Errorf("power.off sent %d times, want once", n)
						}
						if dvs, vms := e.ours(t, "x1"); len(dvs) != 1 || len(vms) != 1 {
							return fmt.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
						}
						return nil
					},
				),
			},
		},
	})
}

// TestAccMigrationFailureManualPowerOff: power_off_policy "manual" with the
// source running is refused at plan time, naming what the human must do,
// before any record exists. Once they power the VM off, the next apply
// completes. The provider never sends a power command.
func TestAccMigrationFailureManualPowerOff(t *testing.T) {
	e := newMigrationEnv(t)
	id, _ := e.host.AddVM(t, failVM("m1", esxisim.PoweredOn))
	const addr = "vmmigration_migration.m1"
	cfg := e.cfg(e.failingMigration("m1", "m1", 2, `  power_off_policy = "manual"`))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ExpectError: e.blockedRE("power_off_policy", fmt.Sprintf(`Migrating VM "m1" (vmid %d) on host esxi-a to %s/m1 would stop at this check, before anything is touched: `+
					`VM "m1" is poweredOn and power_off_policy is "manual": shut it down yourself before applying, or choose "graceful".`, id, e.namespace)),
			},
			{
				PreConfig: func() {
					e.expectNoRecord(t, "m1")
					if err := e.host.SetPowerState(id, esxisim.PoweredOff); err != nil {
						t.Fatal(err)
					}
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "already_off", "errors.#": "0"}),
					resource.TestCheckResourceAttrSet(addr, "timestamps.sourcePoweredOff"),
					func(*terraform.State) error {
						if n := e.count("power.off") + e.count("power.shutdown"); n != 0 {
							return fmt.Errorf("%d power commands sent under policy manual", n)
						}
						return nil
					},
				),
			},
		},
	})
}
