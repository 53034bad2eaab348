package provider_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
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
	if e.cluster.HasRecord(t, e.namespace, name) {
		t.Errorf("ConfigMap %s after a refused plan: it exists, want not found", coord.RecordName(name))
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
func (e *migrationEnv) record(t *testing.T, name string) acctest.Checkpoint {
	t.Helper()
	return e.cluster.Record(t, e.namespace, name)
}

// expectStopped checks that the checkpoint record exists and is stopped in
// state, with phase as the checkpoint it stopped in.
func (e *migrationEnv) expectStopped(t *testing.T, name string, state, phase record.Phase, reason string) record.Record {
	t.Helper()
	rec := e.record(t, name).Record
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
	e.cluster.AnnotateRecord(t, e.namespace, name, coord.AnnotationReset, "true")
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
