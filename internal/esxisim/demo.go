package esxisim

import "github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"

// DemoVMs are the VMs of the demo and of people trying the provider without
// a host: a BIOS Linux VM that is running with VMware Tools, an EFI +
// secure-boot Windows VM, a VM with two disks (the second in a subfolder),
// a VM running on a three-level snapshot chain (a vmfsSparse delta over a
// seSparse one over a thin base), migrated as its guest sees it, plus what a
// vCenter-managed host carries next to them: a vCLS system VM (never
// migrated) and an invalid VM whose files were deleted. Disks hold real
// content between long zero runs, like thin disks of real guests.
func DemoVMs() []VMSpec {
	const mib = 1 << 20
	return []VMSpec{
		{
			Datastore: "datastore1", Name: "linux-bios", GuestOS: "rhel9-64", HardwareVersion: 19, Firmware: "bios",
			CPUs: 2, MemoryMiB: 2048, Annotation: "Demo BIOS Linux VM\nowner: migration team",
			Disks: []DiskSpec{{CapacityBytes: 512 * mib, Thin: true, Content: []Extent{
				{Offset: 0, Length: 24 * mib, Seed: 1},
				{Offset: 300 * mib, Length: 16 * mib, Seed: 2},
			}}},
			NICs:  []NICSpec{{Network: "VM Network", MAC: "00:50:56:9a:10:01"}},
			Power: PoweredOn, Tools: ToolsRunning, IPs: []string{"192.0.2.21"},
		},
		{
			Datastore: "datastore1", Name: "win-efi-secureboot", GuestOS: "windows2019srv-64", HardwareVersion: 20,
			Firmware: "efi", SecureBoot: true, CPUs: 4, MemoryMiB: 8192,
			Disks: []DiskSpec{{CapacityBytes: 768 * mib, Content: []Extent{
				{Offset: 0, Length: 32 * mib, Seed: 3},
				{Offset: 600 * mib, Length: 8 * mib, Seed: 4},
			}}},
			NICs:  []NICSpec{{Network: "LAN", MAC: "00:50:56:9a:20:01", Adapter: "e1000e"}},
			Power: PoweredOff, Tools: ToolsNotRunning,
		},
		{
			Datastore: "datastore1", Name: "db-two-disks", GuestOS: "ubuntu-64", HardwareVersion: 19, CPUs: 2, MemoryMiB: 4096,
			Disks: []DiskSpec{
				{CapacityBytes: 256 * mib, Thin: true, Content: []Extent{{Offset: 0, Length: 16 * mib, Seed: 5}}},
				{CapacityBytes: 256 * mib, Controller: "scsi0:1", Subdir: "data", Content: []Extent{
					{Offset: 0, Length: 4 * mib, Seed: 42},
					{Offset: 128 * mib, Length: 1 * mib, Seed: 43},
				}},
			},
			NICs:  []NICSpec{{Network: "VM Network", MAC: "00:50:56:9a:30:01"}, {Network: "Backup", MAC: "00:50:56:9a:30:02"}},
			Power: PoweredOff,
		},
		{
			Datastore: "datastore1", Name: "with-snapshot", GuestOS: "debian12-64", HardwareVersion: 20, CPUs: 1, MemoryMiB: 1024,
			Disks:     []DiskSpec{demoChainDisk("with-snapshot", 64*mib)},
			Snapshots: true, Power: PoweredOff,
		},
		{
			System: true, Name: "vCLS-1", GuestOS: "other5xlinux-64", HardwareVersion: 19, Power: PoweredOn,
			Annotation: "vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services.",
		},
		{Invalid: true, Datastore: "datastore1", Name: "deleted-vm"},
	}
}

// demoChainDisk is a thin disk on the standard three-level snapshot chain.
func demoChainDisk(name string, capacity int64) DiskSpec {
	cs, err := SnapshotChainSpec("datastore1", name, name, capacity, vmdk.SESparse, vmdk.VMFSSparse, "")
	if err != nil {
		panic(err) // the demo's sizes are valid
	}
	return DiskSpec{CapacityBytes: capacity, Thin: true, Content: cs.Base, Deltas: cs.Deltas}
}
