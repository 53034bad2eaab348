package engine

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Preview is what a migration would do and whether it may, judged from
// what the source host and the destination cluster show now. Computing it
// changes nothing anywhere. The resource's plan, the vmmigration_preflight
// data source and the Validated checkpoint all judge a migration through
// it, so for the same host and cluster state they reach the same verdict.
type Preview struct {
	// Record is the migration's record when one exists for the same source
	// (an earlier apply started it, or it was imported) and the preview was
	// asked to resume from it; the checks ran then and are not repeated.
	Record *record.Record
	// VM is the source VM as observed (nil when resuming from a record).
	VM *esxi.VM
	// Checks are the pre-flight checks' outcomes.
	Checks preflight.Result
	// Disks is the per-disk plan: what is copied from where into which
	// DataVolume. Checksums and UIDs are filled only by the migration.
	Disks []record.DiskEvidence
}

// PreviewOptions tune how fresh a preview's observations must be.
type PreviewOptions struct {
	// InventoryMaxAge lets the preview reuse a host inventory read at most
	// this long ago (zero reads the host now). Plans use
	// DefaultInventoryMaxAge so that a wave reads each host once.
	InventoryMaxAge time.Duration
	// ResumeFromRecord returns the existing record of the same source
	// instead of judging again (the resource's plan of a migration an
	// earlier apply started).
	ResumeFromRecord bool
}

// Blockers returns the failed blocking checks.
func (p Preview) Blockers() []preflight.Check { return p.Checks.Failed(preflight.Blocker) }

// Warnings returns the failed warning checks.
func (p Preview) Warnings() []preflight.Check { return p.Checks.Failed(preflight.Warning) }

// Preview judges the migration spec describes without changing anything.
// Only the fields that decide the verdict need to be set: the source,
// the destination, the storage class, the network map and the power-off
// policy. An error means something could not be observed (the host or the
// cluster did not answer, or the source VM is not there); failed checks
// are not errors but part of the result.
func (e *Engine) Preview(ctx context.Context, spec Spec, opts PreviewOptions) (Preview, error) {
	spec = spec.WithDefaults()
	if opts.ResumeFromRecord {
		rec, err := e.Load(ctx, spec.Namespace, spec.Name)
		switch {
		case err == nil && !sameSource(rec.Identity, spec):
			// The record of the migration this one replaces (forgotten
			// before this one starts), or a conflict Run reports: judge
			// this source afresh.
		case err == nil:
			p := Preview{Record: &rec}
			if rec.Source != nil && !isStopState(rec.Phase) {
				p.Disks = rec.Disks
			}
			return p, nil
		case !IsNotFound(err):
			return Preview{}, err
		}
	}
	vm, err := e.findSource(ctx, spec, record.Identity{}, opts.InventoryMaxAge)
	if err != nil {
		return Preview{}, err
	}
	return e.judge(ctx, spec, vm, nil, nil)
}

// judge runs the pre-flight checks on an observed source VM and plans its
// disks, keeping the evidence of disks in prev that are unchanged; warm is
// the record's warm evidence, if any.
func (e *Engine) judge(ctx context.Context, spec Spec, vm *esxi.VM, prev []record.DiskEvidence, warm *record.WarmEvidence) (Preview, error) {
	res, err := preflight.Run(ctx, *vm, spec.destination(vm), e.deps.Kube)
	if err != nil {
		return Preview{}, transient("ClusterUnreachable",
			fmt.Sprintf("the destination cluster could not be queried for the pre-flight checks of %s/%s", spec.Namespace, spec.Name), err)
	}
	cc, err := e.claimCheck(ctx, spec, vm)
	if err != nil {
		return Preview{}, transient("ClusterUnreachable",
			fmt.Sprintf("the destination cluster could not be asked whether another migration claims the source of %s/%s", spec.Namespace, spec.Name), err)
	}
	res.Checks = append(res.Checks, cc)
	res.Checks = append(res.Checks, e.conversionChecks(ctx, spec, vm)...)
	res.Checks = append(res.Checks, spec.warmChecks(vm)...)
	res.Checks = append(res.Checks, e.warmSpaceCheck(ctx, spec, vm, warm)...)
	res.Checks = append(res.Checks, e.executionCheck(spec, vm))
	disks := planDisks(spec, vm, prev)
	if spec.WorkDir != "" && !spec.inCluster() {
		res.Checks = append(res.Checks, spec.spaceCheck(disks, vm))
	}
	return Preview{VM: vm, Checks: res, Disks: disks}, nil
}

// CheckField returns the configuration attribute a pre-flight check
// judges, so that a failed check points at the line to change.
func CheckField(id string) string {
	switch id {
	case preflight.CheckNICsMapped:
		return FieldNetworkMap
	case preflight.CheckDestinationName, preflight.CheckDestinationFree:
		return FieldName
	case preflight.CheckNamespace:
		return FieldNamespace
	case preflight.CheckStorageClass, preflight.CheckQuota:
		return FieldStorageClass
	case preflight.CheckPowerPolicy:
		return FieldPowerOffPolicy
	case CheckGuestConvertible, CheckGuestDrivers:
		return FieldConversion
	case CheckWarmSnapshots, CheckWarmDisks, CheckWarmDatastoreSpace:
		return FieldMode
	case CheckExecution:
		return FieldExecution
	case preflight.CheckWorkDirSpace, CheckConversionTools:
		// The provider's work_dir, not an attribute of the migration.
		return ""
	}
	return FieldSource
}

// destination is the destination of the migration of vm as the
// pre-flight checks see it.
func (s Spec) destination(vm *esxi.VM) preflight.Destination {
	nm := s.NetworkMap
	if nm == nil {
		nm = map[string]string{}
	}
	d := preflight.Destination{Namespace: s.Namespace, Name: s.Name, StorageClass: s.StorageClass,
		NetworkMap: nm, PowerOffPolicy: s.PowerOffPolicy, Owner: s.Name,
		Block: s.VolumeMode == string(corev1.PersistentVolumeBlock), Upload: s.Transport.Kind != TransportHTTP && !s.inCluster()}
	if s.inCluster() {
		for _, disk := range planDisks(s, vm, nil) {
			d.JournalClaimBytes += s.journalClaimSize(disk, s.warm())
		}
	}
	return d
}

// planDisks is the per-disk plan of a source VM: one entry per disk in
// boot order, with its staging file and DataVolume. A disk of prev with
// the same source path and size keeps its evidence (copied, imported).
func planDisks(spec Spec, vm *esxi.VM, prev []record.DiskEvidence) []record.DiskEvidence {
	disks := make([]record.DiskEvidence, len(vm.Disks))
	for i, d := range vm.Disks {
		ev := record.DiskEvidence{Index: i, Device: d.Device, SourcePath: d.DataPath, SizeBytes: d.CapacityBytes,
			StagedPath: spec.stagedPath(i), DataVolume: preflight.DiskName(spec.Name, i), Chain: chainPlan(d.Chain)}
		if i < len(prev) && prev[i].SourcePath == d.DataPath && prev[i].SizeBytes == d.CapacityBytes && sameChain(prev[i].Chain, ev.Chain) {
			ev = prev[i]
		}
		disks[i] = ev
	}
	return disks
}

// sameSource reports whether a record's identity is the source spec names
// (by vmid when the spec gives one, else by display name).
func sameSource(id record.Identity, spec Spec) bool {
	if id.Host != spec.Host {
		return false
	}
	if spec.VMID > 0 {
		return id.VMID == spec.VMID
	}
	return id.VMName == spec.VMName
}

// isStopState reports the phases a migration waits in for a retry or a
// human.
func isStopState(p record.Phase) bool {
	return p == record.PhaseRetryable || p == record.PhaseManualInterventionRequired || p == record.PhaseFailed
}
