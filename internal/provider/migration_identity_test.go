package provider_test

import (
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// TestAccMigrationKeepsFirmwareIdentity runs the built provider through the
// terraform CLI: the VM keeps the firmware UUID and serial KubeVirt's
// admission gave it at creation (the guest's SMBIOS identity) through a
// second apply that reports no change, and through an apply that resumes
// at CreatingVM with the VM already there, as one does after an apply
// killed between the VM's creation and its checkpoint (no state is saved
// for an unfinished create).
func TestAccMigrationKeepsFirmwareIdentity(t *testing.T) {
	e := newMigrationEnv(t)
	e.addSmallVM(t, "ident", "00:50:56:00:50:01")
	cfg := strings.TrimSuffix(acctest.BinaryConfig(""), acctest.ProviderConfig("")) + e.lifeConfig(lifeCfg{label: "ident"})
	w := acctest.NewWorkdir(t, cfg)
	run := func(wantExit int, args ...string) acctest.Result {
		t.Helper()
		res := w.Run(t.Context(), nil, args...)
		code := 0
		if res.Err != nil {
			code = -1
			if ee, ok := res.Err.(interface{ ExitCode() int }); ok {
				code = ee.ExitCode()
			}
		}
		if code != wantExit {
			t.Fatalf("terraform %v: exit %d, want %d\n%s\n%s", args, code, wantExit, res.Stdout, res.Stderr)
		}
		return res
	}
	run(0, "apply", "-auto-approve", "-input=false")
	admitted, ok := e.sim.AdmittedFirmware(e.namespace, "ident")
	if !ok || admitted.UUID == "" || admitted.Serial == "" {
		t.Fatalf("admission gave the VM no firmware identity: %+v %v", admitted, ok)
	}
	uid := e.cluster.VM(t, e.namespace, "ident").UID
	same := func(when string) {
		t.Helper()
		vm := e.cluster.VM(t, e.namespace, "ident")
		if vm.FirmwareUUID != admitted.UUID || vm.FirmwareSerial != admitted.Serial {
			t.Errorf("%s: firmware UUID %q serial %q, want %q and %q from admission (KubeVirt's legacy UUID for a VM that lost its own is %s)",
				when, vm.FirmwareUUID, vm.FirmwareSerial, admitted.UUID, admitted.Serial, kubesim.CalculateLegacyUUID("ident"))
		}
		if vm.UID != uid {
			t.Errorf("%s: VirtualMachine UID %s, want %s (the VM must not be replaced)", when, vm.UID, uid)
		}
	}
	same("after the first apply")

	run(0, "apply", "-auto-approve", "-input=false")
	run(0, "plan", "-detailed-exitcode", "-input=false")
	same("after a second apply")

	run(0, "state", "rm", "vmmigration_migration.ident")
	e.cluster.RewindRecord(t, e.namespace, "ident", record.PhaseCreatingVM)
	run(0, "apply", "-auto-approve", "-input=false")
	run(0, "plan", "-detailed-exitcode", "-input=false")
	same("after an apply that resumed at CreatingVM")
}
