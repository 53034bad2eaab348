package engine_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// For the same host and cluster state, the plan's preview and the
// Validated checkpoint reach the same verdict, check by check: the same
// checks, severities, outcomes and messages, and a blocker stops apply at
// Validated before anything is touched. Every check fails in some case.
// The host also carries a vCLS system VM and an invalid VM, which never
// block anything.
func TestPlanAndApplyVerdictsAgree(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, esxisim.VMSpec{System: true, Name: "vCLS-1", Power: esxisim.PoweredOn})
	e.host.AddVM(t, esxisim.VMSpec{Invalid: true, Datastore: "datastore1", Name: "gone-vm"})
	quotaNS := e.ns
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: quotaNS, Name: "small"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceName("tight.storageclass.storage.k8s.io/requests.storage"): resource.MustParse("1Mi")}},
	}
	if err := e.admin.Create(t.Context(), quota); err != nil {
		t.Fatal(err)
	}
	e.foreign("taken", nil, []kubesim.ForeignDisk{{Name: "taken-disk-0", SizeBytes: 4 << 20}}, nil)

	type tc struct {
		name  string
		vm    esxisim.VMSpec
		edit  func(*engine.Spec)
		fails []string // checks that must fail
		// setup changes the host before the case and returns its undo.
		setup func() func()
		deps  func(*engine.Deps)
	}
	// convert asks for the guest conversion (the other cases migrate test
	// data, not an OS, without conversion: their plans warn about drivers).
	convert := func(s *engine.Spec) { s.Conversion = engine.ConversionVirtV2V }
	base := func(name string) esxisim.VMSpec { return smallVM(name, esxisim.PoweredOn) }
	cases := []tc{
		{name: "all pass", vm: base("ok-vm")},
		{name: "guest os", vm: func() esxisim.VMSpec { v := base("mac-vm"); v.GuestOS = "darwin19-64"; return v }(), fails: []string{preflight.CheckGuestOS}},
		{name: "secure boot warns", vm: func() esxisim.VMSpec { v := base("sb-vm"); v.Firmware, v.SecureBoot = "efi", true; return v }(), fails: []string{preflight.CheckFirmware}},
		{name: "snapshots", vm: func() esxisim.VMSpec { v := base("snap-vm"); v.Snapshots = true; return v }(), fails: []string{preflight.CheckSnapshots}},
		{name: "unmapped nic", vm: func() esxisim.VMSpec {
			v := base("nic-vm")
			v.NICs = append(v.NICs, esxisim.NICSpec{Network: "Nowhere"})
			return v
		}(), fails: []string{preflight.CheckNICsMapped}},
		{name: "bad name", vm: base("name-vm"), edit: func(s *engine.Spec) { s.Name = "a-name-so-long-that-its-data-volume-names-exceed-63-chars" },
			fails: []string{preflight.CheckDestinationName}},
		{name: "name taken", vm: base("taken-vm"), edit: func(s *engine.Spec) { s.Name = "taken" }, fails: []string{preflight.CheckDestinationFree}},
		{name: "no storage class", vm: base("sc-vm"), edit: func(s *engine.Spec) { s.StorageClass = "nope" },
			fails: []string{preflight.CheckStorageClass}},
		{name: "quota", vm: base("quota-vm"), edit: func(s *engine.Spec) { s.StorageClass = "tight" },
			fails: []string{preflight.CheckStorageClass, preflight.CheckQuota}},
		{name: "tools off, hard", vm: func() esxisim.VMSpec { v := base("notools-vm"); v.Tools = esxisim.ToolsNotRunning; return v }(),
			edit: func(s *engine.Spec) { s.PowerOffPolicy = engine.PolicyHard }, fails: []string{preflight.CheckTools, preflight.CheckPowerPolicy}},
		{name: "manual policy", vm: base("manual-vm"), edit: func(s *engine.Spec) { s.PowerOffPolicy = engine.PolicyManual },
			fails: []string{preflight.CheckPowerPolicy}},
		// A vmInventory.xml that cannot be read as a whole makes every VM's
		// data uncertain: that blocks, at plan and at apply alike.
		{name: "inventory uncertain", vm: base("uncertain-vm"), fails: []string{preflight.CheckInventory},
			setup: func() func() {
				e.host.SetInventoryXML("<ConfigRoot>\n  <ConfigEntry id=\"0000\">")
				return e.host.ClearInventoryXML
			}},
		// Guest conversion: judged from the .vmx and this machine before
		// anything is powered off.
		{name: "unconvertible guest", vm: func() esxisim.VMSpec { v := base("bsd-vm"); v.GuestOS = "freebsd13-64"; return v }(),
			edit: convert, fails: []string{engine.CheckGuestConvertible}},
		{name: "windows without virtio-win", vm: func() esxisim.VMSpec { v := base("win-vm"); v.GuestOS = "windows2019srvNext-64"; return v }(),
			edit: convert, fails: []string{engine.CheckGuestConvertible},
			deps: func(d *engine.Deps) { d.VirtioWin = filepath.Join(t.TempDir(), "virtio-win.iso") }},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.host.AddVM(t, c.vm)
			if c.setup != nil {
				defer c.setup()()
			}
			spec := e.spec(c.vm.Name, c.vm.Name)
			if c.edit != nil {
				c.edit(&spec)
			}
			var mods []func(*engine.Deps)
			if c.deps != nil {
				mods = append(mods, c.deps)
			}
			en := e.engine(mods...)
			if spec.Conversion == engine.ConversionNone {
				c.fails = append(c.fails, engine.CheckGuestDrivers)
			}
			plan, err := en.Preview(e.ctx(20*time.Second), spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge, ResumeFromRecord: true})
			if err != nil {
				t.Fatalf("Preview: %v", err)
			}
			var failed []string
			for _, ch := range plan.Checks.Checks {
				if !ch.Passed {
					failed = append(failed, ch.ID)
					covered[ch.ID] = true
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(c.fails) {
				t.Fatalf("plan failed checks %v, want %v", failed, c.fails)
			}
			rec, runErr := en.Run(e.ctx(60*time.Second), spec)
			if len(rec.Preflight) != len(plan.Checks.Checks) {
				t.Fatalf("apply ran %d checks, plan %d (run error: %v)", len(rec.Preflight), len(plan.Checks.Checks), runErr)
			}
			for i, want := range plan.Checks.Checks {
				got := rec.Preflight[i]
				if got.ID != want.ID || got.Severity != string(want.Severity) || got.Passed != want.Passed || got.Message != want.Message {
					t.Errorf("check %d: apply %+v, plan %+v", i, got, want)
				}
			}
			if len(plan.Blockers()) > 0 {
				var se *engine.StopError
				if !errors.As(runErr, &se) || se.Phase != record.PhaseValidated || se.Reason != "PreflightFailed" {
					t.Fatalf("apply = %v, want a stop at Validated for the plan's blockers", runErr)
				}
				if rec.PowerOff != nil {
					t.Errorf("a blocked migration decided a power-off: %+v", rec.PowerOff)
				}
				return
			}
			if runErr != nil || rec.Phase != record.PhaseCompleted {
				t.Fatalf("apply = %v in %s; the plan found no blocker", runErr, rec.Phase)
			}
		})
	}
	for _, id := range []string{preflight.CheckGuestOS, preflight.CheckFirmware, preflight.CheckSnapshots, preflight.CheckNICsMapped,
		preflight.CheckDestinationName, preflight.CheckDestinationFree, preflight.CheckStorageClass, preflight.CheckQuota,
		preflight.CheckTools, preflight.CheckPowerPolicy, preflight.CheckInventory, engine.CheckGuestConvertible, engine.CheckGuestDrivers} {
		if !covered[id] {
			t.Errorf("no case fails check %s", id)
		}
	}
}
