package provider_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// The acceptance tests of this file drive vmmigration_migration into each
// failure state through the real Terraform CLI and pin the exact text the
// user reads, what the checkpoint record says, that a failed create leaves
// nothing in the Terraform state (so nothing is tainted or replaced), and
// how each state is left: by itself (Retryable), by a human fixing the cause
// and applying again (ManualInterventionRequired), or only by the reset
// annotation (Failed).

// failVM is a small VM with one 4 MiB disk on "VM Network".
func failVM(name string, power esxisim.PowerState) esxisim.VMSpec {
	return esxisim.VMSpec{
		Name: name, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 4 * mib}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: power, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.20"},
	}
}

// failingMigration renders a vmmigration_migration like e.migration, with
// a retry budget of attempts tries.
func (e *migrationEnv) failingMigration(label, vmName string, attempts int, extra string) string {
	return e.migrationWithRetries(label, vmName, `{ "VM Network" = "pod" }`, attempts, extra)
}

// cfg is the provider configuration plus one resource.
func (e *migrationEnv) cfg(resource string) string {
	return acctest.ProviderConfig(e.providerBlock()) + resource
}

const rfc3339Token = "{{RFC3339}}"

// stopRE matches the diagnostic the resource reports when the engine stops:
// the summary, then the detail with the engine's message body, across
// Terraform's line wrapping. {{RFC3339}} in body matches a UTC timestamp.
func (e *migrationEnv) stopRE(name, body string) *regexp.Regexp {
	detail := fmt.Sprintf("Migration %s/%s stopped: %s\n\nProgress is kept in ConfigMap %s/vmmigration-%s; nothing done so far is lost.",
		e.namespace, name, body, e.namespace, name)
	words := strings.Fields(detail)
	for i, w := range words {
		words[i] = strings.ReplaceAll(regexp.QuoteMeta(w), regexp.QuoteMeta(rfc3339Token), `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	}
	return regexp.MustCompile(`Error: Migration stopped[\s\S]*` + strings.Join(words, `\s+`))
}

// blockedRE matches the plan-time error of a failed pre-flight blocker.
func (e *migrationEnv) blockedRE(check, detail string) *regexp.Regexp {
	return regexp.MustCompile(`Error: Migration blocked by pre-flight check ` + regexp.QuoteMeta(check) + `[\s\S]*` + errRE(detail).String())
}

// expectNoRecord checks that no checkpoint record was created.
func (e *migrationEnv) expectNoRecord(t *testing.T, name string) {
	t.Helper()
	err := e.cluster.AdminClient().Get(t.Context(), keyOf(e.namespace, engine.RecordName(name)), &corev1.ConfigMap{})
	if !kube.IsNotFound(err) {
		t.Errorf("ConfigMap %s after a refused plan: err %v, want not found", engine.RecordName(name), err)
	}
}

// hostdFailedRE matches the error of a migration whose Discovering ran out
// of retries because hostd failed every vim-cmd (esxisim.VimLoginReset).
func (e *migrationEnv) hostdFailedRE(name string) *regexp.Regexp {
	return e.stopRE(name, `migration failed in phase Discovering: Discovering did not succeed after 2 attempts; the last error: `+
		`esxi host esxi-a: getallvms: hostd is not answering vim-cmd (restarting or overloaded): retry later; if it persists restart hostd on the host: `+
		`FailedToLogin: Failed to login: Connection reset by peer. Nothing was cleaned up. The source VM's disks were never modified. `+
		`Fix the cause, then add the annotation vmmigration.io/reset="true" to ConfigMap `+e.namespace+`/vmmigration-`+name+` and run apply again to retry Discovering, `+
		`or delete the resource to forget the migration`)
}

// record reads the checkpoint ConfigMap vmmigration-<name> and its record.
func (e *migrationEnv) record(t *testing.T, name string) (engine.Record, *corev1.ConfigMap) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := e.cluster.AdminClient().Get(t.Context(), keyOf(e.namespace, engine.RecordName(name)), cm); err != nil {
		t.Fatalf("checkpoint ConfigMap %s/%s: %v", e.namespace, engine.RecordName(name), err)
	}
	var rec engine.Record
	if err := json.Unmarshal([]byte(cm.Data[engine.RecordKey]), &rec); err != nil {
		t.Fatalf("ConfigMap %s: %s is not a record: %v", cm.Name, engine.RecordKey, err)
	}
	return rec, cm
}

// expectStopped checks that the checkpoint record exists and is stopped in
// state, with phase as the checkpoint it stopped in.
func (e *migrationEnv) expectStopped(t *testing.T, name string, state, phase engine.Phase, reason string) engine.Record {
	t.Helper()
	rec, _ := e.record(t, name)
	if rec.Phase != state || rec.RetryPhase != phase || rec.Reason != reason {
		t.Errorf("record of %s: phase %s, retryPhase %s, reason %s; want %s, %s, %s (message %q)",
			name, rec.Phase, rec.RetryPhase, rec.Reason, state, phase, reason, rec.Message)
	}
	return rec
}

// resetFailed is what a human does to restart a Failed migration:
// kubectl annotate configmap vmmigration-<name> vmmigration.io/reset=true.
func (e *migrationEnv) resetFailed(t *testing.T, name string) {
	t.Helper()
	_, cm := e.record(t, name)
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[engine.AnnotationReset] = "true"
	if err := e.cluster.AdminClient().Update(t.Context(), cm); err != nil {
		t.Fatalf("annotating ConfigMap %s: %v", cm.Name, err)
	}
}

// notInState is a refresh step after a failed apply: the resource is not in
// the Terraform state, and the next plan creates it (neither tainted nor
// replaced).
func notInState(addr string) resource.TestStep {
	return resource.TestStep{
		RefreshState:       true,
		ExpectNonEmptyPlan: true,
		Check: func(s *terraform.State) error {
			if s == nil {
				return nil
			}
			for _, m := range s.Modules {
				if rs, ok := m.Resources[addr]; ok {
					return fmt.Errorf("%s is in the state after a failed create (id %q, tainted %v)", addr, rs.Primary.ID, rs.Primary.Tainted)
				}
			}
			return nil
		},
		RefreshPlanChecks: resource.RefreshPlanChecks{PostRefresh: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
		}},
	}
}

// plansCreate asserts that the step's plan creates addr: it is not in the
// state, so a failed create was not saved and is not replaced.
func plansCreate(addr string) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
		plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
	}}
}

const errorEntryTime = `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ `

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
					rec, _ := e.record(t, "r1")
					var importing []engine.ErrorEntry
					for _, h := range rec.Errors {
						t.Logf("error entry: %s attempt %d (%s, reason %s): %s", h.Phase, h.Attempt, h.Class, h.Reason, h.Message)
						if h.Phase == engine.PhaseImporting {
							importing = append(importing, h)
						}
					}
					if len(importing) != 1 || importing[0].Reason != "DataVolumeFailed" || importing[0].Class != engine.ClassTransient {
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
					rec := e.expectStopped(t, "h1", engine.PhaseFailed, engine.PhaseDiscovering, "RetriesExhausted")
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
					e.expectStopped(t, "h1", engine.PhaseFailed, engine.PhaseDiscovering, "RetriesExhausted")
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
						_, cm := e.record(t, "h1")
						if v, ok := cm.Annotations[engine.AnnotationReset]; ok {
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
					e.expectStopped(t, "x1", engine.PhaseFailed, engine.PhaseImporting, "RetriesExhausted")
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
					rec := e.expectStopped(t, "k1", engine.PhaseManualInterventionRequired, engine.PhaseStarting, "NoKVM")
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
					e.expectStopped(t, "absent", engine.PhaseFailed, engine.PhaseDiscovering, "RetriesExhausted")
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
					rec := e.expectStopped(t, "absent", engine.PhaseFailed, engine.PhaseDiscovering, "SourceVMNotFound")
					if last := rec.Errors[len(rec.Errors)-1]; last.Class != engine.ClassPermanent || last.Reason != "SourceVMNotFound" {
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
						rec, _ := e.record(t, "absent")
						for _, h := range rec.Errors {
							if h.Reason == "SourceChanged" && h.Class == engine.ClassReentered {
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
	halted := kubevirtv1.RunStrategyHalted
	foreign := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: "n1", Labels: map[string]string{"owner": "someone-else"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{}},
		}},
	}
	admin := e.cluster.AdminClient()
	if err := admin.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	untouched := func() {
		t.Helper()
		var vm kubevirtv1.VirtualMachine
		if err := admin.Get(t.Context(), keyOf(e.namespace, "n1"), &vm); err != nil {
			t.Fatalf("the foreign VM: %v", err)
		}
		if vm.UID != foreign.UID || vm.Generation != foreign.Generation || len(vm.Labels) != 1 || vm.Labels["owner"] != "someone-else" ||
			vm.Labels[kube.LabelMigration] != "" || len(vm.Annotations) != 0 {
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
					if err := admin.Delete(t.Context(), foreign); err != nil {
						t.Fatal(err)
					}
				},
				Config:           cfg,
				ConfigPlanChecks: plansCreate(addr),
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{"phase": "Completed", "power_off_action": "hard"}),
					func(s *terraform.State) error {
						var vm kubevirtv1.VirtualMachine
						if err := admin.Get(t.Context(), keyOf(e.namespace, "n1"), &vm); err != nil {
							return err
						}
						if vm.UID == foreign.UID || vm.Labels[kube.LabelMigration] != "n1" {
							return fmt.Errorf("VM n1 uid %s labels %v, want a new VM of the migration", vm.UID, vm.Labels)
						}
						return resource.TestCheckResourceAttr(addr, "vm_uid", string(vm.UID))(s)
					},
				),
			},
		},
	})
}
