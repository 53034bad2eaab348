package engine_test

import (
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func TestFullPathBIOS(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: "web01", GuestOS: "rhel9-64", CPUs: 2, MemoryMiB: 2048,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Thin: true}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:01:02:03"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.1.2.3"},
	})
	spec := e.spec("web01", "web01")
	en := e.engine()
	rec := e.mustComplete(en, spec)

	// Evidence.
	if rec.Identity.VMID == 0 || rec.Identity.VMXPath != files.VMXPath || rec.Identity.VMName != "web01" {
		t.Errorf("identity = %+v", rec.Identity)
	}
	for _, c := range []string{record.CondSourceDiscovered, record.CondValidated, record.CondSourcePoweredOff, record.CondDiskAcquired,
		record.CondDiskConverted, record.CondDiskImported, record.CondVMCreated, record.CondVMStarted, record.CondGuestReady, record.CondReady} {
		if !condTrue(rec, c) {
			t.Errorf("condition %s is not True: %+v", c, rec.Conditions)
		}
	}
	ts := rec.Timestamps
	for name, p := range map[string]*time.Time{"created": ts.Created, "discovered": ts.Discovered, "validated": ts.Validated,
		"sourcePoweredOff": ts.SourcePoweredOff, "converted": ts.Converted, "imported": ts.Imported, "vmCreated": ts.VMCreated,
		"vmStarted": ts.VMStarted, "completed": ts.Completed} {
		if p == nil {
			t.Errorf("timestamp %s not set", name)
		}
	}
	if rec.PowerOff == nil || rec.PowerOff.Action != record.PowerActionGraceful || !rec.PowerOff.Done || rec.PowerOff.Policy != "graceful" {
		t.Errorf("powerOff = %+v", rec.PowerOff)
	}
	want := files.Disks[0].SHA256()
	if len(rec.Disks) != 1 {
		t.Fatalf("disks = %+v", rec.Disks)
	}
	d := rec.Disks[0]
	if d.SourceSHA256 != want || d.ArtifactSHA256 != want || d.ArtifactFormat != "raw" {
		t.Errorf("disk evidence = %+v, want sha %s", d, want)
	}
	if d.DataVolume != "web01-disk-0" || d.DataVolumeUID == "" || !d.Imported || d.DataVolumePhase != "Succeeded" {
		t.Errorf("disk DataVolume evidence = %+v", d)
	}
	got, ok := e.sim.ReceivedSHA256(e.ns, "web01-disk-0")
	if !ok || got != want {
		t.Errorf("destination received sha %q (%v), want %q", got, ok, want)
	}
	if rec.VM == nil || rec.VM.UID == "" || rec.VM.RunStrategy != "Always" {
		t.Errorf("vm evidence = %+v", rec.VM)
	}
	if len(rec.Validation) != 3 {
		t.Errorf("validation = %+v", rec.Validation)
	}

	// Exactly one DataVolume and one VM, ours.
	dvs := e.dataVolumes()
	if len(dvs) != 1 || dvs[0].Labels[kube.LabelMigration] != "web01" || dvs[0].Labels["team"] != "infra" {
		t.Errorf("DataVolumes = %d %+v", len(dvs), dvs)
	}
	vms := e.vms()
	if len(vms) != 1 {
		t.Fatalf("VirtualMachines = %d", len(vms))
	}
	vm := vms[0]
	if string(vm.UID) != rec.VM.UID {
		t.Errorf("VM UID %s, recorded %s", vm.UID, rec.VM.UID)
	}
	dom := vm.Spec.Template.Spec.Domain
	if dom.Firmware == nil || dom.Firmware.Bootloader == nil || dom.Firmware.Bootloader.BIOS == nil || dom.Firmware.Bootloader.EFI != nil {
		t.Errorf("firmware = %+v", dom.Firmware)
	}
	// Two vCPUs without cpuid.coresPerSocket: VMware's two sockets.
	if dom.CPU == nil || dom.CPU.Sockets != 2 || dom.CPU.Cores != 1 || dom.CPU.Threads != 1 || dom.Memory == nil || dom.Memory.Guest.Value() != 2048<<20 {
		t.Errorf("cpu/memory = %+v %+v", dom.CPU, dom.Memory)
	}
	if dom.Machine == nil || dom.Machine.Type != "q35" || dom.Clock == nil || dom.Clock.UTC == nil || dom.Features != nil || dom.Devices.TPM != nil {
		t.Errorf("machine %+v clock %+v features %+v tpm %+v: want q35, a UTC clock, no Hyper-V and no TPM for a Linux guest", dom.Machine, dom.Clock, dom.Features, dom.Devices.TPM)
	}
	// Not converted: the devices an unconverted guest can usually drive.
	if len(dom.Devices.Disks) != 1 || dom.Devices.Disks[0].Disk == nil || dom.Devices.Disks[0].Disk.Bus != "sata" ||
		dom.Devices.Disks[0].BootOrder == nil || *dom.Devices.Disks[0].BootOrder != 1 {
		t.Errorf("disks = %+v", dom.Devices.Disks)
	}
	if len(dom.Devices.Interfaces) != 1 || dom.Devices.Interfaces[0].MacAddress != "00:50:56:01:02:03" ||
		dom.Devices.Interfaces[0].Masquerade == nil || dom.Devices.Interfaces[0].Model != "e1000e" {
		t.Errorf("interfaces = %+v", dom.Devices.Interfaces)
	}
	nets := vm.Spec.Template.Spec.Networks
	if len(nets) != 1 || nets[0].Pod == nil {
		t.Errorf("networks = %+v", nets)
	}
	vols := vm.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].DataVolume == nil || vols[0].DataVolume.Name != "web01-disk-0" {
		t.Errorf("volumes = %+v", vols)
	}
	if rs := vm.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyAlways {
		t.Errorf("runStrategy = %v", rs)
	}

	// The source was shut down exactly once, and never powered off hard.
	if n := len(e.commands("power.shutdown")); n != 1 {
		t.Errorf("power.shutdown sent %d times, want 1", n)
	}
	if n := len(e.commands("power.off")); n != 0 {
		t.Errorf("power.off sent %d times, want 0", n)
	}
	if st, _ := e.host.PowerState(rec.Identity.VMID); st != esxisim.PoweredOff {
		t.Errorf("source is %v", st)
	}

	// Staging files are gone, and so is the lease.
	if _, err := os.Stat(spec.WorkDir + "/" + e.ns); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(spec.WorkDir)
		t.Errorf("staging folder left behind: %v %v", err, entries)
	}
	var l coordinationv1.Lease
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "vmmigration-web01"}, &l); !kube.IsNotFound(err) {
		t.Errorf("lease still there: %v %+v", err, l.Spec)
	}

	// The record is stored and loads back.
	loaded, err := en.Load(t.Context(), e.ns, "web01")
	if err != nil || loaded.Phase != record.PhaseCompleted || loaded.Disks[0].SourceSHA256 != want {
		t.Errorf("Load = %+v, %v", loaded.Phase, err)
	}
	var cm corev1.ConfigMap
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "vmmigration-web01"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[kube.LabelMigration] != "web01" || cm.Labels[kube.LabelManagedBy] != kube.ManagedByValue || !strings.Contains(cm.Data[coord.RecordKey], `"phase":"Completed"`) {
		t.Errorf("record ConfigMap = %+v", cm)
	}
	var evs corev1.EventList
	if err := e.admin.List(t.Context(), &evs, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == "vmmigration-web01" {
			reasons[ev.Reason] = true
		}
	}
	if !reasons["Completed"] || !reasons["PhaseImporting"] {
		t.Errorf("events = %v", reasons)
	}
	if len(e.eventsOf(engine.EventPhase)) < 9 || len(e.eventsOf(engine.EventProgress)) == 0 {
		t.Errorf("progress events: %d phase, %d progress", len(e.eventsOf(engine.EventPhase)), len(e.eventsOf(engine.EventProgress)))
	}

	// Running again is a no-op: nothing is sent to the host, nothing changes.
	before := len(e.host.CommandLog())
	again, err := e.engine().Run(e.ctx(30*time.Second), spec)
	if err != nil || again.Phase != record.PhaseCompleted {
		t.Fatalf("second Run = %s, %v", again.Phase, err)
	}
	if n := len(e.host.CommandLog()) - before; n != 0 {
		t.Errorf("second Run sent %d commands to the host", n)
	}
	if vms := e.vms(); len(vms) != 1 || vms[0].UID != vm.UID {
		t.Errorf("VM changed on the second Run")
	}
}

func TestFullPathEFISecureBootTwoDisks(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: "db01", GuestOS: "windows2019srv-64", Firmware: "efi", SecureBoot: true, CPUs: 4, MemoryMiB: 4096,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 6 << 20}, {CapacityBytes: 3<<20 + 512*3, Controller: "sata0:1", Thin: true}},
		NICs: []esxisim.NICSpec{
			{Network: "VM Network", MAC: "00:50:56:0A:0B:0C"},
			{Network: "Storage", MAC: "00:50:56:0a:0b:0d", Adapter: "e1000e"},
		},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsNotRunning,
	})
	spec := e.spec("db01", "db01")
	spec.PowerOffPolicy = "hard"
	spec.DiskBus = "sata"
	spec.Validation = engine.Validation{GuestAgent: true, Timeout: 10 * time.Second}
	rec := e.mustComplete(e.engine(), spec)

	if rec.PowerOff == nil || rec.PowerOff.Action != record.PowerActionHard {
		t.Errorf("powerOff = %+v", rec.PowerOff)
	}
	if n := len(e.commands("power.off")); n != 1 {
		t.Errorf("power.off sent %d times, want 1", n)
	}
	if n := len(e.commands("power.shutdown")); n != 0 {
		t.Errorf("power.shutdown sent %d times, want 0", n)
	}
	if len(rec.Disks) != 2 {
		t.Fatalf("disks = %+v", rec.Disks)
	}
	for i, d := range rec.Disks {
		want := files.Disks[i].SHA256()
		got, _ := e.sim.ReceivedSHA256(e.ns, d.DataVolume)
		if d.SourceSHA256 != want || got != want {
			t.Errorf("disk %d: source sha %s, received %s, want %s", i, d.SourceSHA256, got, want)
		}
	}
	if dvs := e.dataVolumes(); len(dvs) != 2 {
		t.Errorf("%d DataVolumes, want 2", len(dvs))
	}
	vms := e.vms()
	if len(vms) != 1 {
		t.Fatalf("%d VMs", len(vms))
	}
	tmpl := vms[0].Spec.Template.Spec
	dom := tmpl.Domain
	efi := dom.Firmware.Bootloader.EFI
	if efi == nil || efi.SecureBoot == nil || !*efi.SecureBoot || dom.Firmware.Bootloader.BIOS != nil {
		t.Errorf("firmware = %+v", dom.Firmware.Bootloader)
	}
	if dom.Features == nil || dom.Features.SMM == nil || dom.Features.SMM.Enabled == nil || !*dom.Features.SMM.Enabled {
		t.Errorf("SMM not enabled: %+v", dom.Features)
	}
	if len(dom.Devices.Disks) != 2 {
		t.Fatalf("disks = %+v", dom.Devices.Disks)
	}
	for i, d := range dom.Devices.Disks {
		if d.Disk == nil || d.Disk.Bus != "sata" {
			t.Errorf("disk %d bus = %+v", i, d.Disk)
		}
		if (i == 0) != (d.BootOrder != nil && *d.BootOrder == 1) || (i > 0 && d.BootOrder != nil) {
			t.Errorf("disk %d bootOrder = %v", i, d.BootOrder)
		}
		if tmpl.Volumes[i].DataVolume.Name != rec.Disks[i].DataVolume {
			t.Errorf("volume %d = %+v", i, tmpl.Volumes[i])
		}
	}
	ifs := dom.Devices.Interfaces
	if len(ifs) != 2 || ifs[0].MacAddress != "00:50:56:0a:0b:0c" || ifs[0].Masquerade == nil ||
		ifs[1].MacAddress != "00:50:56:0a:0b:0d" || ifs[1].Bridge == nil || ifs[1].Model != "e1000e" {
		t.Errorf("interfaces = %+v", ifs)
	}
	if n := tmpl.Networks; len(n) != 2 || n[0].Pod == nil || n[1].Multus == nil || n[1].Multus.NetworkName != "default/storage-net" {
		t.Errorf("networks = %+v", n)
	}
}
