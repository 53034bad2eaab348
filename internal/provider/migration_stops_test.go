package provider_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// TestAccMigrationFailureMissingKVM: no node offers /dev/kvm: the VM is
// created but cannot be scheduled, ManualInterventionRequired in Starting
// naming the node problem. Once fixed, the next apply starts the same VM.
func TestAccMigrationFailureMissingKVM(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, failVM("k1", esxisim.PoweredOff))
	const addr = "vmmigration_migration.k1"
	cfg := e.cfg(e.failingMigration("k1", "k1", 2, ""))
	var vmUID string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { e.sim.SetSchedulingFailure(kubesim.MissingKVM) },
				Config:    cfg,
				ExpectError: e.stopRE("k1", `migration needs manual intervention in phase Starting: the VM cannot be scheduled: no node offers /dev/kvm (`+
					kubesim.MessageMissingKVM+`). Enable hardware virtualization on the nodes (devices.kubevirt.io/kvm), or KubeVirt's software emulation, then run apply again`),
			},
			{
				PreConfig: func() {
					rec := e.expectStopped(t, "k1", record.PhaseManualInterventionRequired, record.PhaseStarting, "NoKVM")
					if rec.VM == nil || rec.VM.UID == "" {
						t.Fatalf("no VM recorded before Starting: %+v", rec.VM)
					}
					vmUID = rec.VM.UID
					e.sim.ClearSchedulingFailure()
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "already_off"}),
					resource.TestCheckResourceAttrSet(addr, "timestamps.vmStarted"),
					resource.TestMatchResourceAttr(addr, "errors.0", regexp.MustCompile(`^`+errorEntryTime+
						regexp.QuoteMeta(`Starting attempt 1 (needs-human): the VM cannot be scheduled: no node offers /dev/kvm`))),
					func(s *terraform.State) error {
						// The VM created before the stop is the one started.
						if err := resource.TestCheckResourceAttr(addr, "vm_uid", vmUID)(s); err != nil {
							return err
						}
						if dvs, vms := e.ours(t, "k1"); len(dvs) != 1 || len(vms) != 1 {
							return fmt.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
						}
						return nil
					},
				),
			},
		},
	})
}

// TestAccMigrationFailureSourceNotFound: a source VM that does not exist
// is refused at plan time, and no record is created. When the plan cannot
// see the host (hostd failing), the apply runs and stops Failed; after a
// reset the engine finds no such VM: Failed in Discovering, with nothing in
// the Terraform state. Correcting vm_name then conflicts with the record's
// identity, and only deleting the record by hand lets the migration start.
func TestAccMigrationFailureSourceNotFound(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, failVM("present", esxisim.PoweredOff))
	const addr = "vmmigration_migration.absent"
	absent := e.cfg(e.failingMigration("absent", "absent", 2, ""))
	present := e.cfg(e.failingMigration("absent", "present", 2, ""))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: absent,
				ExpectError: regexp.MustCompile(`Error: Source VM not found[\s\S]*` +
					errRE(`ESXi host "esxi-a" has no VM named "absent". Names are matched exactly; list them with the vmmigration_esxi_vms data source`).String()),
			},
			{
				// hostd fails every vim-cmd: the plan warns that the checks
				// will run at apply time, and the apply exhausts its retries.
				PreConfig: func() {
					e.expectNoRecord(t, "absent")
					e.host.FailVimCmd(1000, esxisim.VimLoginReset)
				},
				Config:      absent,
				ExpectError: e.hostdFailedRE("absent"),
			},
			{
				PreConfig: func() {
					e.host.FailVimCmd(0, esxisim.VimLoginReset)
					e.expectStopped(t, "absent", record.PhaseFailed, record.PhaseDiscovering, "RetriesExhausted")
					e.resetFailed(t, "absent")
				},
				Config:           absent,
				ConfigPlanChecks: plansCreate(addr),
				ExpectError: e.stopRE("absent", `migration failed in phase Discovering: ESXi host "esxi-a" has no VM named "absent". `+
					`Names are matched exactly; list them with the vmmigration_esxi_vms data source. `+
					`Nothing was cleaned up. The source VM's disks were never modified. Fix the cause, `+
					`then add the annotation vmmigration.io/reset="true" to ConfigMap `+e.namespace+`/vmmigration-absent and run apply again to retry Discovering, `+
					`or delete the resource to forget the migration`),
			},
			notInState(addr),
			{
				PreConfig: func() {
					rec := e.expectStopped(t, "absent", record.PhaseFailed, record.PhaseDiscovering, "SourceVMNotFound")
					if last := rec.Errors[len(rec.Errors)-1]; last.Class != record.ClassPermanent || last.Reason != "SourceVMNotFound" {
						t.Errorf("last error entry %+v, want a permanent SourceVMNotFound (no retries)", last)
					}
					if n := e.count("power.off") + e.count("power.shutdown") + e.count("power.on"); n != 0 {
						t.Errorf("%d power commands sent", n)
					}
					// Following the error's advice, the user corrects vm_name.
					// Nothing was discovered or touched under the wrong name,
					// so the record starts over with the corrected source.
				},
				Config:           present,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed"}),
					resource.TestMatchResourceAttr(addr, "errors.#", regexp.MustCompile(`^[1-9][0-9]*$`)),
					func(*terraform.State) error {
						rec := e.record(t, "absent").Record
						for _, h := range rec.Errors {
							if h.Reason == "SourceChanged" && h.Class == record.ClassReentered {
								return nil
							}
						}
						return fmt.Errorf("no SourceChanged entry in the history: %+v", rec.Errors)
					},
				),
			},
		},
	})
}

// TestAccMigrationFailureDestinationNotOurs: a VirtualMachine with the
// destination's name that this migration did not create stops the
// migration in ManualInterventionRequired before anything is powered off or
// created, and is never touched; once the human removes it, the next apply
// completes.
func TestAccMigrationFailureDestinationNotOurs(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, failVM("n1", esxisim.PoweredOn))
	const addr = "vmmigration_migration.n1"
	foreign := e.cluster.CreateVM(t, e.namespace, "n1", "Halted", map[string]string{"owner": "someone-else"})
	untouched := func() {
		t.Helper()
		vm := e.cluster.VM(t, e.namespace, "n1")
		if vm.UID != foreign.UID || vm.Generation != foreign.Generation || len(vm.Labels) != 1 || vm.Labels["owner"] != "someone-else" ||
			vm.Labels[engine.LabelMigration] != "" || len(vm.Annotations) != 0 {
			t.Errorf("the foreign VM was touched: uid %s (was %s), generation %d (was %d), labels %v, annotations %v",
				vm.UID, foreign.UID, vm.Generation, foreign.Generation, vm.Labels, vm.Annotations)
		}
		if dvs, vms := e.ours(t, "n1"); len(dvs) != 0 || len(vms) != 0 {
			t.Errorf("DataVolumes %v, VMs %v labelled as the migration's", dvs, vms)
		}
		if n := e.count("power.off") + e.count("power.shutdown"); n != 0 {
			t.Errorf("%d power commands sent before the destination was free", n)
		}
	}
	cfg := e.cfg(e.failingMigration("n1", "n1", 2, `  power_off_policy = "hard"`))
	notOurs := e.blockedRE("destination_name_free", `Migrating VM "n1" (vmid 1) on host esxi-a to `+e.namespace+`/n1 would stop at this check, before anything is touched: `+
		`Namespace "`+e.namespace+`" already has VirtualMachine n1, not created by this migration. `+
		`The provider never overwrites what it does not own: choose another destination name, or remove or import the existing objects.`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg, ExpectError: notOurs},
			{
				// Applying again re-observes and stops again, still
				// without touching it.
				PreConfig: func() {
					untouched()
					e.expectNoRecord(t, "n1")
				},
				Config:      cfg,
				ExpectError: notOurs,
			},
			{
				PreConfig: func() {
					untouched()
					e.expectNoRecord(t, "n1")
					e.cluster.DeleteVM(t, e.namespace, "n1")
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "hard"}),
					func(s *terraform.State) error {
						vm := e.cluster.VM(t, e.namespace, "n1")
						if vm.UID == foreign.UID || vm.Labels[engine.LabelMigration] != "n1" {
							return fmt.Errorf("VM n1 uid %s labels %v, want a new VM of the migration", vm.UID, vm.Labels)
						}
						return resource.TestCheckResourceAttr(addr, "vm_uid", vm.UID)(s)
					},
				),
			},
		},
	})
}
