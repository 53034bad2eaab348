package acctest

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestVMFromKube(t *testing.T) {
	on, off := true, false
	boot := uint(1)
	halted := kubevirtv1.RunStrategyHalted
	full := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "web", UID: types.UID("u-1"), Generation: 3,
			Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{
					Firmware: &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: &on}}},
					Features: &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{}},
					Devices: kubevirtv1.Devices{
						Disks: []kubevirtv1.Disk{
							{Name: "d0", BootOrder: &boot, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}},
							{Name: "cd", DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{}}},
						},
						Interfaces: []kubevirtv1.Interface{{Name: "n0", MacAddress: "00:50:56:00:00:01"}},
					},
				},
				Networks: []kubevirtv1.Network{
					{Name: "n0", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}},
					{Name: "n1", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: "ns/backup"}}},
				},
				Volumes: []kubevirtv1.Volume{
					{Name: "d0", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "web-disk-0"}}},
					{Name: "cd", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}},
				},
			},
		}},
	}
	want := VM{Name: "web", UID: "u-1", Generation: 3, RunStrategy: "Halted",
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		EFISecureBoot: true, SMM: true,
		Disks:       []VMDisk{{Name: "d0", Bus: "virtio", BootOrder: 1}, {Name: "cd"}},
		Interfaces:  []VMInterface{{Name: "n0", MAC: "00:50:56:00:00:01"}},
		Networks:    []VMNetwork{{Name: "n0", Pod: true}, {Name: "n1", Multus: "ns/backup"}},
		DataVolumes: []string{"web-disk-0"},
	}
	if got := vmFromKube(full); !reflect.DeepEqual(got, want) {
		t.Errorf("vmFromKube:\n got %+v\nwant %+v", got, want)
	}

	// EFI without secure boot, no SMM, no run strategy, no template.
	efi := full.DeepCopy()
	efi.Spec.Template.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot = &off
	efi.Spec.Template.Spec.Domain.Features = nil
	if got := vmFromKube(efi); got.EFISecureBoot || got.SMM {
		t.Errorf("EFI without secure boot and no features: EFISecureBoot %v, SMM %v; want false, false", got.EFISecureBoot, got.SMM)
	}
	bare := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if got := vmFromKube(bare); !reflect.DeepEqual(got, VM{Name: "bare"}) {
		t.Errorf("a VM without template or run strategy: got %+v", got)
	}
}
