// Package preflight runs the checks a migration's Validated phase makes
// before anything irreversible happens: is the source VM one that can move,
// and is the destination ready for it. Each check says what to do when it
// fails. The package reads; it never changes the source or the cluster.
package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// Severity says whether a failed check stops a migration.
type Severity string

// Severities.
const (
	Blocker Severity = "blocker"
	Warning Severity = "warning"
)

// Power-off policies, as the migration resource names them.
const (
	PolicyGraceful         = "graceful"
	PolicyGracefulThenHard = "graceful_then_hard"
	PolicyHard             = "hard"
	PolicyManual           = "manual"
)

// PowerOffPolicies lists every policy, for validators and documentation.
var PowerOffPolicies = []string{PolicyGraceful, PolicyGracefulThenHard, PolicyHard, PolicyManual}

// PodNetwork is the network-map value that puts a NIC on the pod network;
// any other value names a Multus NetworkAttachmentDefinition as
// "<namespace>/<name>" or "<name>".
const PodNetwork = "pod"

// Check IDs. Stable: users may match on them.
const (
	CheckGuestOS  = "guest_os_supported"
	CheckFirmware = "firmware_supported"
	// CheckSnapshots judges the snapshot chains disks run on: a chain that
	// can be read whole is migrated as is (a warning reports it and what
	// it costs to copy); a broken one blocks.
	CheckSnapshots       = "snapshot_chain"
	CheckDisks           = "disks_supported"
	CheckInventory       = "inventory_complete"
	CheckNICsMapped      = "nics_mapped"
	CheckDestinationName = "destination_name_valid"
	CheckNamespace       = "namespace_exists"
	CheckDestinationFree = "destination_name_free"
	CheckStorageClass    = "storage_class_exists"
	CheckQuota           = "storage_quota_fits"
	CheckTools           = "vmware_tools"
	CheckPowerPolicy     = "power_off_policy"
	// CheckSourceUnclaimed fails when another migration holds the source
	// VM's claim (the engine judges it: the claims live in the cluster).
	CheckSourceUnclaimed = "source_unclaimed"
	// CheckWorkDirSpace fails when the work folder's file system has less
	// room than the disks still to be staged there (see WorkDirSpace).
	CheckWorkDirSpace = "work_dir_space"
)

// Check is one check's outcome.
type Check struct {
	ID       string
	Severity Severity
	Passed   bool
	Message  string
}

// Destination is where the VM is meant to go.
type Destination struct {
	Namespace    string
	Name         string
	StorageClass string
	// NetworkMap maps each source network name to PodNetwork or a Multus
	// network.
	NetworkMap     map[string]string
	PowerOffPolicy string
	// Block is true when the disks' claims are Block volumes (Filesystem
	// otherwise); Upload when their images go through CDI's upload proxy
	// (an HTTP import otherwise). Both change what the claims take from a
	// storage quota (see StorageNeed).
	Block, Upload bool
	// JournalClaimBytes is what cluster execution's journal claims (one
	// beside each disk's claim, for the copy's journal and side files)
	// request in all; 0 in local execution.
	JournalClaimBytes int64
	// Owner is the migration label value that marks objects as this
	// migration's own; objects with another value (or none) are not ours.
	Owner string
}

// DiskName is the deterministic DataVolume name of disk index i.
func DiskName(vmName string, i int) string {
	return fmt.Sprintf("%s-disk-%d", vmName, i)
}

// Cluster is what the checks need to know about the destination cluster.
type Cluster interface {
	NamespaceExists(ctx context.Context, namespace string) (bool, error)
	StorageClassExists(ctx context.Context, name string) (bool, error)
	// VirtualMachineOwner reports whether a VirtualMachine exists and the
	// value of its migration label ("" when unlabelled).
	VirtualMachineOwner(ctx context.Context, namespace, name string) (exists bool, owner string, err error)
	// DataVolumeOwner is VirtualMachineOwner for DataVolumes.
	DataVolumeOwner(ctx context.Context, namespace, name string) (exists bool, owner string, err error)
	// StorageQuotaRemaining returns the smallest storage request headroom
	// any ResourceQuota of the namespace leaves for the storage class, and
	// whether any quota limits it at all.
	StorageQuotaRemaining(ctx context.Context, namespace, storageClass string) (remaining int64, limited bool, err error)
	// StorageClassPopulated reports whether CDI fills the StorageClass's
	// claims through a claim prime beside each (see StorageNeed).
	StorageClassPopulated(ctx context.Context, storageClass string) (bool, error)
}

// Result is the outcome of all checks.
type Result struct {
	Checks []Check
}

// Passed is false iff a blocker failed.
func (r Result) Passed() bool {
	return len(r.Failed(Blocker)) == 0
}

// Failed returns the failed checks of a severity.
func (r Result) Failed(s Severity) []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Passed && c.Severity == s {
			out = append(out, c)
		}
	}
	return out
}

// Run evaluates every check. Source-side checks need only the inventory;
// destination checks ask the cluster. An error means a check could not be
// evaluated (the cluster was unreachable), not that it failed.
func Run(ctx context.Context, vm esxi.VM, dest Destination, cluster Cluster) (Result, error) {
	var r Result
	add := func(c Check) { r.Checks = append(r.Checks, c) }

	for _, c := range sourceChecks(vm, dest) {
		add(c)
	}
	dc, err := destinationChecks(ctx, vm, dest, cluster)
	if err != nil {
		return r, err
	}
	for _, c := range dc {
		add(c)
	}
	return r, nil
}

func pass(id string, sev Severity, msg string) Check {
	return Check{ID: id, Severity: sev, Passed: true, Message: msg}
}

func fail(id string, sev Severity, msg string) Check {
	return Check{ID: id, Severity: sev, Passed: false, Message: msg}
}

// unsupportedGuests are guestOS prefixes KubeVirt cannot run: other
// architectures' or operating systems without virtio or emulated-device
// support worth attempting.
var unsupportedGuests = []string{"darwin", "netware", "solaris", "os2", "dos", "win31", "win95", "win98", "winme", "winnt", "vmkernel", "vmwarephoton"}

// sourceChecks judges the VM as the host describes it, in report order.
func sourceChecks(vm esxi.VM, dest Destination) []Check {
	return []Check{
		guestOSCheck(vm),
		firmwareCheck(vm),
		chainCheck(vm),
		disksCheck(vm),
		inventoryCheck(vm),
		nicsCheck(vm, dest),
		toolsCheck(vm),
		powerCheck(vm, dest.PowerOffPolicy),
	}
}

func guestOSCheck(vm esxi.VM) Check {
	g := strings.ToLower(vm.GuestOS)
	switch {
	case g == "":
		return fail(CheckGuestOS, Warning, fmt.Sprintf("VM %q does not declare a guest OS (guestOS is unset in its .vmx): check by hand that the guest has virtio or SATA/e1000 drivers before migrating.", vm.Name))
	case hasAnyPrefix(g, unsupportedGuests):
		return fail(CheckGuestOS, Blocker, fmt.Sprintf("VM %q runs guest OS %q, which KubeVirt cannot run. Migrate it another way or retire it.", vm.Name, vm.GuestOS))
	case strings.HasPrefix(g, "other") && !strings.Contains(g, "linux"):
		return fail(CheckGuestOS, Warning, fmt.Sprintf("VM %q declares guest OS %q; the provider cannot tell whether it boots on KubeVirt. Test the migrated VM before cutting over.", vm.Name, vm.GuestOS))
	default:
		return pass(CheckGuestOS, Blocker, fmt.Sprintf("Guest OS %q is supported.", vm.GuestOS))
	}
}

func firmwareCheck(vm esxi.VM) Check {
	switch {
	case vm.Firmware == esxi.FirmwareEFI && vm.SecureBoot:
		return fail(CheckFirmware, Warning, fmt.Sprintf("VM %q boots with EFI and Secure Boot. The destination VM keeps both; the cluster's nodes must support SMM (KubeVirt's default) or the VM will not start.", vm.Name))
	case vm.Firmware == esxi.FirmwareEFI || vm.Firmware == esxi.FirmwareBIOS:
		return pass(CheckFirmware, Blocker, fmt.Sprintf("Firmware %s is supported.", vm.Firmware))
	default:
		return fail(CheckFirmware, Blocker, fmt.Sprintf("VM %q has firmware %q, which the provider does not know how to reproduce. Set firmware to \"bios\" or \"efi\" on the source.", vm.Name, vm.Firmware))
	}
}

// disksCheck refuses disks a cold copy cannot move: raw device mappings,
// independent disks, disks without a readable data file or size.
func disksCheck(vm esxi.VM) Check {
	var bad []string
	for _, d := range vm.Disks {
		switch {
		case d.RDM:
			bad = append(bad, fmt.Sprintf("%s is a raw device mapping", d.Device))
		case d.Independent:
			bad = append(bad, fmt.Sprintf("%s is %s", d.Device, d.Mode))
		case d.DataPath == "" || d.CapacityBytes <= 0:
			bad = append(bad, fmt.Sprintf("%s has no readable data file or size", d.Device))
		}
	}
	switch {
	case len(vm.Disks) == 0:
		return fail(CheckDisks, Blocker, fmt.Sprintf("VM %q has no disks the provider could read. Check its .vmx and descriptors on the host.", vm.Name))
	case len(bad) > 0:
		return fail(CheckDisks, Blocker, fmt.Sprintf("VM %q has disks a cold copy cannot move: %s. Convert them to ordinary persistent virtual disks (or detach them) on the source first.", vm.Name, strings.Join(bad, "; ")))
	default:
		return pass(CheckDisks, Blocker, fmt.Sprintf("%d disk(s), %s in all.", len(vm.Disks), humanBytes(totalBytes(vm.Disks))))
	}
}

func inventoryCheck(vm esxi.VM) Check {
	if len(vm.Problems) == 0 {
		return pass(CheckInventory, Blocker, "The whole inventory was read.")
	}
	var ps []string
	for _, p := range vm.Problems {
		ps = append(ps, p.String())
	}
	return fail(CheckInventory, Blocker, fmt.Sprintf("Parts of VM %q could not be read from the host, so the migration could miss something: %s. Fix the files on the host or report the output as a bug.", vm.Name, strings.Join(ps, "; ")))
}

// nicsCheck wants every NIC's network mapped, and at most one NIC on the
// pod network.
func nicsCheck(vm esxi.VM, dest Destination) Check {
	var unmapped, onPod []string
	for _, n := range vm.NICs {
		dst, ok := dest.NetworkMap[n.NetworkName]
		if !ok {
			unmapped = append(unmapped, fmt.Sprintf("%s on %q", n.Device, n.NetworkName))
		}
		if dst == PodNetwork {
			onPod = append(onPod, n.Device)
		}
	}
	switch {
	case len(unmapped) > 0:
		return fail(CheckNICsMapped, Blocker, fmt.Sprintf("NICs without a destination network: %s. Add each source network to network_map, as \"pod\" or a Multus network \"<namespace>/<name>\".", strings.Join(unmapped, ", ")))
	case len(onPod) > 1:
		return fail(CheckNICsMapped, Blocker, fmt.Sprintf("%d NICs (%s) are mapped to the pod network, but a KubeVirt VM has one pod network interface. Map all but one to Multus networks \"<namespace>/<name>\".", len(onPod), strings.Join(onPod, ", ")))
	default:
		return pass(CheckNICsMapped, Blocker, fmt.Sprintf("All %d NIC(s) are mapped.", len(vm.NICs)))
	}
}

func toolsCheck(vm esxi.VM) Check {
	if vm.ToolsRunning {
		return pass(CheckTools, Warning, "VMware Tools is running.")
	}
	return fail(CheckTools, Warning, fmt.Sprintf("VMware Tools is not running in VM %q (status %q): the guest cannot be shut down gracefully and its IP address is unknown.", vm.Name, vm.ToolsStatus))
}

// chainCheck reports the snapshot chains the disks run on. A cold
// migration copies every file of a chain and flattens it locally, leaving
// the snapshots on the source as they are; it cannot when a parent is
// missing, a parent changed after its child was taken (CID mismatch), or
// an independent disk is left out of the snapshots while the VM runs.
func chainCheck(vm esxi.VM) Check {
	var chains, broken []string
	var copyBytes int64
	for _, d := range vm.Disks {
		switch {
		case d.Chain != nil && len(d.Chain.Problems) > 0 || d.Chain != nil && !d.Chain.Complete:
			var ps []string
			for _, p := range d.Chain.Problems {
				ps = append(ps, p.String())
			}
			if len(ps) == 0 {
				ps = append(ps, "the chain does not end in a base disk")
			}
			broken = append(broken, fmt.Sprintf("%s: %s", diskLabel(d), strings.Join(ps, "; ")))
		case d.Chain != nil:
			chains = append(chains, fmt.Sprintf("%s runs on %s", d.Device, chainSummary(*d.Chain)))
			if d.Chain.CopyBytes >= 0 && copyBytes >= 0 {
				copyBytes += d.Chain.CopyBytes
			} else {
				copyBytes = -1
			}
		case d.OnSnapshotDelta:
			broken = append(broken, diskLabel(d)+": runs on a snapshot delta whose chain was not read")
		}
	}
	if len(broken) > 0 {
		return fail(CheckSnapshots, Blocker, fmt.Sprintf("VM %q runs on snapshot chains that cannot be read consistently: %s. "+
			"A missing parent must be restored to the path the child names (parentFileNameHint), or the VM re-registered where its files are; "+
			"a CID mismatch means a parent disk was written after the snapshot was taken: restore the parent from a backup, or consolidate the snapshots in the host client (Snapshots > Consolidate) and apply again.",
			vm.Name, strings.Join(broken, "; ")))
	}
	if vm.PowerState == esxi.PoweredOn && (len(chains) > 0 || len(vm.Snapshots) > 0) {
		var indep []string
		for _, d := range vm.Disks {
			if d.Independent && d.Chain == nil {
				indep = append(indep, fmt.Sprintf("%s (%s)", d.Device, d.Mode))
			}
		}
		if len(indep) > 0 {
			return fail(CheckSnapshots, Blocker, fmt.Sprintf("VM %q runs on snapshots, but its independent disk(s) %s are excluded from them and keep changing while the VM runs. "+
				"Power the VM off before applying, or make those disks dependent (persistent) on the source.", vm.Name, strings.Join(indep, ", ")))
		}
	}
	if len(chains) == 0 {
		if len(vm.Snapshots) > 0 {
			return pass(CheckSnapshots, Warning, fmt.Sprintf("VM %q has %d snapshot(s) (%s) but no disk runs on one: the disks are copied as they are.", vm.Name, countSnapshots(vm.Snapshots), strings.Join(snapshotNames(vm.Snapshots), ", ")))
		}
		return pass(CheckSnapshots, Warning, "No snapshots.")
	}
	size := "an unknown size"
	if copyBytes >= 0 {
		size = humanBytes(copyBytes)
	}
	return fail(CheckSnapshots, Warning, fmt.Sprintf("VM %q runs on snapshots: %s. Every file of each chain is copied (%s in all) and flattened into one disk holding what the guest sees now; "+
		"the snapshots stay on the source, untouched.", vm.Name, strings.Join(chains, "; "), size))
}

// diskLabel names a disk by device and descriptor.
func diskLabel(d esxi.Disk) string {
	if d.DescriptorPath == "" {
		return d.Device
	}
	return d.Device + " (" + d.DescriptorPath + ")"
}

// chainSummary describes a complete chain, top first: "a 3-link chain
// (seSparse over vmfsSparse over a thin base), 24 MiB of files".
func chainSummary(ch esxi.DiskChain) string {
	var kinds []string
	for i, l := range ch.Links {
		if i == len(ch.Links)-1 {
			thin := "thick"
			if ch.BaseThin {
				thin = "thin"
			}
			kinds = append(kinds, "a "+thin+" base")
			continue
		}
		kinds = append(kinds, l.CreateType)
	}
	files := "files of unknown size"
	if ch.CopyBytes >= 0 {
		files = humanBytes(ch.CopyBytes) + " of files"
	}
	return fmt.Sprintf("a %d-link chain (%s), %s", len(ch.Links), strings.Join(kinds, " over "), files)
}

func powerCheck(vm esxi.VM, policy string) Check {
	if vm.PowerState == esxi.PoweredOff {
		return pass(CheckPowerPolicy, Blocker, "The source VM is already powered off.")
	}
	if vm.PowerState == esxi.Suspended {
		return fail(CheckPowerPolicy, Blocker, fmt.Sprintf("VM %q is suspended: its memory state would be lost. Resume it and shut it down from the guest, then migrate.", vm.Name))
	}
	switch policy {
	case PolicyManual:
		return fail(CheckPowerPolicy, Blocker, fmt.Sprintf("VM %q is %s and power_off_policy is \"manual\": shut it down yourself before applying, or choose \"graceful\".", vm.Name, vm.PowerState))
	case PolicyGraceful:
		if !vm.ToolsRunning {
			return fail(CheckPowerPolicy, Blocker, fmt.Sprintf("VM %q is %s, power_off_policy is \"graceful\", but VMware Tools is not running, so the guest cannot be asked to shut down. Start Tools in the guest, shut it down yourself, or choose \"graceful_then_hard\" or \"hard\".", vm.Name, vm.PowerState))
		}
		return pass(CheckPowerPolicy, Blocker, "The guest will be shut down through VMware Tools.")
	case PolicyGracefulThenHard:
		if !vm.ToolsRunning {
			return fail(CheckPowerPolicy, Warning, fmt.Sprintf("VM %q is %s and VMware Tools is not running: it will be powered off hard (like pulling the plug). Shut it down from the guest first to avoid that.", vm.Name, vm.PowerState))
		}
		return pass(CheckPowerPolicy, Blocker, "The guest will be shut down through VMware Tools, and powered off hard if it does not stop in time.")
	case PolicyHard:
		return fail(CheckPowerPolicy, Warning, fmt.Sprintf("VM %q is %s and power_off_policy is \"hard\": it will be powered off without a guest shutdown (like pulling the plug).", vm.Name, vm.PowerState))
	default:
		return fail(CheckPowerPolicy, Blocker, fmt.Sprintf("power_off_policy %q is not one of %s.", policy, strings.Join(PowerOffPolicies, ", ")))
	}
}

func destinationChecks(ctx context.Context, vm esxi.VM, dest Destination, cluster Cluster) ([]Check, error) {
	var out []Check
	nameOK := true
	if errs := validation.IsDNS1123Label(dest.Name); len(errs) > 0 {
		nameOK = false
		out = append(out, fail(CheckDestinationName, Blocker, fmt.Sprintf("Destination name %q is not a valid Kubernetes name: %s. Use lower-case letters, digits and '-', starting and ending with a letter or digit.", dest.Name, strings.Join(errs, "; "))))
	} else if longest := DiskName(dest.Name, max(len(vm.Disks)-1, 0)); len(longest) > validation.DNS1123LabelMaxLength {
		nameOK = false
		out = append(out, fail(CheckDestinationName, Blocker, fmt.Sprintf("Destination name %q is too long: its DataVolume %q would exceed 63 characters. Shorten the name to at most %d characters.", dest.Name, longest, validation.DNS1123LabelMaxLength-len(longest)+len(dest.Name))))
	} else {
		out = append(out, pass(CheckDestinationName, Blocker, fmt.Sprintf("%q is a valid name.", dest.Name)))
	}

	nsOK, err := cluster.NamespaceExists(ctx, dest.Namespace)
	if err != nil {
		return nil, fmt.Errorf("checking namespace %q: %w", dest.Namespace, err)
	}
	if !nsOK {
		out = append(out, fail(CheckNamespace, Blocker, fmt.Sprintf("Namespace %q does not exist in the destination cluster. Create it first (for example with a kubernetes_namespace resource the migration depends on).", dest.Namespace)))
	} else {
		out = append(out, pass(CheckNamespace, Blocker, fmt.Sprintf("Namespace %q exists.", dest.Namespace)))
	}

	if nameOK && nsOK {
		c, err := freeCheck(ctx, vm, dest, cluster)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}

	scOK, err := cluster.StorageClassExists(ctx, dest.StorageClass)
	if err != nil {
		return nil, fmt.Errorf("checking StorageClass %q: %w", dest.StorageClass, err)
	}
	if !scOK {
		out = append(out, fail(CheckStorageClass, Blocker, fmt.Sprintf("StorageClass %q does not exist. Use one listed by `kubectl get storageclass`.", dest.StorageClass)))
	} else {
		out = append(out, pass(CheckStorageClass, Blocker, fmt.Sprintf("StorageClass %q exists.", dest.StorageClass)))
	}

	if nsOK {
		remaining, limited, err := cluster.StorageQuotaRemaining(ctx, dest.Namespace, dest.StorageClass)
		if err != nil {
			return nil, fmt.Errorf("reading ResourceQuotas of %q: %w", dest.Namespace, err)
		}
		populated := false
		if limited && scOK {
			if populated, err = cluster.StorageClassPopulated(ctx, dest.StorageClass); err != nil {
				return nil, fmt.Errorf("checking how CDI fills claims of StorageClass %q: %w", dest.StorageClass, err)
			}
		}
		need := StorageNeed(vm.Disks, dest.Block, dest.Upload, populated) + dest.JournalClaimBytes
		switch {
		case !limited:
			out = append(out, pass(CheckQuota, Blocker, fmt.Sprintf("No storage quota limits namespace %q.", dest.Namespace)))
		case remaining < need:
			out = append(out, fail(CheckQuota, Blocker, fmt.Sprintf("The disks need %s %s but the ResourceQuota of namespace %q leaves %s for StorageClass %q. Raise the quota or free space first.", humanBytes(need), storageNeedDetail(dest, populated), dest.Namespace, humanBytes(remaining), dest.StorageClass)))
		default:
			out = append(out, pass(CheckQuota, Blocker, fmt.Sprintf("The disks need %s %s; the quota leaves %s.", humanBytes(need), storageNeedDetail(dest, populated), humanBytes(remaining))))
		}
	}
	return out, nil
}

func freeCheck(ctx context.Context, vm esxi.VM, dest Destination, cluster Cluster) (Check, error) {
	var taken []string
	exists, owner, err := cluster.VirtualMachineOwner(ctx, dest.Namespace, dest.Name)
	if err != nil {
		return Check{}, fmt.Errorf("looking up VirtualMachine %s/%s: %w", dest.Namespace, dest.Name, err)
	}
	if exists && (owner == "" || owner != dest.Owner) {
		taken = append(taken, "VirtualMachine "+dest.Name)
	}
	for i := range vm.Disks {
		name := DiskName(dest.Name, i)
		exists, owner, err := cluster.DataVolumeOwner(ctx, dest.Namespace, name)
		if err != nil {
			return Check{}, fmt.Errorf("looking up DataVolume %s/%s: %w", dest.Namespace, name, err)
		}
		if exists && (owner == "" || owner != dest.Owner) {
			taken = append(taken, "DataVolume "+name)
		}
	}
	if len(taken) > 0 {
		return fail(CheckDestinationFree, Blocker, fmt.Sprintf("Namespace %q already has %s, not created by this migration. The provider never overwrites what it does not own: choose another destination name, or remove or import the existing objects.", dest.Namespace, strings.Join(taken, " and "))), nil
	}
	return pass(CheckDestinationFree, Blocker, fmt.Sprintf("No other object uses the name %q.", dest.Name)), nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func countSnapshots(ss []esxi.Snapshot) int {
	n := 0
	for _, s := range ss {
		n += 1 + countSnapshots(s.Children)
	}
	return n
}

func snapshotNames(ss []esxi.Snapshot) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%q", s.Name))
		out = append(out, snapshotNames(s.Children)...)
	}
	sort.Strings(out)
	return out
}

// StorageNeed is what the disks' claims request from the namespace's
// storage quota, in the StorageClass, at the peak of the import: CDI's
// claim for each disk, which it inflates by the filesystem overhead on a
// Filesystem volume; where a populator fills it (populated), a claim
// prime of the same size beside it; and for an upload a scratch claim of
// about the same size, which the upload pod receives the image in (see
// package cdi). CDI's default overhead is assumed: a CDIConfig that sets
// another is not read.
func StorageNeed(ds []esxi.Disk, block, upload, populated bool) int64 {
	var n int64
	for _, d := range ds {
		claim := cdi.DataVolumeClaimSize(d.CapacityBytes, block, cdi.DefaultFilesystemOverhead)
		n += claim
		if populated {
			n += claim
		}
		if upload {
			n += cdi.ScratchClaimSize(claim, block, cdi.DefaultFilesystemOverhead)
		}
	}
	return n
}

// storageNeedDetail says what StorageNeed counted for dest.
func storageNeedDetail(dest Destination, populated bool) string {
	s := "for their claims"
	if !dest.Block {
		s += fmt.Sprintf(" with CDI's %g%% filesystem overhead", 100*cdi.DefaultFilesystemOverhead)
	}
	switch {
	case populated && dest.Upload:
		s += ", the claim prime CDI's populator fills beside each and the upload's scratch claim"
	case populated:
		s += " and the claim prime CDI's populator fills beside each"
	case dest.Upload:
		s += " and the upload's scratch claim beside each"
	}
	if dest.JournalClaimBytes > 0 {
		s += fmt.Sprintf(" and a journal claim beside each for cluster execution's copies (%s of the total)", humanBytes(dest.JournalClaimBytes))
	}
	return s
}

func totalBytes(ds []esxi.Disk) int64 {
	var n int64
	for _, d := range ds {
		n += d.CapacityBytes
	}
	return n
}

// humanBytes formats a size in binary units with its exact byte count when
// not whole, e.g. "40 GiB" or "1.5 GiB (1610612736 bytes)".
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, units[u], n)
}
