package provider_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// The tests of this file run the configurations under examples/ unchanged:
// the example's .tf files are copied into a Terraform working directory, a
// test.auto.tfvars.json points its variables at the simulators, and the real
// terraform CLI runs them with the built provider, as a user would.

// TestAccExampleSingle applies examples/single: the running VM is shut down
// gracefully through VMware Tools, migrated and validated (guest agent and
// IP), its checksums match the source disk, and a plan afterwards is empty.
func TestAccExampleSingle(t *testing.T) {
	e := newMigrationEnv(t)
	vmid, files := e.addGuestVM(t, "web-01", "00:50:56:00:60:01", 2*mib)
	w := e.exampleWorkdir(t, "single", map[string]any{"vm_name": "web-01", "shutdown_timeout": "30s"})

	tf(t, w, 0, "validate")
	res := tf(t, w, 2, "plan", "-detailed-exitcode", "-input=false")
	if !strings.Contains(res.Stdout, "vmmigration_migration.vm will be created") || !strings.Contains(res.Stdout, "web-01-disk-0") {
		t.Fatalf("the plan does not show the migration and its DataVolume:\n%s", res.Stdout)
	}
	tf(t, w, 0, "apply", "-auto-approve", "-input=false")
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")

	outs := tfOutputs(t, w)
	if string(outs["phase"]) != `"Completed"` {
		t.Errorf("output phase = %s, want \"Completed\"", outs["phase"])
	}
	var vm struct {
		ID             string `json:"id"`
		PowerOffAction string `json:"power_off_action"`
	}
	if err := json.Unmarshal(outs["vm"], &vm); err != nil {
		t.Fatal(err)
	}
	if vm.ID != e.namespace+"/web-01" || vm.PowerOffAction != record.PowerActionGraceful {
		t.Errorf("output vm = %s: want id %s/web-01 and power_off_action graceful", outs["vm"], e.namespace)
	}
	if st, err := e.host.PowerState(vmid); err != nil || st != esxisim.PoweredOff {
		t.Errorf("source power state %v (%v), want powered off", st, err)
	}
	recs := e.records(t)
	e.completed(t, recs, map[string]*esxisim.VMFiles{"web-01": files})
	rec := recs["web-01"]
	if c, ok := rec.Condition(record.CondGuestReady); !ok || !c.Status {
		t.Errorf("GuestReady condition %+v, want True (validation ran)", c)
	}
	if e.cluster.VM(t, e.namespace, "web-01").Labels["migrated-from"] != "esxi-a" {
		t.Errorf("the VirtualMachine lacks the example's label")
	}
}

// TestAccExampleWave20 applies examples/wave to a host with 20 VMs of the
// wave, one VM of the wave with a snapshot and one VM outside it, next to a
// vCLS system VM and an invalid VM as a vCenter-managed ESXi 8 host has
// them (name_regex matches them too: neither enters the wave, and neither
// blocks the others, at plan or at apply), with
// max_concurrent_migrations = 4 and -parallelism=20: the 20 are Completed
// with the source's checksums, the VM on a broken snapshot chain is skipped by the pre-flight
// gate and listed with its blocker, the other VM is not touched, at most 4
// migrations were in the host-reading phases at any instant, and more than
// one was (so a limiter that serialised everything, or none at all, fails).
func TestAccExampleWave20(t *testing.T) {
	e := newMigrationEnv(t)
	const n, limit = 20, 4
	files := map[string]*esxisim.VMFiles{}
	flats := map[string]string{}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("wave-%02d", i)
		_, f := e.addGuestVM(t, name, fmt.Sprintf("00:50:56:00:70:%02x", i), int64(1+i%2)*mib)
		files[name], flats[name] = f, f.Disks[0].Flat
	}
	_, snap := e.host.AddVM(t, esxisim.VMSpec{Name: "wave-snap", GuestOS: "rhel9-64", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: mib}}, NICs: []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:70:fe"}}})
	breakChain(t, snap)
	otherID, _ := e.addGuestVM(t, "db-01", "00:50:56:00:70:ff", mib)
	e.host.AddVM(t, esxisim.VMSpec{System: true, Name: "wave-vCLS-1", Power: esxisim.PoweredOn})
	e.host.AddVM(t, esxisim.VMSpec{Invalid: true, Datastore: "datastore1", Name: "wave-gone"})

	w := e.exampleWorkdir(t, "wave", map[string]any{
		"name_regex":                "^(wave-|$)",
		"max_concurrent_migrations": limit,
		"shutdown_timeout":          "30s",
	})
	start := time.Now()
	tf(t, w, 0, "apply", "-auto-approve", "-input=false", "-parallelism=20")
	t.Logf("20 migrations applied in %s", time.Since(start).Round(time.Second))
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")

	recs := e.records(t)
	if len(recs) != n {
		names := make([]string, 0, len(recs))
		for k := range recs {
			names = append(names, k)
		}
		sort.Strings(names)
		t.Fatalf("%d migration records %v, want the %d VMs of the wave", len(recs), names, n)
	}
	e.completed(t, recs, files)
	if st, err := e.host.PowerState(otherID); err != nil || st != esxisim.PoweredOn {
		t.Errorf("db-01 (outside the wave) is %v (%v), want still powered on", st, err)
	}
	outs := tfOutputs(t, w)
	var skipped map[string][]string
	if err := json.Unmarshal(outs["skipped"], &skipped); err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || len(skipped["wave-snap"]) == 0 || !strings.Contains(strings.Join(skipped["wave-snap"], " "), "snapshot_chain") {
		t.Errorf("output skipped = %s, want wave-snap with its snapshot_chain blocker", outs["skipped"])
	}
	var migrated map[string]struct {
		Phase string `json:"phase"`
	}
	if err := json.Unmarshal(outs["migrated"], &migrated); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if migrated[name].Phase != "Completed" {
			t.Errorf("output migrated[%s].phase = %q, want Completed", name, migrated[name].Phase)
		}
	}

	spans := hostSpans(t, recs, e.host.CommandLog(), flats)
	peak, when := maxOverlap(spans)
	t.Logf("at most %d migrations in the host-reading phases at once, at %v", peak, when)
	if peak > limit {
		t.Errorf("%d migrations were in the host-reading phases at once (%v), more than max_concurrent_migrations = %d", peak, when, limit)
	}
	if peak < 2 {
		t.Errorf("the migrations never overlapped in the host-reading phases (peak %d): the limit of %d was not exercised", peak, limit)
	}
}

// TestAccExampleWave2 applies examples/wave2: two databases and three app
// servers are migrated in one apply, and no app server migration started
// (its record was created) before every database migration was Completed.
func TestAccExampleWave2(t *testing.T) {
	e := newMigrationEnv(t)
	files := map[string]*esxisim.VMFiles{}
	for i, name := range []string{"db-01", "db-02", "app-01", "app-02", "app-03"} {
		_, files[name] = e.addGuestVM(t, name, fmt.Sprintf("00:50:56:00:80:%02x", i+1), mib)
	}
	w := e.exampleWorkdir(t, "wave2", map[string]any{"shutdown_timeout": "30s"})
	res := tf(t, w, 2, "plan", "-detailed-exitcode", "-input=false")
	for name := range files {
		wave := "apps"
		if strings.HasPrefix(name, "db-") {
			wave = "databases"
		}
		if want := fmt.Sprintf("vmmigration_migration.%s[%q] will be created", wave, name); !strings.Contains(res.Stdout, want) {
			t.Fatalf("the plan lacks %q:\n%s", want, res.Stdout)
		}
	}
	tf(t, w, 0, "apply", "-auto-approve", "-input=false")
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")

	recs := e.records(t)
	e.completed(t, recs, files)
	var lastDB time.Time
	for _, name := range []string{"db-01", "db-02"} {
		if c := recs[name].Timestamps.Completed; c != nil && c.After(lastDB) {
			lastDB = *c
		}
	}
	for _, name := range []string{"app-01", "app-02", "app-03"} {
		created := recs[name].Timestamps.Created
		if created == nil || !created.After(lastDB) {
			t.Errorf("%s: migration created at %v, before the last database was Completed at %v", name, created, lastDB)
		}
	}
	if got := e.cluster.VM(t, e.namespace, "app-01").Labels["migration-wave"]; got != "2-apps" {
		t.Errorf("app-01 label migration-wave = %q, want 2-apps", got)
	}
}

// TestAccExampleImport migrates two VMs with examples/single (two working
// directories, as two earlier runs), then adopts both with examples/import
// in a fresh working directory: the plan shows the two imports and nothing
// to add, change or destroy; after the apply the state holds the two
// migrations with the VMs' UIDs and the plan is empty (exit code 0); nothing
// was migrated again (same VirtualMachine UIDs).
func TestAccExampleImport(t *testing.T) {
	e := newMigrationEnv(t)
	uids := map[string]string{}
	for i, name := range []string{"web-01", "web-02"} {
		e.addGuestVM(t, name, fmt.Sprintf("00:50:56:00:90:%02x", i+1), mib)
		w := e.exampleWorkdir(t, "single", map[string]any{"vm_name": name})
		tf(t, w, 0, "apply", "-auto-approve", "-input=false")
		uids[name] = e.cluster.VM(t, e.namespace, name).UID
	}
	w := e.exampleWorkdir(t, "import", map[string]any{"migrated": map[string]any{
		"web-01": map[string]any{"vm_name": "web-01"},
		"web-02": map[string]any{"vm_name": "web-02"},
	}})
	res := tf(t, w, 0, "plan", "-input=false")
	if !strings.Contains(res.Stdout, "Plan: 2 to import, 0 to add, 0 to change, 0 to destroy.") {
		t.Fatalf("the plan with the import blocks should only import:\n%s", res.Stdout)
	}
	tf(t, w, 0, "apply", "-auto-approve", "-input=false")
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")

	var adopted map[string]struct {
		Phase string `json:"phase"`
		VMUID string `json:"vm_uid"`
	}
	if err := json.Unmarshal(tfOutputs(t, w)["adopted"], &adopted); err != nil {
		t.Fatal(err)
	}
	for name, uid := range uids {
		if a := adopted[name]; a.Phase != "Completed" || a.VMUID != uid {
			t.Errorf("adopted %s: phase %q, vm_uid %q; want Completed and %s", name, a.Phase, a.VMUID, uid)
		}
		if now := e.cluster.VM(t, e.namespace, name).UID; now != uid {
			t.Errorf("%s: VirtualMachine UID %s after the import, was %s", name, now, uid)
		}
	}
}

// TestAccExampleGitOps runs examples/gitops as its README's pipeline does:
// a pull request's `plan -detailed-exitcode -out=plan.tfplan` (exit 2 with
// the DataVolumes to create), `apply plan.tfplan` on merge, and the next
// plan is empty (exit 0). A pull request that adds a VM on a broken snapshot chain fails
// its plan (exit 1) with the pre-flight blocker as an error that names the
// VM and the check; the errored plan file Terraform saves cannot be applied,
// and nothing is touched: the other VM of that pull request is not migrated
// and the snapshot VM keeps running. Without snap-01 the pull request plans
// one VM to add, and applies.
func TestAccExampleGitOps(t *testing.T) {
	e := newMigrationEnv(t)
	_, web1 := e.addGuestVM(t, "web-01", "00:50:56:00:a0:01", mib)
	_, web2 := e.addGuestVM(t, "web-02", "00:50:56:00:a0:02", mib)
	snapID, snap := e.host.AddVM(t, esxisim.VMSpec{Name: "snap-01", GuestOS: "rhel9-64", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: mib}}, NICs: []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:a0:03"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.13"}})
	breakChain(t, snap)
	vars := e.exampleVars(t)
	pr := func(names ...string) {
		m := map[string]any{}
		for _, n := range names {
			m[n] = map[string]any{"vm_name": n}
		}
		vars["migrations"] = m
	}
	pr("web-01")
	w := e.exampleWorkdir(t, "gitops", vars)
	planFile := filepath.Join(w.Dir, "plan.tfplan")

	// Pull request 1: web-01.
	res := tf(t, w, 2, "plan", "-detailed-exitcode", "-input=false", "-out=plan.tfplan")
	if !strings.Contains(res.Stdout, `vmmigration_migration.vm["web-01"] will be created`) || !strings.Contains(res.Stdout, "web-01-disk-0") {
		t.Fatalf("the pull request's plan does not show the migration and its DataVolume:\n%s", res.Stdout)
	}
	// Merge.
	tf(t, w, 0, "apply", "-input=false", "plan.tfplan")
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")
	if err := os.Remove(planFile); err != nil {
		t.Fatal(err)
	}

	// Pull request 2: web-02 and snap-01, whose snapshot chain lost its base.
	pr("web-01", "web-02", "snap-01")
	writeTFVars(t, w, vars)
	res = tf(t, w, 1, "plan", "-detailed-exitcode", "-input=false", "-out=plan.tfplan")
	if out := res.Stderr; !strings.Contains(out, "Migration blocked by pre-flight check snapshot_chain") ||
		!strings.Contains(out, `vmmigration_migration.vm["snap-01"]`) || !strings.Contains(out, `VM "snap-01"`) {
		t.Fatalf("the plan should fail with the snapshot_chain blocker of snap-01:\n%s\n%s", res.Stdout, out)
	}
	if strings.Contains(res.Stderr, `vmmigration_migration.vm["web-02"]`) {
		t.Errorf("the plan reports an error for web-02, which has no blocker:\n%s", res.Stderr)
	}
	// Terraform may save an errored plan; the merge job must not be able to
	// apply it.
	if _, err := os.Stat(planFile); err == nil {
		res = tf(t, w, 1, "apply", "-input=false", "plan.tfplan")
		t.Logf("apply of the failed plan: %s", strings.TrimSpace(res.Stderr))
	}
	if _, ok := e.records(t)["web-02"]; ok {
		t.Errorf("the failed plan started the migration of web-02")
	}
	if st, err := e.host.PowerState(snapID); err != nil || st != esxisim.PoweredOn {
		t.Errorf("snap-01 is %v (%v) after the failed plan, want still powered on", st, err)
	}

	// Pull request 2, fixed by dropping snap-01.
	pr("web-01", "web-02")
	writeTFVars(t, w, vars)
	res = tf(t, w, 2, "plan", "-detailed-exitcode", "-input=false", "-out=plan.tfplan")
	if !strings.Contains(res.Stdout, "Plan: 1 to add, 0 to change, 0 to destroy.") {
		t.Fatalf("the fixed pull request should add web-02 only:\n%s", res.Stdout)
	}
	tf(t, w, 0, "apply", "-input=false", "plan.tfplan")
	tf(t, w, 0, "plan", "-detailed-exitcode", "-input=false")
	e.completed(t, e.records(t), map[string]*esxisim.VMFiles{"web-01": web1, "web-02": web2})
}
