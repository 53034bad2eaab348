package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// Observation is what the systems show now about a migration, read
// without changing anything (for the provider's Read and drift detection).
type Observation struct {
	// Record is the stored record; nil when there is none.
	Record *Record
	// Phase is Record.Phase, or "" without a record.
	Phase Phase
	// VM is the destination VirtualMachine.
	VM VMObservation
	// DataVolumes are the destination disks, by deterministic name.
	DataVolumes []DataVolumeObservation
	// Source is the source VM's state. After cutover a missing or
	// unreachable source is normal.
	Source SourceObservation
	// Drift lists differences between the record and what is observed, in
	// words.
	Drift []string
}

// VMObservation is the observed destination VirtualMachine.
type VMObservation struct {
	Exists bool
	// Ours is true when it carries this migration's label.
	Ours            bool
	UID             string
	RunStrategy     string
	PrintableStatus string
	// VMIPhase is the VirtualMachineInstance's phase, "" without one.
	VMIPhase string
}

// DataVolumeObservation is one observed destination DataVolume.
type DataVolumeObservation struct {
	Name     string
	Exists   bool
	Ours     bool
	UID      string
	Phase    string
	Progress string
}

// SourceObservation is the observed source VM.
type SourceObservation struct {
	// Checked is false when the source could not be asked (no record, or
	// the host is not configured); Error then or on failure says why.
	Checked    bool
	Exists     bool
	PowerState string
	Error      string
}

// Observe re-observes migration namespace/name without changing anything.
// A missing record is not an error: Observation.Record is nil and the
// destination objects are still looked up by their deterministic names.
func (e *Engine) Observe(ctx context.Context, namespace, name string) (Observation, error) {
	var obs Observation
	s, err := e.load(ctx, namespace, name)
	switch {
	case errors.Is(err, ErrNoRecord):
	case err != nil:
		return obs, err
	default:
		rec := s.rec
		obs.Record, obs.Phase = &rec, rec.Phase
	}
	kc := e.deps.Kube
	vm, err := kc.GetVirtualMachine(ctx, namespace, name)
	switch {
	case kube.IsNotFound(err):
	case err != nil:
		return obs, err
	default:
		obs.VM = VMObservation{Exists: true, Ours: isOurs(vm.Labels, name), UID: string(vm.UID),
			RunStrategy: runStrategyOf(vm), PrintableStatus: string(vm.Status.PrintableStatus)}
		vmi, err := kc.GetVirtualMachineInstance(ctx, namespace, name)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return obs, err
		default:
			obs.VM.VMIPhase = string(vmi.Status.Phase)
		}
	}
	names, err := e.dataVolumeNames(ctx, namespace, name, obs.Record)
	if err != nil {
		return obs, err
	}
	for _, n := range names {
		dvo := DataVolumeObservation{Name: n}
		dv, err := kc.GetDataVolume(ctx, namespace, n)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return obs, err
		default:
			dvo = DataVolumeObservation{Name: n, Exists: true, Ours: isOurs(dv.Labels, name), UID: string(dv.UID),
				Phase: string(dv.Status.Phase), Progress: string(dv.Status.Progress)}
		}
		obs.DataVolumes = append(obs.DataVolumes, dvo)
	}
	if obs.Record != nil {
		obs.Source = e.observeSourcePower(ctx, obs.Record.Identity)
	} else {
		obs.Source.Error = "no migration record: the source is not known"
	}
	obs.Drift = drift(obs)
	return obs, nil
}

// dataVolumeNames lists the DataVolume names of a migration: those the
// record plans, plus any labelled as the migration's.
func (e *Engine) dataVolumeNames(ctx context.Context, namespace, name string, rec *Record) ([]string, error) {
	var names []string
	if rec != nil {
		for _, d := range rec.Disks {
			names = append(names, d.DataVolume)
		}
	}
	cl, err := e.deps.Kube.Raw()
	if err != nil {
		return nil, err
	}
	var list cdiv1beta1.DataVolumeList
	if err := cl.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{kube.LabelMigration: name}); err != nil {
		return nil, &kube.Error{Op: "list", Kind: "DataVolume", Namespace: namespace, Class: kube.Classify(err), Err: err}
	}
	for _, dv := range list.Items {
		if !slices.Contains(names, dv.Name) {
			names = append(names, dv.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (e *Engine) observeSourcePower(ctx context.Context, id Identity) SourceObservation {
	var so SourceObservation
	if id.VMID == 0 {
		so.Error = "the source was never discovered"
		return so
	}
	c, err := e.deps.ESXi.Client(id.Host)
	if err != nil {
		so.Error = err.Error()
		return so
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := c.PowerState(ctx, id.VMID)
	switch {
	case errors.Is(err, esxi.ErrVMNotFound):
		so.Checked = true
	case err != nil:
		so.Error = err.Error()
	default:
		so.Checked, so.Exists, so.PowerState = true, true, string(st)
	}
	return so
}

// drift describes where the systems differ from what the record says.
func drift(o Observation) []string {
	rec := o.Record
	if rec == nil {
		return nil
	}
	var out []string
	if rec.VM != nil && rec.VM.UID != "" {
		switch {
		case !o.VM.Exists:
			out = append(out, "the VirtualMachine "+rec.VM.Name+" is gone")
		case o.VM.UID != rec.VM.UID:
			out = append(out, "the VirtualMachine "+rec.VM.Name+" was replaced (new UID)")
		case !o.VM.Ours:
			out = append(out, "the VirtualMachine "+rec.VM.Name+" lost its "+kube.LabelMigration+" label")
		case rec.Phase == PhaseCompleted && o.VM.RunStrategy != rec.VM.RunStrategy:
			out = append(out, fmt.Sprintf("the VirtualMachine's runStrategy is %s, not %s", o.VM.RunStrategy, rec.VM.RunStrategy))
		}
	}
	for _, d := range rec.Disks {
		if !d.Imported {
			continue
		}
		for _, dv := range o.DataVolumes {
			if dv.Name == d.DataVolume && !dv.Exists {
				out = append(out, "the DataVolume "+d.DataVolume+" is gone")
			}
		}
	}
	if po := rec.PowerOff; po != nil && po.Done && o.Source.Exists && o.Source.PowerState != string(esxi.PoweredOff) {
		out = append(out, "the source VM is "+o.Source.PowerState+" again after the migration powered it off: two copies may now run")
	}
	return out
}

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

// ForgetResult says what Forget did.
type ForgetResult struct {
	Actions []string
}

// ForgetOptions are the extra inputs of Forget.
type ForgetOptions struct {
	// WorkDir and StagingDir locate staging files when the record is gone
	// (optional: the record names its files).
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
		return res, fmt.Errorf("delete policy %q is not one of keep, delete_destination, rollback", policy)
	}
	l, ctx, err := e.acquireLeaseWaiting(ctx, namespace, name)
	if err != nil {
		return res, err
	}
	defer l.release()
	s, err := e.load(ctx, namespace, name)
	var rec *Record
	switch {
	case errors.Is(err, ErrNoRecord):
	case err != nil:
		return res, err
	default:
		rec = &s.rec
	}
	kc := e.deps.Kube

	if policy == ForgetRollback {
		if reason := e.rollbackRefusal(ctx, namespace, name, rec); reason != "" {
			return res, &StopError{Phase: phaseOf(rec), State: PhaseManualInterventionRequired, Reason: "RollbackRefused",
				Message: "cannot roll back: " + reason,
				Action:  "the destination VM has run, so powering the source on could put two copies of the same server on the network. Use delete_policy keep or delete_destination, and power the source on yourself if you really want it back"}
		}
	}
	if policy == ForgetDeleteDestination || policy == ForgetRollback {
		vm, err := kc.GetVirtualMachine(ctx, namespace, name)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return res, err
		case isOurs(vm.Labels, name):
			if err := kc.DeleteVirtualMachine(ctx, namespace, name); err != nil {
				return res, err
			}
			res.Actions = append(res.Actions, "deleted VirtualMachine "+namespace+"/"+name)
		default:
			res.Actions = append(res.Actions, "left VirtualMachine "+namespace+"/"+name+" alone: it is not this migration's")
		}
		names, err := e.dataVolumeNames(ctx, namespace, name, rec)
		if err != nil {
			return res, err
		}
		for _, n := range names {
			dv, err := kc.GetDataVolume(ctx, namespace, n)
			switch {
			case kube.IsNotFound(err):
			case err != nil:
				return res, err
			case isOurs(dv.Labels, name):
				if err := kc.DeleteDataVolume(ctx, namespace, n); err != nil {
					return res, err
				}
				res.Actions = append(res.Actions, "deleted DataVolume "+namespace+"/"+n)
			default:
				res.Actions = append(res.Actions, "left DataVolume "+namespace+"/"+n+" alone: it is not this migration's")
			}
		}
	}
	if policy == ForgetRollback && rec != nil {
		a, err := e.powerSourceBackOn(ctx, rec)
		if err != nil {
			return res, err
		}
		res.Actions = append(res.Actions, a)
	}
	res.Actions = append(res.Actions, removeStagingFiles(namespace, name, rec, opts)...)
	if s != nil {
		cl, err := kc.Raw()
		if err != nil {
			return res, err
		}
		if err := cl.Delete(ctx, s.cm); err != nil && !kube.IsNotFound(err) {
			return res, &kube.Error{Op: "delete", Kind: "ConfigMap", Namespace: namespace, Name: s.cm.Name, Class: kube.Classify(err), Err: err}
		}
		res.Actions = append(res.Actions, "deleted the migration record "+namespace+"/"+RecordName(name))
	}
	return res, nil
}

func phaseOf(rec *Record) Phase {
	if rec == nil {
		return ""
	}
	return rec.Phase
}

// rollbackRefusal says why a rollback is unsafe, or "".
func (e *Engine) rollbackRefusal(ctx context.Context, namespace, name string, rec *Record) string {
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
func (e *Engine) powerSourceBackOn(ctx context.Context, rec *Record) (string, error) {
	po := rec.PowerOff
	label := fmt.Sprintf("source VM %q (vmid %d) on host %s", rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host)
	switch {
	case po == nil || (!po.Done && po.DecidedAt.IsZero()):
		return label + " was never powered off by this migration: left as it is", nil
	case po.Action == PowerActionAlreadyOff:
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

// removeStagingFiles deletes a migration's staged copies and artifacts.
func removeStagingFiles(namespace, name string, rec *Record, opts ForgetOptions) []string {
	var out []string
	dirs := map[string]bool{}
	if rec != nil {
		for _, d := range rec.Disks {
			if d.StagedPath != "" {
				_ = transfer.Remove(d.StagedPath)
				dirs[filepath.Dir(d.StagedPath)] = true
			}
			if d.ArtifactPath != "" {
				_ = convert.Remove(d.ArtifactPath)
				dirs[filepath.Dir(d.ArtifactPath)] = true
			}
		}
	}
	for _, root := range []string{opts.WorkDir, opts.StagingDir} {
		if root != "" {
			dirs[filepath.Join(root, namespace, name)] = true
		}
	}
	var keys []string
	for d := range dirs {
		keys = append(keys, d)
	}
	slices.Sort(keys)
	for _, d := range keys {
		// Only a folder named after this migration is removed whole.
		if filepath.Base(d) != name || filepath.Base(filepath.Dir(d)) != namespace {
			continue
		}
		if _, err := os.Stat(d); err == nil {
			if os.RemoveAll(d) == nil {
				out = append(out, "removed the staging folder "+d)
			}
			_ = os.Remove(filepath.Dir(d))
		}
	}
	return out
}
