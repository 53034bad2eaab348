package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// vmModel is one source VM as the data sources show it.
type vmModel struct {
	VMID            types.Int64     `tfsdk:"vmid"`
	Name            types.String    `tfsdk:"name"`
	VMXPath         types.String    `tfsdk:"vmx_path"`
	System          types.Bool      `tfsdk:"system"`
	Datastore       types.String    `tfsdk:"datastore"`
	GuestOS         types.String    `tfsdk:"guest_os"`
	HardwareVersion types.Int64     `tfsdk:"hardware_version"`
	PowerState      types.String    `tfsdk:"power_state"`
	Firmware        types.String    `tfsdk:"firmware"`
	SecureBoot      types.Bool      `tfsdk:"secure_boot"`
	CPUs            types.Int64     `tfsdk:"cpus"`
	MemoryMiB       types.Int64     `tfsdk:"memory_mib"`
	Annotation      types.String    `tfsdk:"annotation"`
	ToolsStatus     types.String    `tfsdk:"tools_status"`
	ToolsRunning    types.Bool      `tfsdk:"tools_running"`
	GuestIPs        []types.String  `tfsdk:"guest_ips"`
	Disks           []diskModel     `tfsdk:"disks"`
	NICs            []nicModel      `tfsdk:"nics"`
	Snapshots       []snapshotModel `tfsdk:"snapshots"`
	Problems        []types.String  `tfsdk:"problems"`
}

type diskModel struct {
	Device          types.String `tfsdk:"device"`
	Bus             types.String `tfsdk:"bus"`
	ControllerType  types.String `tfsdk:"controller_type"`
	DescriptorPath  types.String `tfsdk:"descriptor_path"`
	DataPath        types.String `tfsdk:"data_path"`
	CapacityBytes   types.Int64  `tfsdk:"capacity_bytes"`
	Thin            types.Bool   `tfsdk:"thin"`
	OnSnapshotDelta types.Bool   `tfsdk:"on_snapshot_delta"`
	Mode            types.String `tfsdk:"mode"`
	Independent     types.Bool   `tfsdk:"independent"`
	RDM             types.Bool   `tfsdk:"rdm"`
	// SnapshotChain is the chain the disk runs on, top first (empty
	// without snapshots).
	SnapshotChain  []chainLinkModel `tfsdk:"snapshot_chain"`
	ChainCopyBytes types.Int64      `tfsdk:"chain_copy_bytes"`
	ChainProblems  []types.String   `tfsdk:"chain_problems"`
}

type chainLinkModel struct {
	DescriptorPath types.String   `tfsdk:"descriptor_path"`
	Format         types.String   `tfsdk:"format"`
	CID            types.String   `tfsdk:"cid"`
	ParentCID      types.String   `tfsdk:"parent_cid"`
	ExtentPaths    []types.String `tfsdk:"extent_paths"`
	CapacityBytes  types.Int64    `tfsdk:"capacity_bytes"`
	ExtentBytes    types.Int64    `tfsdk:"extent_bytes"`
	AllocatedBytes types.Int64    `tfsdk:"allocated_bytes"`
	Thin           types.Bool     `tfsdk:"thin"`
}

type nicModel struct {
	Device      types.String   `tfsdk:"device"`
	NetworkName types.String   `tfsdk:"network_name"`
	MAC         types.String   `tfsdk:"mac_address"`
	AdapterType types.String   `tfsdk:"adapter_type"`
	IPs         []types.String `tfsdk:"ip_addresses"`
}

type snapshotModel struct {
	ID          types.Int64  `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Created     types.String `tfsdk:"created"`
	State       types.String `tfsdk:"state"`
	Parent      types.String `tfsdk:"parent"`
	Depth       types.Int64  `tfsdk:"depth"`
}

func vmAttributes() map[string]schema.Attribute {
	str := func(desc string) schema.Attribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	num := func(desc string) schema.Attribute {
		return schema.Int64Attribute{Computed: true, MarkdownDescription: desc}
	}
	boolean := func(desc string) schema.Attribute {
		return schema.BoolAttribute{Computed: true, MarkdownDescription: desc}
	}
	strs := func(desc string) schema.Attribute {
		return schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: desc}
	}
	return map[string]schema.Attribute{
		"vmid":             num("The host's Vmid of the VM (`vim-cmd vmsvc/getallvms`). Stable while the VM stays registered."),
		"name":             str("Display name. Two VMs on one host can share it."),
		"vmx_path":         str("Absolute path of the `.vmx` file under `/vmfs/volumes` (elsewhere for system VMs, e.g. `/var/run/crx/infra/` for vCLS)."),
		"system":           boolean("True for system VMs the host or vCenter manages, such as vCLS; they are never migrated. Their `.vmx` and disks are not read, so only the name, guest OS, hardware version, annotation and power state are filled."),
		"datastore":        str("Datastore holding the `.vmx`."),
		"guest_os":         str("Guest OS identifier from the `.vmx`, e.g. `ubuntu64Guest`."),
		"hardware_version": num("Virtual hardware version, e.g. `19`."),
		"power_state":      str("`poweredOn`, `poweredOff` or `suspended`."),
		"firmware":         str("`bios` or `efi`."),
		"secure_boot":      boolean("Whether EFI Secure Boot is on."),
		"cpus":             num("Number of virtual CPUs."),
		"memory_mib":       num("Memory in MiB."),
		"annotation":       str("The VM's notes."),
		"tools_status":     str("VMware Tools status: `toolsOk`, `toolsOld`, `toolsNotRunning` or `toolsNotInstalled`."),
		"tools_running":    boolean("Whether VMware Tools runs in the guest (needed for a graceful shutdown and for guest IPs)."),
		"guest_ips":        strs("IP addresses the guest reports through VMware Tools."),
		"disks": schema.ListNestedAttribute{
			Computed:            true,
			MarkdownDescription: "Virtual disks in controller order.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"device":            str("Controller and unit, e.g. `scsi0:0`."),
				"bus":               str("`scsi`, `sata`, `nvme` or `ide`."),
				"controller_type":   str("Controller model, e.g. `pvscsi`."),
				"descriptor_path":   str("Path of the `.vmdk` descriptor the VM uses."),
				"data_path":         str("Path of the data file (`-flat.vmdk`, or a snapshot delta)."),
				"capacity_bytes":    num("Virtual size in bytes: what will be copied."),
				"thin":              boolean("Whether the disk is thin-provisioned; for a disk on snapshots, whether its base disk is."),
				"on_snapshot_delta": boolean("Whether the VM runs on a snapshot delta of this disk. A migration then copies every file of `snapshot_chain` and flattens the chain into one disk holding what the guest sees now; the snapshots stay on the source."),
				"mode":              str("Disk mode, e.g. `persistent` or `independent-persistent`."),
				"independent":       boolean("Whether the disk is independent (excluded from snapshots)."),
				"rdm":               boolean("Whether the disk is a raw device mapping."),
				"snapshot_chain": schema.ListNestedAttribute{
					Computed: true,
					MarkdownDescription: "The snapshot chain the disk runs on, from the descriptor the VM uses down to the base disk; empty without snapshots. " +
						"Formats are `vmfsSparse` (`-delta.vmdk`), `seSparse` (`-sesparse.vmdk`) and `vmfs` (the base); a parent may live in another folder or datastore.",
					NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"descriptor_path": str("Path of the link's `.vmdk` descriptor."),
						"format":          str("The descriptor's `createType`: `vmfsSparse`, `seSparse` or `vmfs`."),
						"cid":             str("The descriptor's content ID (`CID`)."),
						"parent_cid":      str("The `parentCID`, which must equal the parent's `CID` (`ffffffff` for the base)."),
						"extent_paths":    strs("Paths of the link's data files: what is copied."),
						"capacity_bytes":  num("The link's virtual size in bytes."),
						"extent_bytes":    num("Length of the data files on the datastore, -1 when unknown."),
						"allocated_bytes": num("Bytes of data the link holds. For a thick base: its capacity. For a vmfsSparse delta: from the end of its grain directory to the next free sector its header records, i.e. the 512-byte grains written to it plus the 16 KiB grain tables ESXi appends among them. For a seSparse delta: the extent file's length past the grain area offset its header records, i.e. the 4 KiB grains written to it (explicitly zeroed grains take none; grains freed but not yet reclaimed still count). -1 when unknown: for a thin base, whose use the host does not tell; for a delta whose header cannot be read, such as the delta a running VM writes, which it locks; and for a delta whose header does not match its format, descriptor or length, which chain_problems then reports."),
						"thin":            boolean("`ddb.thinProvisioned` of the link (meaningful for the base)."),
					}},
				},
				"chain_copy_bytes": num("Bytes a migration copies for the snapshot chain (all its files), -1 when a size is unknown, 0 without snapshots."),
				"chain_problems":   strs("Why the snapshot chain cannot be read consistently (a missing parent, a `parentCID` that is not the parent's `CID`); a non-empty list blocks a migration."),
			}},
		},
		"nics": schema.ListNestedAttribute{
			Computed:            true,
			MarkdownDescription: "Network adapters in device order.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"device":       str("`ethernetN`."),
				"network_name": str("Port group the NIC is connected to: the key to use in a migration's network map."),
				"mac_address":  str("MAC address (kept by the migrated VM)."),
				"adapter_type": str("Adapter model, e.g. `vmxnet3`."),
				"ip_addresses": strs("Guest addresses on this NIC, from VMware Tools."),
			}},
		},
		"snapshots": schema.ListNestedAttribute{
			Computed:            true,
			MarkdownDescription: "Every snapshot, parents before children. A migration copies the disks as the guest sees them now and leaves the snapshots on the source.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"id":          num("Snapshot id (0 on hosts that do not print it)."),
				"name":        str("Snapshot name."),
				"description": str("Snapshot description."),
				"created":     str("Creation time as the host prints it."),
				"state":       str("Power state the snapshot captured."),
				"parent":      str("Name of the parent snapshot; empty for a root."),
				"depth":       num("0 for a root snapshot, 1 for its children, and so on."),
			}},
		},
		"problems": strs("What could not be read or parsed for this VM. A non-empty list blocks a migration: the provider never guesses."),
	}
}

func newVMModel(vm esxi.VM) vmModel {
	m := vmModel{
		VMID:            types.Int64Value(int64(vm.VMID)),
		Name:            types.StringValue(vm.Name),
		VMXPath:         types.StringValue(vm.VMXPath),
		System:          types.BoolValue(vm.System),
		Datastore:       types.StringValue(vm.Datastore),
		GuestOS:         types.StringValue(vm.GuestOS),
		HardwareVersion: types.Int64Value(int64(vm.HardwareVersion)),
		PowerState:      types.StringValue(string(vm.PowerState)),
		Firmware:        types.StringValue(string(vm.Firmware)),
		SecureBoot:      types.BoolValue(vm.SecureBoot),
		CPUs:            types.Int64Value(int64(vm.CPUs)),
		MemoryMiB:       types.Int64Value(int64(vm.MemoryMiB)),
		Annotation:      types.StringValue(vm.Annotation),
		ToolsStatus:     types.StringValue(vm.ToolsStatus),
		ToolsRunning:    types.BoolValue(vm.ToolsRunning),
		GuestIPs:        stringValues(vm.GuestIPs),
		Disks:           []diskModel{},
		NICs:            []nicModel{},
		Snapshots:       []snapshotModel{},
		Problems:        []types.String{},
	}
	for _, d := range vm.Disks {
		m.Disks = append(m.Disks, newDiskModel(d))
	}
	for _, n := range vm.NICs {
		m.NICs = append(m.NICs, nicModel{
			Device:      types.StringValue(n.Device),
			NetworkName: types.StringValue(n.NetworkName),
			MAC:         types.StringValue(n.MAC),
			AdapterType: types.StringValue(n.AdapterType),
			IPs:         stringValues(n.IPs),
		})
	}
	m.Snapshots = appendSnapshots(m.Snapshots, vm.Snapshots, "", 0)
	for _, p := range vm.Problems {
		m.Problems = append(m.Problems, types.StringValue(p.String()))
	}
	return m
}

// newDiskModel is one disk as the data source shows it, with its snapshot
// chain when the inventory read one.
func newDiskModel(d esxi.Disk) diskModel {
	dm := diskModel{
		Device:          types.StringValue(d.Device),
		Bus:             types.StringValue(d.Bus),
		ControllerType:  types.StringValue(d.ControllerType),
		DescriptorPath:  types.StringValue(d.DescriptorPath),
		DataPath:        types.StringValue(d.DataPath),
		CapacityBytes:   types.Int64Value(d.CapacityBytes),
		Thin:            types.BoolValue(d.Thin),
		OnSnapshotDelta: types.BoolValue(d.OnSnapshotDelta),
		Mode:            types.StringValue(d.Mode),
		Independent:     types.BoolValue(d.Independent),
		RDM:             types.BoolValue(d.RDM),
		SnapshotChain:   []chainLinkModel{},
		ChainCopyBytes:  types.Int64Value(0),
		ChainProblems:   []types.String{},
	}
	ch := d.Chain
	if ch == nil {
		return dm
	}
	dm.ChainCopyBytes = types.Int64Value(ch.CopyBytes)
	for _, l := range ch.Links {
		dm.SnapshotChain = append(dm.SnapshotChain, chainLinkModel{
			DescriptorPath: types.StringValue(l.DescriptorPath), Format: types.StringValue(l.CreateType),
			CID: types.StringValue(l.CID), ParentCID: types.StringValue(l.ParentCID), ExtentPaths: stringValues(l.ExtentPaths),
			CapacityBytes: types.Int64Value(l.CapacityBytes), ExtentBytes: types.Int64Value(l.ExtentBytes),
			AllocatedBytes: types.Int64Value(l.AllocatedBytes), Thin: types.BoolValue(l.Thin),
		})
	}
	for _, p := range ch.Problems {
		dm.ChainProblems = append(dm.ChainProblems, types.StringValue(p.String()))
	}
	return dm
}

// appendSnapshots flattens a snapshot tree depth first, each entry naming
// its parent and depth.
func appendSnapshots(out []snapshotModel, ss []esxi.Snapshot, parent string, depth int) []snapshotModel {
	for _, s := range ss {
		out = append(out, snapshotModel{
			ID:          types.Int64Value(int64(s.ID)),
			Name:        types.StringValue(s.Name),
			Description: types.StringValue(s.Description),
			Created:     types.StringValue(s.Created),
			State:       types.StringValue(s.State),
			Parent:      types.StringValue(parent),
			Depth:       types.Int64Value(int64(depth)),
		})
		out = appendSnapshots(out, s.Children, s.Name, depth+1)
	}
	return out
}

func stringValues(ss []string) []types.String {
	out := make([]types.String, 0, len(ss))
	for _, s := range ss {
		out = append(out, types.StringValue(s))
	}
	return out
}
