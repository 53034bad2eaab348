package engine

import (
	"context"
	"fmt"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// stepDiscover records the source's identity and inventory and the
// deterministic names of everything the migration will create.
func (r *run) stepDiscover(ctx context.Context) error {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return err
	}
	r.recordInventory(vm)
	now := r.now()
	rec := r.rec()
	stamp(&rec.Timestamps.Discovered, now)
	rec.SetCondition(now, record.CondSourceDiscovered, true, "Found",
		fmt.Sprintf("VM %q (vmid %d, %d disk(s), %d NIC(s)) on host %s", vm.Name, vm.VMID, len(vm.Disks), len(vm.NICs), r.spec.Host))
	return nil
}

// recordInventory writes the identity, the inventory snapshot and the
// per-disk plan. Disks already acquired keep their evidence.
func (r *run) recordInventory(vm *esxi.VM) {
	rec := r.rec()
	rec.Identity.VMID, rec.Identity.VMName, rec.Identity.VMXPath = vm.VMID, vm.Name, vm.VMXPath
	rec.Source = sourceInventoryOf(vm)
	rec.Disks = planDisks(r.spec, vm, rec.Disks)
}

// sourceInventoryOf is the inventory snapshot of a source VM.
func sourceInventoryOf(vm *esxi.VM) *record.SourceInventory {
	inv := &record.SourceInventory{
		VMID: vm.VMID, Name: vm.Name, VMXPath: vm.VMXPath, GuestOS: vm.GuestOS, HardwareVersion: vm.HardwareVersion,
		Firmware: string(vm.Firmware), SecureBoot: vm.SecureBoot, CPUs: vm.CPUs, CoresPerSocket: vm.CoresPerSocket,
		VTPM: vm.VTPM, MemoryMiB: vm.MemoryMiB,
		PowerState: string(vm.PowerState), ToolsRunning: vm.ToolsRunning,
	}
	for _, d := range vm.Disks {
		inv.Disks = append(inv.Disks, record.SourceDisk{Device: d.Device, Bus: d.Bus, DescriptorPath: d.DescriptorPath,
			DataPath: d.DataPath, CapacityBytes: d.CapacityBytes, Thin: d.Thin})
	}
	for _, n := range vm.NICs {
		inv.NICs = append(inv.NICs, record.SourceNIC{Device: n.Device, Network: n.NetworkName, MAC: n.MAC, Adapter: n.AdapterType})
	}
	return inv
}
