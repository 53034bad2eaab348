package engine_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// The firmware UUID and serial KubeVirt's admission gives the VM at
// creation are the guest's SMBIOS identity: the migration never drops
// them, neither when it creates the VM nor when a later run finds the VM
// and makes the fields it owns match again.
func TestFirmwareIdentitySurvivesEveryRun(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("id1", esxisim.PoweredOff))
	spec := e.spec("id1", "id1")
	e.mustComplete(e.engine(), spec)

	admitted, ok := e.sim.AdmittedFirmware(e.ns, "id1")
	if !ok || admitted.UUID == "" || admitted.Serial == "" {
		t.Fatalf("admission gave the VM no firmware identity: %+v %v", admitted, ok)
	}
	check := func(when string) *kubevirtv1.VirtualMachine {
		t.Helper()
		vm := &kubevirtv1.VirtualMachine{}
		if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "id1"}, vm); err != nil {
			t.Fatal(err)
		}
		fw := vm.Spec.Template.Spec.Domain.Firmware
		if fw == nil || string(fw.UUID) != admitted.UUID || fw.Serial != admitted.Serial {
			t.Errorf("%s: firmware %+v, want UUID %s and serial %s from admission (legacy UUID %s)", when, fw, admitted.UUID, admitted.Serial, kubesim.CalculateLegacyUUID("id1"))
		}
		if fw != nil && (fw.Bootloader == nil || fw.Bootloader.BIOS == nil) {
			t.Errorf("%s: bootloader %+v, want BIOS", when, fw.Bootloader)
		}
		return vm
	}
	check("after the migration")
	for _, ev := range e.eventsOf(engine.EventInfo) {
		if strings.Contains(ev.Message, "updated VirtualMachine") {
			t.Errorf("the run changed the VM it had just created: %s", ev.Message)
		}
	}

	// Someone changes a field the migration owns and adds one of theirs;
	// a run that goes through CreatingVM again restores the first, keeps
	// the second, and keeps the identity.
	// The simulated controllers write the VM too (its status), so the
	// edit is made on the latest version, as kubectl edit would retry.
	wantBus := check("before the edit").Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vm := &kubevirtv1.VirtualMachine{}
		if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "id1"}, vm); err != nil {
			return err
		}
		vm.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus = "scsi"
		if wantBus == "scsi" {
			vm.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus = "sata"
		}
		vm.Labels["someone"] = "else"
		return e.admin.Update(t.Context(), vm)
	})
	if err != nil {
		t.Fatal(err)
	}
	e.editRecord("id1", func(r *record.Record) { r.Phase = record.PhaseCreatingVM })
	e.mustComplete(e.engine(), spec)
	vm := check("after a second run through CreatingVM")
	if bus := vm.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus; bus != wantBus {
		t.Errorf("disk bus %s, want %s again", bus, wantBus)
	}
	if vm.Labels["someone"] != "else" {
		t.Errorf("labels %v: someone else's label was removed", vm.Labels)
	}
}
