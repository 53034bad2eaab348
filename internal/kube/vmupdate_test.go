package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// The provider's writes to a VirtualMachine keep what KubeVirt's admission
// set at creation (the firmware UUID and serial), and remove what an
// earlier apply of theirs set and the next one leaves out.
func TestApplyKeepsAdmissionFirmware(t *testing.T) {
	c := cluster.Get(t)
	admin := c.AdminClient()
	ns := "apply-firmware"
	if err := admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	s, err := kubesim.Start(t.Context(), kubesim.Options{Cluster: c, Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	kc := NewForRESTConfig(c.RESTConfig())
	render := func(efi bool, bus kubevirtv1.DiskBus) *kubevirtv1.VirtualMachine {
		fw := &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{BIOS: &kubevirtv1.BIOS{}}}
		if efi {
			fw = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: ptr.To(false)}}}
		}
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm", Labels: map[string]string{"mine": "yes"}},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{Firmware: fw, Devices: kubevirtv1.Devices{
						Disks: []kubevirtv1.Disk{{Name: "d", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}}}},
					}},
					Volumes: []kubevirtv1.Volume{{Name: "d", VolumeSource: kubevirtv1.VolumeSource{
						PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "d"}},
					}}},
				}}},
		}
	}
	vm := render(false, "sata")
	if err := kc.ApplyVirtualMachine(t.Context(), vm, false); err != nil {
		t.Fatal(err)
	}
	fw, ok := s.AdmittedFirmware(ns, "vm")
	if !ok || fw.UUID == "" || fw.Serial == "" {
		t.Fatalf("admission gave no firmware identity: %+v %v", fw, ok)
	}
	check := func(when string, wantEFI bool, wantBus kubevirtv1.DiskBus) {
		t.Helper()
		got, err := kc.GetVirtualMachine(t.Context(), ns, "vm")
		if err != nil {
			t.Fatal(err)
		}
		f := got.Spec.Template.Spec.Domain.Firmware
		if f == nil || string(f.UUID) != fw.UUID || f.Serial != fw.Serial {
			t.Errorf("%s: firmware %+v, want UUID %s and serial %s", when, f, fw.UUID, fw.Serial)
			return
		}
		if bl := f.Bootloader; bl == nil || (bl.EFI != nil) != wantEFI || (bl.BIOS != nil) == wantEFI {
			t.Errorf("%s: bootloader %+v, want EFI %v only", when, bl, wantEFI)
		}
		if bus := got.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus; bus != wantBus {
			t.Errorf("%s: disk bus %s, want %s", when, bus, wantBus)
		}
	}
	check("after the apply that created it", false, "sata")

	// The run strategy and labels patch changes those fields only.
	if err := kc.UpdateVirtualMachineRunStrategyAndLabels(t.Context(), ns, "vm", "Always", nil, map[string]string{"team": "b"}); err != nil {
		t.Fatal(err)
	}
	check("after the run strategy and labels patch", false, "sata")
	got, _ := kc.GetVirtualMachine(t.Context(), ns, "vm")
	if got.Labels["team"] != "b" || got.Labels["mine"] != "yes" || *got.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("after the patch: labels %v run strategy %v", got.Labels, *got.Spec.RunStrategy)
	}
	if err := kc.UpdateVirtualMachineRunStrategyAndLabels(t.Context(), ns, "vm", "", map[string]string{"team": "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := kc.GetVirtualMachine(t.Context(), ns, "vm"); got.Labels["team"] != "" || got.Labels["mine"] != "yes" {
		t.Errorf("after removing team: labels %v", got.Labels)
	}

	// The render changes its bootloader: the one the earlier apply set goes.
	if err := kc.ApplyVirtualMachine(t.Context(), render(true, "virtio"), true); err != nil {
		t.Fatal(err)
	}
	check("after an apply with another bootloader", true, "virtio")
}
