package engine

import (
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// renderFor renders the VM of a migration of src with spec's devices.
func renderFor(t *testing.T, spec Spec, src record.SourceInventory, conv *record.ConversionEvidence) *kubevirtv1.VirtualMachine {
	t.Helper()
	spec = spec.WithDefaults()
	r := &run{e: &Engine{}, spec: spec, s: &coord.Stored{}}
	r.s.Record.Source = &src
	r.s.Record.Conversion = conv
	r.s.Record.Disks = []record.DiskEvidence{{Index: 0, DataVolume: "vm-disk-0"}, {Index: 1, DataVolume: "vm-disk-1"}}
	vm, err := r.renderVM()
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// A Windows guest gets the Hyper-V enlightenments, a clock in local time,
// its TPM, EFI with Secure Boot (and the SMM it needs) and the CPU layout
// of its .vmx, on q35, with virtio devices once converted.
func TestRenderWindowsGuest(t *testing.T) {
	src := record.SourceInventory{Name: "win", GuestOS: "windows2019srvNext-64", Firmware: "efi", SecureBoot: true, VTPM: true,
		CPUs: 4, CoresPerSocket: 2, MemoryMiB: 4096, NICs: []record.SourceNIC{{Device: "ethernet0", Network: "VM Network", MAC: "00:50:56:AA:BB:CC", Adapter: "vmxnet3"}}}
	spec := Spec{Name: "win", Namespace: "ns", NetworkMap: map[string]string{"VM Network": "pod"}, Timezone: "Europe/Berlin"}
	dom := renderFor(t, spec, src, nil).Spec.Template.Spec.Domain
	hv := dom.Features.Hyperv
	if hv == nil || hv.Relaxed == nil || hv.VAPIC == nil || hv.VPIndex == nil || hv.SyNIC == nil || hv.SyNICTimer == nil ||
		hv.Reset == nil || hv.Frequencies == nil || hv.Spinlocks == nil || *hv.Spinlocks.Retries != hypervSpinlockRetries {
		t.Errorf("Hyper-V features %+v", hv)
	}
	if dom.Clock == nil || dom.Clock.Timezone == nil || *dom.Clock.Timezone != "Europe/Berlin" || dom.Clock.UTC != nil ||
		dom.Clock.Timer == nil || dom.Clock.Timer.Hyperv == nil {
		t.Errorf("clock %+v: want local time in Europe/Berlin with the Hyper-V timer", dom.Clock)
	}
	if dom.Devices.TPM == nil {
		t.Error("vtpm.present gave no TPM")
	}
	if dom.Firmware == nil || dom.Firmware.Bootloader.EFI == nil || !*dom.Firmware.Bootloader.EFI.SecureBoot ||
		dom.Features.SMM == nil || !*dom.Features.SMM.Enabled {
		t.Errorf("firmware %+v SMM %+v: want EFI with Secure Boot and SMM", dom.Firmware, dom.Features.SMM)
	}
	if dom.CPU.Sockets != 2 || dom.CPU.Cores != 2 || dom.CPU.Threads != 1 || dom.Machine.Type != "q35" {
		t.Errorf("cpu %+v machine %+v: want 2 sockets of 2 cores on q35", dom.CPU, dom.Machine)
	}
	if len(dom.Devices.Disks) != 2 || dom.Devices.Disks[1].Disk.Bus != "virtio" || dom.Devices.Interfaces[0].Model != "virtio" {
		t.Errorf("devices %+v %+v: want virtio after conversion", dom.Devices.Disks, dom.Devices.Interfaces)
	}
	// What virt-v2v inspected wins over the .vmx: a guest the .vmx calls
	// "other" that is Windows is rendered as Windows, and the reverse.
	src.GuestOS = "other-64"
	if vm := renderFor(t, spec, src, &record.ConversionEvidence{OS: record.GuestOS{Type: "windows"}}); vm.Spec.Template.Spec.Domain.Features.Hyperv == nil {
		t.Error("an inspected Windows guest got no Hyper-V features")
	}
	src.GuestOS = "windows9-64"
	if vm := renderFor(t, spec, src, &record.ConversionEvidence{OS: record.GuestOS{Type: "linux"}}); vm.Spec.Template.Spec.Domain.Clock.UTC == nil {
		t.Error("an inspected Linux guest got a local-time clock")
	}
}

// Without conversion a guest gets sata and e1000e unless the spec says
// otherwise; a Linux guest's clock is UTC; no coresPerSocket means one
// core per socket, as on VMware.
func TestRenderUnconvertedGuest(t *testing.T) {
	src := record.SourceInventory{Name: "l", GuestOS: "debian12-64", Firmware: "bios", CPUs: 3, MemoryMiB: 1024,
		NICs: []record.SourceNIC{{Device: "ethernet0", Network: "n", MAC: "00:50:56:00:00:01", Adapter: "e1000"}}}
	spec := Spec{Name: "l", Namespace: "ns", NetworkMap: map[string]string{"n": "pod"}, Conversion: ConversionNone}
	dom := renderFor(t, spec, src, nil).Spec.Template.Spec.Domain
	if dom.Devices.Disks[0].Disk.Bus != "sata" || dom.Devices.Interfaces[0].Model != "e1000e" {
		t.Errorf("devices %+v %+v: want sata and e1000e", dom.Devices.Disks[0].Disk, dom.Devices.Interfaces[0])
	}
	if dom.CPU.Sockets != 3 || dom.CPU.Cores != 1 || dom.Clock.UTC == nil || dom.Features != nil || dom.Devices.TPM != nil {
		t.Errorf("cpu %+v clock %+v features %+v tpm %+v", dom.CPU, dom.Clock, dom.Features, dom.Devices.TPM)
	}
	spec.DiskBus, spec.NICModel = "virtio", "virtio"
	dom = renderFor(t, spec, src, nil).Spec.Template.Spec.Domain
	if dom.Devices.Disks[0].Disk.Bus != "virtio" || dom.Devices.Interfaces[0].Model != "virtio" {
		t.Errorf("the user's devices were not kept: %+v %+v", dom.Devices.Disks[0].Disk, dom.Devices.Interfaces[0])
	}
}

// Spec defaults follow the conversion, and a time zone must be one.
func TestSpecConversionDefaults(t *testing.T) {
	for conv, want := range map[string][2]string{"": {"virtio", "virtio"}, ConversionVirtV2V: {"virtio", "virtio"}, ConversionNone: {"sata", "e1000e"}} {
		s := Spec{Conversion: conv}.WithDefaults()
		if s.DiskBus != want[0] || s.NICModel != want[1] {
			t.Errorf("conversion %q: %s/%s, want %s/%s", conv, s.DiskBus, s.NICModel, want[0], want[1])
		}
	}
	s := Spec{Host: "h", VMName: "v", Namespace: "ns", Name: "n", StorageClass: "sc", WorkDir: "/w",
		Transport: Transport{Kind: TransportCDIUpload, UploadProxyURL: "https://u"}, Timezone: "Mars/Olympus"}.WithDefaults()
	if err := s.Validate(); FieldOf(err) != FieldTimezone {
		t.Errorf("an unknown time zone: %v (field %q)", err, FieldOf(err))
	}
	s.Timezone, s.Conversion = "America/New_York", "magic"
	if err := s.Validate(); FieldOf(err) != FieldConversion {
		t.Errorf("an unknown conversion: %v (field %q)", err, FieldOf(err))
	}
}
