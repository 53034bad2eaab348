package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// ForgetPolicy says what Forget removes besides the record.
type ForgetPolicy string

// Forget policies.
const (
	// ForgetKeep removes only the record, the lease and the staging files;
	// the VM and DataVolumes stay.
	ForgetKeep ForgetPolicy = "keep"
	// ForgetDeleteDestination also deletes the VirtualMachine and the
	// DataVolumes labelled as this migration's.
	ForgetDeleteDestination ForgetPolicy = "delete_destination"
	// ForgetRollback deletes the destination and powers the source on
	// again if the migration powered it off, but only if the destination
	// VM never started.
	ForgetRollback ForgetPolicy = "rollback"
)

// ForgetPolicies lists the policies, for validators and documentation.
var ForgetPolicies = []ForgetPolicy{ForgetKeep, ForgetDeleteDestination, ForgetRollback}

// DeletePolicies are ForgetPolicies as the resource's delete_policy spells
// them.
var DeletePolicies = []string{string(ForgetKeep), string(ForgetDeleteDestination), string(ForgetRollback)}

// DefaultDeletePolicy is what destroying a migration does unless told:
// keep the migrated VM.
const DefaultDeletePolicy = ForgetKeep

// ForgetResult says what Forget did.
type ForgetResult struct {
	Actions []string
}

// ForgetOptions are the extra inputs of Forget.
type ForgetOptions struct {
	// WorkDir and StagingDir are the provider's work_dir and the http
	// transport's http_staging_dir: Forget removes <WorkDir>/<namespace>/<name>
	// and <StagingDir>/<namespace>/<name>, and nothing else. Paths named in
	// the record are never used, so without these no local file is removed.
	WorkDir, StagingDir string
}

// Forget ends a migration's life in the provider: it removes the record
// and the lease and this migration's staging files, and per policy the
// destination objects; rollback powers the source on again. It never
// touches the source disks. Not-found is success everywhere, so Forget can
// be repeated.
func (e *Engine) Forget(ctx context.Context, namespace, name string, policy ForgetPolicy, opts ForgetOptions) (ForgetResult, error) {
	var res ForgetResult
	if !slices.Contains(ForgetPolicies, policy) {
		return res, onField(FieldDeletePolicy, fmt.Errorf("delete_policy %q is not one of %s", policy, strings.Join(DeletePolicies, ", ")))
	}
	l, ctx, err := e.acquireLeaseWaiting(ctx, namespace, name)
	if err != nil {
		return res, err
	}
	defer l.Release()
	s, err := e.store().Load(ctx, namespace, name)
	var rec *record.Record
	switch {
	case errors.Is(err, coord.ErrNoRecord):
	case err != nil:
		return res, err
	default:
		rec = &s.Record
	}
	kc := e.deps.Kube

	if policy == ForgetRollback {
		if reason := e.rollbackRefusal(ctx, namespace, name, rec); reason != "" {
			return res, &StopError{Phase: phaseOf(rec), State: record.PhaseManualInterventionRequired, Reason: "RollbackRefused",
				Message: "cannot roll back: " + reason,
				Action:  "the destination VM has run, so powering the source on could put two copies of the same server on the network. Use delete_policy keep or delete_destination, and power the source on yourself if you really want it back"}
		}
	}
	if policy == ForgetDeleteDestination || policy == ForgetRollback {
		deleted, err := e.deleteDestination(ctx, namespace, name, rec)
		res.Actions = append(res.Actions, deleted...)
		if err != nil {
			return res, err
		}
	}
	// A warm migration's snapshots go whatever the policy: they only grow.
	removed, err := e.forgetWarmSnapshots(ctx, rec, policy == ForgetRollback)
	if err != nil {
		return res, err
	}
	res.Actions = append(res.Actions, removed...)
	if policy == ForgetRollback && rec != nil {
		a, err := e.powerSourceBackOn(ctx, rec)
		if err != nil {
			return res, err
		}
		res.Actions = append(res.Actions, a)
	}
	// Cluster execution's Jobs and Secret go whatever the policy: they
	// are the migration's machinery, not its destination.
	// (Only for those: a local migration's credentials need no rights
	// on Jobs or Secrets.)
	if rec != nil && rec.ExecutionOf() == ExecutionCluster {
		removed, err = e.removeClusterWork(ctx, namespace, name, rec.Identity.Host)
		res.Actions = append(res.Actions, removed...)
		if err != nil {
			return res, err
		}
	}
	res.Actions = append(res.Actions, removeStagingFiles(namespace, name, opts)...)
	if a, err := e.forgetStagingCA(ctx, namespace, name); err != nil {
		return res, err
	} else if a != "" {
		res.Actions = append(res.Actions, a)
	}
	if s != nil {
		if err := kc.DeleteConfigMap(ctx, s.ConfigMap); err != nil {
			return res, err
		}
		res.Actions = append(res.Actions, "deleted the migration record "+namespace+"/"+coord.RecordName(name))
	}
	// Released after the record is gone: a claim is kept while its
	// holder's record exists.
	released, err := e.claims().Release(ctx, namespace, name)
	res.Actions = append(res.Actions, released...)
	if err != nil {
		return res, err
	}
	return res, nil
}

// deleteDestination deletes the migration's VirtualMachine and
// DataVolumes, leaving alone any of those names that are not its own, and
// says what it did.
func (e *Engine) deleteDestination(ctx context.Context, namespace, name string, rec *record.Record) ([]string, error) {
	kc := e.deps.Kube
	var actions []string
	vm, err := kc.GetVirtualMachine(ctx, namespace, name)
	switch {
	case kube.IsNotFound(err):
	case err != nil:
		return actions, err
	case kube.OfMigration(vm.Labels, name):
		if err := kc.DeleteVirtualMachine(ctx, namespace, name); err != nil {
			return actions, err
		}
		actions = append(actions, "deleted VirtualMachine "+namespace+"/"+name)
	default:
		actions = append(actions, "left VirtualMachine "+namespace+"/"+name+" alone: it is not this migration's")
	}
	names, err := e.dataVolumeNames(ctx, namespace, name, rec)
	if err != nil {
		return actions, err
	}
	for _, n := range names {
		dv, err := kc.GetDataVolume(ctx, namespace, n)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return actions, err
		case kube.OfMigration(dv.Labels, name):
			if err := kc.DeleteDataVolume(ctx, namespace, n); err != nil {
				return actions, err
			}
			actions = append(actions, "deleted DataVolume "+namespace+"/"+n)
		default:
			actions = append(actions, "left DataVolume "+namespace+"/"+n+" alone: it is not this migration's")
		}
	}
	return actions, nil
}

func phaseOf(rec *record.Record) record.Phase {
	if rec == nil {
		return ""
	}
	return rec.Phase
}

// rollbackRefusal says why a rollback is unsafe, or "".
func (e *Engine) rollbackRefusal(ctx context.Context, namespace, name string, rec *record.Record) string {
	if rec != nil && rec.Timestamps.VMStarted != nil {
		return fmt.Sprintf("the destination VM %s/%s started at %s", namespace, name, rec.Timestamps.VMStarted.Format(time.RFC3339))
	}
	vmi, err := e.deps.Kube.GetVirtualMachineInstance(ctx, namespace, name)
	if err == nil {
		if vmi.Status.Phase == kubevirtv1.Running {
			return fmt.Sprintf("the destination VM %s/%s is running", namespace, name)
		}
		for _, p := range vmi.Status.PhaseTransitionTimestamps {
			if p.Phase == kubevirtv1.Running {
				return fmt.Sprintf("the destination VM %s/%s ran at %s", namespace, name, p.PhaseTransitionTimestamp.UTC().Format(time.RFC3339))
			}
		}
		// Pending or Scheduling: it never ran; deleting the VM removes it.
		return ""
	}
	if !kube.IsNotFound(err) {
		return "the destination VM's state cannot be read (" + err.Error() + "), so it cannot be shown it never ran"
	}
	return ""
}

// powerSourceBackOn powers the source on again if this migration powered
// it off.
func (e *Engine) powerSourceBackOn(ctx context.Context, rec *record.Record) (string, error) {
	po := rec.PowerOff
	label := fmt.Sprintf("source VM %q (vmid %d) on host %s", rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host)
	switch {
	case po == nil || (!po.Done && po.DecidedAt.IsZero()):
		return label + " was never powered off by this migration: left as it is", nil
	case po.Action == record.PowerActionAlreadyOff:
		return label + " was already off before the migration: left off", nil
	}
	c, err := e.deps.ESXi.Client(rec.Identity.Host)
	if err != nil {
		return "", err
	}
	if err := c.PowerOn(ctx, rec.Identity.VMID); err != nil {
		return "", err
	}
	return "powered on " + label + " again", nil
}

// removeStagingFiles deletes a migration's staged copies and artifacts:
// the folders <root>/<namespace>/<name> under work_dir and
// http_staging_dir as the caller configures them. The paths the record
// names are not used (see paths.go): a record is data anyone allowed to
// edit ConfigMaps can change.
func removeStagingFiles(namespace, name string, opts ForgetOptions) []string {
	var out []string
	for _, d := range stagingFolders(namespace, name, opts.WorkDir, opts.StagingDir) {
		if ok, err := removeFolder(d); err != nil {
			out = append(out, "could not remove the staging folder "+d+": "+err.Error())
		} else if ok {
			out = append(out, "removed the staging folder "+d)
		}
	}
	return out
}
