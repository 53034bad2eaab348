package provider_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// TestAccMigrationLifeImport adopts a migration from its record by
// <namespace>/<name>, with terraform import and with an import block:
// the state matches the configuration, so the plan is empty.
func TestAccMigrationLifeImport(t *testing.T) {
	e := newMigrationEnv(t)
	e.addSmallVM(t, "imp", "00:50:56:00:30:01")
	const addr = "vmmigration_migration.imp"
	cfg := e.lifeConfig(lifeCfg{label: "imp", dest: `    labels = { team = "b" }`,
		extra: "  validation = { timeout = \"1m\" }\n  power_off_policy = \"hard\"\n"})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{Config: cfg},
			{Config: cfg, ResourceName: addr, ImportState: true, ImportStateVerify: true},
			{Config: cfg, ResourceName: addr, ImportState: true, ImportStateKind: resource.ImportBlockWithID},
			{Config: cfg, ResourceName: addr, ImportState: true, ImportStateId: "bad-id",
				ExpectError: errRE(`Import a migration by its destination as <namespace>/<name>, for example apps/web-01; got "bad-id".`)},
			{Config: cfg, ResourceName: addr, ImportState: true, ImportStateId: e.namespace + "/nothing",
				ExpectError: errRE(`migration ` + e.namespace + `/nothing has no record (ConfigMap ` + e.namespace + `/vmmigration-nothing) ` +
					`and there is no VirtualMachine ` + e.namespace + `/nothing to adopt either.`)},
		},
	})
}

// TestAccMigrationLifeDrift runs the built provider through the terraform
// CLI: a Completed migration plans nothing (exit code 0); a source VM
// powered on again is a warning and still no change; a VirtualMachine
// deleted outside Terraform is drift and the plan replaces the migration
// (exit code 2); applying it migrates again and the plan is empty again.
func TestAccMigrationLifeDrift(t *testing.T) {
	e := newMigrationEnv(t)
	vmid, _ := e.addSmallVM(t, "dr", "00:50:56:00:40:01")
	// The required_providers block of BinaryConfig, then the configuration.
	cfg := strings.TrimSuffix(acctest.BinaryConfig(""), acctest.ProviderConfig("")) + e.lifeConfig(lifeCfg{label: "dr"})
	w := acctest.NewWorkdir(t, cfg)
	ctx := t.Context()
	run := func(wantExit int, args ...string) acctest.Result {
		t.Helper()
		res := w.Run(ctx, nil, args...)
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
	run(0, "plan", "-detailed-exitcode", "-input=false")

	if err := e.host.SetPowerState(vmid, esxisim.PoweredOn); err != nil {
		t.Fatal(err)
	}
	res := run(0, "plan", "-detailed-exitcode", "-input=false")
	if out := res.Stdout + res.Stderr; !strings.Contains(out, "Source VM running again after cutover") || !errRE("two servers with one identity").MatchString(out) {
		t.Fatalf("plan with the source running again: want the warning\n%s", out)
	}
	if err := e.host.SetPowerState(vmid, esxisim.PoweredOff); err != nil {
		t.Fatal(err)
	}

	old := e.cluster.VM(t, e.namespace, "dr")
	e.cluster.DeleteVM(t, e.namespace, "dr")
	res = run(2, "plan", "-detailed-exitcode", "-input=false")
	out := res.Stdout + res.Stderr
	for _, want := range []string{"Migration drifted", "must be replaced", "forces replacement"} {
		if !strings.Contains(out, want) {
			t.Fatalf("plan after the VM was deleted: want %q\n%s", want, out)
		}
	}
	if !errRE("VirtualMachine " + e.namespace + "/dr is gone").MatchString(out) {
		t.Fatalf("plan does not say the VM is gone\n%s", out)
	}
	run(0, "apply", "-auto-approve", "-input=false")
	if now := e.cluster.VM(t, e.namespace, "dr"); now.UID == old.UID {
		t.Fatalf("VirtualMachine UID unchanged after the replacement")
	}
	run(0, "plan", "-detailed-exitcode", "-input=false")

	// A DataVolume deleted outside Terraform (with no claim left behind) is
	// drift too.
	e.cluster.DeleteDataVolume(t, e.namespace, "dr-disk-0")
	res = run(2, "plan", "-detailed-exitcode", "-input=false")
	out = res.Stdout + res.Stderr
	if !strings.Contains(out, "Migration drifted") || !strings.Contains(out, "dr-disk-0") || !strings.Contains(out, "forces replacement") {
		t.Fatalf("plan after the DataVolume was deleted: want drift naming dr-disk-0 and a replacement\n%s", out)
	}
	run(0, "apply", "-auto-approve", "-input=false")
	run(0, "plan", "-detailed-exitcode", "-input=false")

	// After cutover the source VM is often unregistered from its host:
	// that is normal, not drift.
	if err := e.host.Unregister(vmid); err != nil {
		t.Fatal(err)
	}
	res = run(0, "plan", "-detailed-exitcode", "-input=false")
	if out := res.Stdout + res.Stderr; strings.Contains(out, "Migration drifted") {
		t.Fatalf("plan after the source was unregistered reports drift\n%s", out)
	}
	run(0, "destroy", "-auto-approve", "-input=false")
}

// TestAccMigrationLifePreflightWarning: a failed warning check of a new
// migration is a warning in the plan, which still succeeds.
func TestAccMigrationLifePreflightWarning(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, esxisim.VMSpec{Name: "pw", GuestOS: "rhel9-64", Power: esxisim.PoweredOn,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 2 * mib}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:51:01"}}})
	cfg := strings.TrimSuffix(acctest.BinaryConfig(""), acctest.ProviderConfig("")) +
		e.lifeConfig(lifeCfg{label: "pw", extra: `  power_off_policy = "hard"`})
	w := acctest.NewWorkdir(t, cfg)
	res := w.Run(t.Context(), nil, "plan", "-input=false")
	if res.Err != nil {
		t.Fatalf("plan: %v\n%s\n%s", res.Err, res.Stdout, res.Stderr)
	}
	out := res.Stdout + res.Stderr
	if !strings.Contains(out, "Warning:") || !errRE(`is poweredOn and power_off_policy is "hard": it will be powered off without a guest shutdown`).MatchString(out) {
		t.Fatalf("plan: want the power_off_policy warning\n%s", out)
	}
	if !strings.Contains(out, "1 to add") {
		t.Fatalf("plan: want the migration planned despite the warning\n%s", out)
	}
}

// TestAccMigrationLifePreflightPlan: the plan of a new migration runs the
// pre-flight checks, so a blocker fails the plan with its fix.
func TestAccMigrationLifePreflightPlan(t *testing.T) {
	e := newMigrationEnv(t)
	e.host.AddVM(t, esxisim.VMSpec{Name: "pf", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 2 * mib}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:50:01"}, {Network: "Storage", MAC: "00:50:56:00:50:02"}}})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: e.lifeConfig(lifeCfg{label: "pf"}), PlanOnly: true,
			ExpectError: errRE(`Migration blocked by pre-flight check nics_mapped`),
		}},
	})
}
