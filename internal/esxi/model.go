package esxi

// VM is everything the provider knows about one registered VM. It is built
// from vmInventory.xml, getallvms, the .vmx, the disk descriptors,
// power.getstate, get.guest and snapshot.get. Fields the host did not
// report unambiguously are left zero and explained in Problems.
type VM struct {
	VMID int
	// Name is the .vmx displayName (getallvms' Name column when the .vmx
	// could not be read and the row was unambiguous).
	Name string
	// VMXPath is the absolute path of the .vmx (/vmfs/volumes/...; outside
	// it for system VMs).
	VMXPath string
	// System is true for a system VM the host or vCenter manages, such as
	// a vSphere Cluster Services (vCLS) VM: getallvms shows it with the
	// empty datastore "[]" and its .vmx lies outside /vmfs/volumes (e.g.
	// /var/run/crx/infra/vCLS-1/vCLS-1.vmx on ESXi 8). Such VMs are listed
	// so the inventory is complete, but they are never migrated: their
	// .vmx and disks are not read (Name, GuestOS, HardwareVersion and
	// Annotation come from getallvms; Disks and NICs stay empty), and a
	// path outside /vmfs/volumes is not a problem for them.
	System bool
	// Datastore is the datastore name as getallvms prints it, or the
	// /vmfs/volumes component (often a UUID) of VMXPath.
	Datastore       string
	GuestOS         string
	HardwareVersion int
	PowerState      PowerState
	Firmware        Firmware
	SecureBoot      bool
	CPUs            int
	// CoresPerSocket is cpuid.coresPerSocket, 0 when the .vmx leaves it
	// to VMware's default (one core per socket).
	CoresPerSocket int
	// VTPM is true when the VM has a virtual TPM (vtpm.present).
	VTPM      bool
	MemoryMiB int
	Disks     []Disk
	NICs      []NIC
	// Snapshots is the snapshot tree (roots with their children).
	Snapshots []Snapshot
	// ToolsStatus is get.guest's toolsStatus ("toolsOk", "toolsNotRunning",
	// "toolsNotInstalled", "toolsOld").
	ToolsStatus  string
	ToolsRunning bool
	// GuestIPs lists the guest's IP addresses as VMware Tools reports them
	// (per-NIC addresses when available, else the primary ipAddress).
	GuestIPs   []string
	Annotation string
	// WorkingDir is the folder the .vmx's workingDir names, where ESXi
	// writes the VM's snapshot deltas; "" when they go to the VM's folder
	// (path.Dir(VMXPath)).
	WorkingDir string
	// Problems lists what could not be read or parsed about this VM (an
	// unreadable .vmx or descriptor, an unresolvable path, hostd skipping
	// it as invalid). Each has VMID set to this VM's vmid; [Client.VM] adds
	// the host-wide problems ([Problem.HostWide]). Unsafe but well-read
	// states, such as RDM or snapshot-delta disks, are flags on Disk
	// instead.
	Problems []Problem
}

// Disk is one virtual hard disk of a VM.
type Disk struct {
	// Device is the controller and unit, e.g. "scsi0:1".
	Device string
	// Bus is "scsi", "sata", "nvme" or "ide".
	Bus string
	// ControllerType is the controller's virtualDev ("pvscsi", "lsilogic", ...).
	ControllerType string
	// DescriptorPath is the resolved path of the .vmdk descriptor the VM uses.
	DescriptorPath string
	// DataPath is the resolved path of the descriptor's (first) extent file:
	// the -flat.vmdk for a base disk, -delta/-sesparse.vmdk for a snapshot.
	DataPath string
	// CapacityBytes is the virtual disk size (extent sectors * 512).
	CapacityBytes int64
	Thin          bool
	// CreateType is the descriptor's createType ("vmfs", "seSparse", ...).
	CreateType string
	// OnSnapshotDelta is true when the VM runs on a snapshot delta: copying
	// the base -flat.vmdk alone would lose data.
	OnSnapshotDelta bool
	// ParentDescriptorPath is the resolved parentFileNameHint of a delta.
	ParentDescriptorPath string
	// Chain is the snapshot chain the disk runs on, top first, nil when it
	// runs on its base. Thin is then the base's flag (when the chain is
	// complete); the chain's Problems say why it could not be read whole.
	Chain *DiskChain
	// Mode is the .vmx disk mode ("persistent", "independent-persistent", ...).
	Mode        string
	Independent bool
	// RDM is true for a raw device mapping; RDMPassthrough for physical mode.
	RDM            bool
	RDMPassthrough bool
}

// NIC is one network adapter of a VM.
type NIC struct {
	// Device is "ethernetN".
	Device      string
	NetworkName string
	MAC         string
	// AdapterType is the virtualDev ("vmxnet3", "e1000e", ...).
	AdapterType string
	// IPs are the guest's addresses on this NIC (from VMware Tools).
	IPs []string
}
