package provider_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
)

// TestAccOneSourceOneMigration configures two migrations of the same source
// VM into two destinations, applies them in one run and then again: one
// migration completes, the other stops at Validated naming the first, the
// source is powered off once, and only one copy of the VM exists.
func TestAccOneSourceOneMigration(t *testing.T) {
	e := newMigrationEnv(t)
	e.addGuestVM(t, "twice", "00:50:56:00:72:01", mib)
	w := acctest.NewWorkdir(t, acctest.BinaryConfig(e.providerBlock())+
		e.migrationWithRetries("dup-a", "twice", `{ "VM Network" = "pod" }`, 2, "")+
		e.migrationWithRetries("dup-b", "twice", `{ "VM Network" = "pod" }`, 2, ""))
	for i := 1; i <= 2; i++ {
		r := w.Run(context.Background(), nil, "apply", "-auto-approve", "-input=false", "-no-color")
		if r.Err == nil {
			t.Fatalf("apply %d succeeded with two migrations of one VM:\n%s", i, r.Stdout)
		}
		out := strings.Join(strings.Fields(r.Stdout+r.Stderr), " ")
		if !strings.Contains(out, "is already being migrated by "+e.namespace+"/dup-") {
			t.Fatalf("apply %d did not name the migration that holds the VM:\n%s\n%s", i, r.Stdout, r.Stderr)
		}
		if !strings.Contains(out, "vmmigration_migration.dup-a: Creation complete") && !strings.Contains(out, "vmmigration_migration.dup-b: Creation complete") && i == 1 {
			t.Fatalf("neither migration completed in the first apply:\n%s", r.Stdout)
		}
	}
	if n := e.host.Stats().PowerCommands; n != 1 {
		t.Errorf("%d power commands ran on the host, want exactly one", n)
	}
	var vms []string
	for _, name := range []string{"dup-a", "dup-b"} {
		_, v := e.ours(t, name)
		vms = append(vms, v...)
	}
	if len(vms) != 1 {
		t.Errorf("VirtualMachines %v: want exactly one copy of the source", vms)
	}
	recs := e.cluster.Records(t, e.namespace)
	stopped := 0
	for _, rec := range recs {
		if rec.Phase == "ManualInterventionRequired" && rec.RetryPhase == "Validated" && rec.PowerOff == nil {
			stopped++
		}
	}
	if len(recs) != 2 || stopped != 1 {
		t.Errorf("records %v: want one Completed and one stopped at Validated with no power-off", recs)
	}
}
