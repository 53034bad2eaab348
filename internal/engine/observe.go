package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Observation is what the systems show now about a migration, read
// without changing anything (for the provider's Read, drift detection and
// import).
type Observation struct {
	// Record is the stored record; nil when there is none.
	Record *record.Record
	// Settings is the caller's settings saved with the record (see
	// SaveSettings); "" when none were saved.
	Settings string
	// Phase is Record.Phase, or "" without a record.
	Phase record.Phase
	// VM is the destination VirtualMachine.
	VM VMObservation
	// DataVolumes are the destination disks, by deterministic name.
	DataVolumes []DataVolumeObservation
	// Source is the source VM's state. After cutover a missing or
	// unreachable source is normal.
	Source SourceObservation
	// Drift lists, in words, what the migration made that is gone, was
	// replaced, or no longer carries the migration's label. Applying the
	// configuration again cannot restore it without migrating again.
	Drift []string
	// SourceRunningAgain explains a source VM that runs again after its
	// copy started ("" otherwise): two servers with one identity may be
	// on the network. It is a warning, not drift: only a human can decide
	// which one to keep.
	SourceRunningAgain string
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
	// Labels are the VirtualMachine's labels.
	Labels map[string]string
	// DiskBus is the bus of its first disk ("" when not set).
	DiskBus string
	// NICModel is the model of its first interface ("" when not set).
	NICModel string
	// Timezone is its clock's time zone ("" for a UTC clock or none).
	Timezone string
	// Networks are its networks in order, with the interface of each.
	Networks []NetworkObservation
}

// NetworkObservation is one network of the destination VM.
type NetworkObservation struct {
	Name string
	// Pod is true for the pod network; Multus names the
	// NetworkAttachmentDefinition otherwise.
	Pod    bool
	Multus string
	// MAC is the address of the interface on this network, if set.
	MAC string
}

// DataVolumeObservation is one observed destination DataVolume.
type DataVolumeObservation struct {
	Name     string
	Exists   bool
	Ours     bool
	UID      string
	Phase    string
	Progress string
	// ClaimExists is true while a PersistentVolumeClaim of that name
	// remains (CDI may garbage-collect a completed DataVolume and keep
	// its claim, which is not drift).
	ClaimExists bool
	// StorageClass, AccessModes and VolumeMode come from the DataVolume's
	// spec, or from the claim when the DataVolume is gone.
	StorageClass string
	AccessModes  []string
	VolumeMode   string
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

// Load reads the record of migration namespace/name. A missing record is
// an error for which IsNotFound is true.
func (e *Engine) Load(ctx context.Context, namespace, name string) (record.Record, error) {
	s, err := e.store().Load(ctx, namespace, name)
	if err != nil {
		return record.Record{}, err
	}
	return s.Record, nil
}

// IsNotFound reports whether err says a migration has no record (Load on a
// migration that was never created or has been forgotten).
func IsNotFound(err error) bool { return errors.Is(err, coord.ErrNoRecord) }

// Observe re-observes migration namespace/name without changing anything.
// A missing record is not an error: Observation.Record is nil and the
// destination objects are still looked up by their deterministic names.
func (e *Engine) Observe(ctx context.Context, namespace, name string) (Observation, error) {
	var obs Observation
	s, err := e.store().Load(ctx, namespace, name)
	switch {
	case errors.Is(err, coord.ErrNoRecord):
	case err != nil:
		return obs, err
	default:
		rec := s.Record
		obs.Record, obs.Phase = &rec, rec.Phase
		obs.Settings = s.ConfigMap.Annotations[AnnotationSettings]
	}
	kc := e.deps.Kube
	vm, err := kc.GetVirtualMachine(ctx, namespace, name)
	switch {
	case kube.IsNotFound(err):
	case err != nil:
		return obs, err
	default:
		obs.VM = observeVM(vm, name)
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
		dvo, err := e.observeDataVolume(ctx, namespace, n, name)
		if err != nil {
			return obs, err
		}
		obs.DataVolumes = append(obs.DataVolumes, dvo)
	}
	if obs.Record != nil {
		obs.Source = e.observeSourcePower(ctx, obs.Record.Identity)
	} else {
		obs.Source.Error = "no migration record: the source is not known"
	}
	obs.Drift = drift(obs)
	obs.SourceRunningAgain = sourceRunningAgain(obs)
	return obs, nil
}

func observeVM(vm *kubevirtv1.VirtualMachine, name string) VMObservation {
	o := VMObservation{Exists: true, Ours: kube.OfMigration(vm.Labels, name), UID: string(vm.UID),
		RunStrategy: runStrategyOf(vm), PrintableStatus: string(vm.Status.PrintableStatus), Labels: vm.Labels}
	t := vm.Spec.Template
	if t == nil {
		return o
	}
	if ds := t.Spec.Domain.Devices.Disks; len(ds) > 0 && ds[0].Disk != nil {
		o.DiskBus = string(ds[0].Disk.Bus)
	}
	if is := t.Spec.Domain.Devices.Interfaces; len(is) > 0 {
		o.NICModel = is[0].Model
	}
	if c := t.Spec.Domain.Clock; c != nil && c.Timezone != nil {
		o.Timezone = string(*c.Timezone)
	}
	for _, n := range t.Spec.Networks {
		no := NetworkObservation{Name: n.Name, Pod: n.Pod != nil}
		if n.Multus != nil {
			no.Multus = n.Multus.NetworkName
		}
		for _, iface := range t.Spec.Domain.Devices.Interfaces {
			if iface.Name == n.Name {
				no.MAC = iface.MacAddress
			}
		}
		o.Networks = append(o.Networks, no)
	}
	return o
}

// observeDataVolume reads one DataVolume and its claim.
func (e *Engine) observeDataVolume(ctx context.Context, namespace, dvName, name string) (DataVolumeObservation, error) {
	o := DataVolumeObservation{Name: dvName}
	kc := e.deps.Kube
	dv, err := kc.GetDataVolume(ctx, namespace, dvName)
	switch {
	case kube.IsNotFound(err):
	case err != nil:
		return o, err
	default:
		o.Exists, o.Ours, o.UID = true, kube.OfMigration(dv.Labels, name), string(dv.UID)
		o.Phase, o.Progress = string(dv.Status.Phase), string(dv.Status.Progress)
		switch {
		case dv.Spec.Storage != nil:
			st := dv.Spec.Storage
			o.StorageClass, o.AccessModes, o.VolumeMode = deref(st.StorageClassName), accessModes(st.AccessModes), volumeMode(st.VolumeMode)
		case dv.Spec.PVC != nil:
			p := dv.Spec.PVC
			o.StorageClass, o.AccessModes, o.VolumeMode = deref(p.StorageClassName), accessModes(p.AccessModes), volumeMode(p.VolumeMode)
		}
	}
	pvc, err := kc.GetPersistentVolumeClaim(ctx, namespace, dvName)
	switch {
	case kube.IsNotFound(err):
	case err != nil:
		return o, err
	default:
		o.ClaimExists = pvc.DeletionTimestamp == nil
		if !o.Exists {
			o.StorageClass, o.AccessModes, o.VolumeMode = deref(pvc.Spec.StorageClassName), accessModes(pvc.Spec.AccessModes), volumeMode(pvc.Spec.VolumeMode)
		}
	}
	return o, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func accessModes(in []corev1.PersistentVolumeAccessMode) []string {
	var out []string
	for _, m := range in {
		out = append(out, string(m))
	}
	return out
}

func volumeMode(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return ""
	}
	return string(*m)
}

// dataVolumeNames lists the DataVolume names of a migration: those the
// record plans, plus any labelled as the migration's.
func (e *Engine) dataVolumeNames(ctx context.Context, namespace, name string, rec *record.Record) ([]string, error) {
	var names []string
	if rec != nil {
		for _, d := range rec.Disks {
			names = append(names, d.DataVolume)
		}
	}
	dvs, err := e.deps.Kube.ListDataVolumes(ctx, namespace, map[string]string{kube.LabelMigration: name})
	if err != nil {
		return nil, err
	}
	for _, dv := range dvs {
		if !slices.Contains(names, dv.Name) {
			names = append(names, dv.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (e *Engine) observeSourcePower(ctx context.Context, id record.Identity) SourceObservation {
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

// drift lists what the migration made that is gone, was replaced, or no
// longer carries the migration's label. A changed run strategy is not
// drift: it is a setting the configuration changes back in place.
func drift(o Observation) []string {
	rec := o.Record
	if rec == nil {
		return nil
	}
	ns := rec.Identity.Namespace
	out := []string{}
	if rec.VM != nil && rec.VM.UID != "" {
		switch {
		case !o.VM.Exists:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s is gone", ns, rec.VM.Name))
		case o.VM.UID != rec.VM.UID:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s was replaced by another object (UID %s; the migration made %s)", ns, rec.VM.Name, o.VM.UID, rec.VM.UID))
		case !o.VM.Ours:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s no longer carries the label %s=%s", ns, rec.VM.Name, kube.LabelMigration, rec.Identity.Name))
		}
	}
	for _, d := range rec.Disks {
		if !d.Imported {
			continue
		}
		for _, dv := range o.DataVolumes {
			if dv.Name != d.DataVolume {
				continue
			}
			switch {
			case !dv.Exists && !dv.ClaimExists:
				out = append(out, fmt.Sprintf("DataVolume %s/%s and its PersistentVolumeClaim are gone", ns, dv.Name))
			case dv.Exists && !dv.Ours:
				out = append(out, fmt.Sprintf("DataVolume %s/%s no longer carries the label %s=%s", ns, dv.Name, kube.LabelMigration, rec.Identity.Name))
			}
		}
	}
	return out
}

// sourceRunningAgain explains a source VM that runs again after the
// destination VM started, or returns "".
func sourceRunningAgain(o Observation) string {
	rec := o.Record
	if rec == nil {
		return ""
	}
	po := rec.PowerOff
	if po == nil || !po.Done || rec.Timestamps.VMStarted == nil || !o.Source.Exists || o.Source.PowerState == string(esxi.PoweredOff) {
		return ""
	}
	return fmt.Sprintf("The source VM %q (vmid %d) on ESXi host %s is %s again, and its migrated copy %s/%s started at %s: "+
		"two servers with one identity (the same MAC addresses, IP addresses and host name) may now be on the network. "+
		"Power one of them off now. Terraform will not do it for you: it cannot know which one you mean to keep.",
		rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host, o.Source.PowerState,
		rec.Identity.Namespace, rec.Identity.Name, rec.Timestamps.VMStarted.UTC().Format(time.RFC3339))
}
