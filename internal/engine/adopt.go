package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// CondAdopted is the condition of a migration that Adopt recorded for a
// VirtualMachine migrated by other means.
const CondAdopted = "Adopted"

// AdoptCandidate is one source VM compared with the VirtualMachine to
// adopt, and what of it matched.
type AdoptCandidate struct {
	Host       string
	VMID       int
	Name       string
	VMXPath    string
	PowerState string
	// NameMatch: the source's display name equals the VirtualMachine's
	// name, ignoring case and the characters a Kubernetes name cannot hold.
	NameMatch bool
	// MACsMatched of the source's MACsTotal MAC addresses are on the
	// VirtualMachine's interfaces.
	MACsMatched, MACsTotal int
	// DisksMatched of the source's DisksTotal disks have a destination
	// disk of their size; DestDisks is how many disks the VM has.
	DisksMatched, DisksTotal, DestDisks int

	vm *esxi.VM
	// pairs maps a source disk index to a destination disk index, for the
	// disks matched by size first, then the rest in order.
	pairs map[int]int
}

// MACsMatch reports whether every MAC address of the source is on the VM.
func (c AdoptCandidate) MACsMatch() bool { return c.MACsTotal > 0 && c.MACsMatched == c.MACsTotal }

// SizesMatch reports whether the source and the VM have as many disks and
// every source disk has a destination disk of its size.
func (c AdoptCandidate) SizesMatch() bool {
	return c.DisksTotal > 0 && c.DisksTotal == c.DestDisks && c.DisksMatched == c.DisksTotal
}

// Acceptable reports whether the evidence suffices to adopt: all MAC
// addresses, or the name and all disk sizes. A name alone, or sizes alone,
// is what any clone or template copy shares.
func (c AdoptCandidate) Acceptable() bool { return c.MACsMatch() || (c.NameMatch && c.SizesMatch()) }

// rank orders acceptable candidates: all MACs first, then the name, then
// the sizes, then the number of MACs in common.
func (c AdoptCandidate) rank() [4]int {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	return [4]int{b(c.MACsMatch()), b(c.NameMatch), b(c.SizesMatch()), c.MACsMatched}
}

// signal reports whether the candidate is worth listing: its name or a
// MAC address matched. Disk sizes alone are not (many VMs share them).
func (c AdoptCandidate) signal() bool { return c.NameMatch || c.MACsMatched > 0 }

// Matched says what matched and what did not, e.g. "matched by name, MACs
// (2/2), disk sizes (2/2)" or "matched by MACs (2/2); not by name, disk
// sizes (1/2)".
func (c AdoptCandidate) Matched() string {
	var yes, no []string
	if c.NameMatch {
		yes = append(yes, "name")
	} else {
		no = append(no, "name")
	}
	macs := fmt.Sprintf("MACs (%d/%d)", c.MACsMatched, c.MACsTotal)
	if c.MACsMatch() {
		yes = append(yes, macs)
	} else {
		no = append(no, macs)
	}
	sizes := fmt.Sprintf("disk sizes (%d/%d)", c.DisksMatched, c.DisksTotal)
	if c.DisksTotal != c.DestDisks {
		sizes = fmt.Sprintf("disk sizes (%d/%d; the VM has %d disk(s))", c.DisksMatched, c.DisksTotal, c.DestDisks)
	}
	if c.SizesMatch() {
		yes = append(yes, sizes)
	} else {
		no = append(no, sizes)
	}
	switch {
	case len(yes) == 0:
		return "matched by nothing"
	case len(no) == 0:
		return "matched by " + strings.Join(yes, ", ")
	}
	return "matched by " + strings.Join(yes, ", ") + "; not by " + strings.Join(no, ", ")
}

// String names the candidate and what matched.
func (c AdoptCandidate) String() string {
	return fmt.Sprintf("VM %q (vmid %d, %s) on host %s: %s", c.Name, c.VMID, c.PowerState, c.Host, c.Matched())
}

// AdoptReport says how Adopt matched a VirtualMachine to its source and
// what it wrote.
type AdoptReport struct {
	// Match is the adopted source.
	Match AdoptCandidate
	// Others are the other source VMs that matched by name or by some MAC
	// address, best first.
	Others []AdoptCandidate
	// Labelled lists the objects Adopt labelled as the migration's
	// ("VirtualMachine ns/name", "DataVolume ns/name").
	Labelled []string
	// Notes are facts the user should know: disks without a counterpart,
	// a source still powered on, checksums unknown.
	Notes []string
}

// AdoptError is Adopt's refusal: no VirtualMachine, no source that
// matches well enough, several that match equally, or a conflict.
type AdoptError struct {
	Namespace, Name string
	// Reason is VMNotFound, NoMatch, Ambiguous, HostUnreadable,
	// NotOurs or VMIncomplete.
	Reason     string
	Message    string
	Candidates []AdoptCandidate
	Err        error
}

func (e *AdoptError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if len(e.Candidates) > 0 {
		b.WriteString("\nCandidates:")
		for _, c := range e.Candidates {
			b.WriteString("\n  - " + c.String())
		}
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

func (e *AdoptError) Unwrap() error { return e.Err }

// destDisk is one disk of the VirtualMachine to adopt.
type destDisk struct {
	// claim is the DataVolume (and PVC) name the volume uses.
	claim string
	dv    *cdiv1beta1.DataVolume
	size  int64
}

// adoptTarget is what Adopt reads of the VirtualMachine.
type adoptTarget struct {
	vm    *kubevirtv1.VirtualMachine
	vmi   *kubevirtv1.VirtualMachineInstance
	disks []destDisk
	macs  []string
}

// Adopt records a VirtualMachine that was migrated by other means (it has
// no record) as a Completed migration, so that the provider can import it.
//
// It reads the VirtualMachine namespace/name, the sizes of its disks (the
// DataVolume's requested storage, else the PVC's capacity) and its MAC
// addresses, and the inventory of every host in hosts (one batched read
// each). A source VM is adopted when it is the single best candidate that
// matches by all its MAC addresses, or by name and all disk sizes (see
// AdoptCandidate). Otherwise Adopt returns an *AdoptError listing the
// candidates and what matched.
//
// Adopt writes two things: the label kube.LabelMigration=name (and
// kube.LabelManagedBy when the object has none) on the VirtualMachine and
// its DataVolumes, which is how the engine tells its objects from foreign
// ones, and then the record. It changes nothing else, and never touches
// the source VM.
func (e *Engine) Adopt(ctx context.Context, namespace, name string, hosts []string) (record.Record, AdoptReport, error) {
	var rep AdoptReport
	if _, err := e.store().Load(ctx, namespace, name); err == nil {
		return record.Record{}, rep, &AdoptError{Namespace: namespace, Name: name, Reason: "RecordExists",
			Message: fmt.Sprintf("migration %s/%s already has a record (ConfigMap %s): import it instead of adopting it", namespace, name, coord.RecordName(name))}
	} else if !errors.Is(err, coord.ErrNoRecord) {
		return record.Record{}, rep, err
	}
	l, ctx, err := e.leases().Acquire(ctx, namespace, name)
	if err != nil {
		return record.Record{}, rep, err
	}
	defer l.Release()

	tgt, err := e.readAdoptTarget(ctx, namespace, name)
	if err != nil {
		return record.Record{}, rep, err
	}
	cands, err := e.adoptCandidates(ctx, namespace, name, hosts, tgt)
	if err != nil {
		return record.Record{}, rep, err
	}
	best, others, err := pickAdoptCandidate(namespace, name, hosts, cands)
	if err != nil {
		return record.Record{}, rep, err
	}
	rep.Match, rep.Others = best, others

	// Label before recording: a record whose objects are not labelled
	// would show as drift, while labels without a record are adopted
	// again by the next import.
	labelled, err := e.labelAdopted(ctx, namespace, name, tgt)
	if err != nil {
		return record.Record{}, rep, err
	}
	rep.Labelled = labelled

	rec := e.adoptedRecord(namespace, name, tgt, best, &rep)
	s, err := e.store().Create(ctx, rec)
	if err != nil {
		return record.Record{}, rep, err
	}
	// The adopted migration holds its source like any other, so that a
	// later migration of the same VM stops before touching it.
	if holder, _, err := e.claims().Take(ctx, best.Host, e.hostIdentity(best.Host), best.VMXPath, namespace, name); err != nil {
		rep.Notes = append(rep.Notes, "the source VM could not be claimed for this migration ("+err.Error()+"): another migration of it would not be stopped")
	} else if holder != nil {
		rep.Notes = append(rep.Notes, "the source VM is also the source of the migration "+holder.Holder()+", which holds its claim")
	}
	e.store().Event(ctx, s, false, "Adopted", fmt.Sprintf("VirtualMachine %s/%s adopted as the migration of VM %q (vmid %d) on host %s: %s",
		namespace, name, best.Name, best.VMID, best.Host, best.Matched()))
	return s.Record, rep, nil
}

// readAdoptTarget reads the VirtualMachine, its disks and MAC addresses.
func (e *Engine) readAdoptTarget(ctx context.Context, namespace, name string) (*adoptTarget, error) {
	kc := e.deps.Kube
	vm, err := kc.GetVirtualMachine(ctx, namespace, name)
	if kube.IsNotFound(err) {
		return nil, &AdoptError{Namespace: namespace, Name: name, Reason: "VMNotFound",
			Message: fmt.Sprintf("migration %s/%s has no record (ConfigMap %s/%s) and there is no VirtualMachine %s/%s to adopt either. "+
				"Check the namespace and name: the import ID is <namespace>/<name> of the destination VirtualMachine",
				namespace, name, namespace, coord.RecordName(name), namespace, name)}
	}
	if err != nil {
		return nil, err
	}
	if owner := vm.Labels[kube.LabelMigration]; owner != "" && owner != name {
		return nil, &AdoptError{Namespace: namespace, Name: name, Reason: "NotOurs",
			Message: fmt.Sprintf("VirtualMachine %s/%s carries the label %s=%s: it belongs to migration %q, not %q", namespace, name, kube.LabelMigration, owner, owner, name)}
	}
	tgt := &adoptTarget{vm: vm}
	if vmi, err := kc.GetVirtualMachineInstance(ctx, namespace, name); err == nil {
		tgt.vmi = vmi
	} else if !kube.IsNotFound(err) {
		return nil, err
	}
	if vm.Spec.Template == nil {
		return nil, &AdoptError{Namespace: namespace, Name: name, Reason: "VMIncomplete",
			Message: fmt.Sprintf("VirtualMachine %s/%s has no template: there are no disks or interfaces to match", namespace, name)}
	}
	spec := vm.Spec.Template.Spec
	for _, v := range spec.Volumes {
		var claim string
		switch {
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		default:
			continue // cloud-init, container disks and the like are not migrated disks
		}
		d, err := e.readDestDisk(ctx, namespace, name, claim)
		if err != nil {
			return nil, err
		}
		tgt.disks = append(tgt.disks, d)
	}
	status := map[string]string{}
	if tgt.vmi != nil {
		for _, i := range tgt.vmi.Status.Interfaces {
			status[i.Name] = i.MAC
		}
	}
	for _, i := range spec.Domain.Devices.Interfaces {
		mac := i.MacAddress
		if mac == "" {
			mac = status[i.Name] // KubeVirt chose it; the VMI reports it
		}
		if mac != "" {
			tgt.macs = append(tgt.macs, normalMAC(mac))
		}
	}
	return tgt, nil
}

// readDestDisk reads the size of one disk: the DataVolume's requested
// storage, or the PVC's capacity (its request while unbound) when the
// DataVolume is gone (CDI may garbage-collect it) or was never there.
func (e *Engine) readDestDisk(ctx context.Context, namespace, name, claim string) (destDisk, error) {
	d := destDisk{claim: claim}
	dv, err := e.deps.Kube.GetDataVolume(ctx, namespace, claim)
	switch {
	case err == nil:
		if owner := dv.Labels[kube.LabelMigration]; owner != "" && owner != name {
			return d, &AdoptError{Namespace: namespace, Name: name, Reason: "NotOurs",
				Message: fmt.Sprintf("DataVolume %s/%s carries the label %s=%s: it belongs to migration %q, not %q", namespace, claim, kube.LabelMigration, owner, owner, name)}
		}
		d.dv = dv
		var q resource.Quantity
		var ok bool
		switch {
		case dv.Spec.Storage != nil:
			q, ok = dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
		case dv.Spec.PVC != nil:
			q, ok = dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage]
		}
		if ok {
			d.size = q.Value() - scratchOf(dv.Annotations, q.Value())
			return d, nil
		}
	case !kube.IsNotFound(err):
		return d, err
	}
	pvc, err := e.deps.Kube.GetPersistentVolumeClaim(ctx, namespace, claim)
	if err != nil {
		if kube.IsNotFound(err) && d.dv == nil {
			return d, &AdoptError{Namespace: namespace, Name: name, Reason: "VMIncomplete",
				Message: fmt.Sprintf("VirtualMachine %s/%s uses disk %s, but neither a DataVolume nor a PersistentVolumeClaim of that name exists", namespace, name, claim)}
		}
		if kube.IsNotFound(err) {
			return d, nil // a DataVolume without a size and no claim yet: size unknown
		}
		return d, err
	}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		d.size = q.Value()
	} else if q, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		d.size = q.Value()
	}
	ann := pvc.Annotations
	if d.dv != nil {
		ann = d.dv.Annotations
	}
	d.size -= scratchOf(ann, d.size)
	return d, nil
}

// scratchOf is the room beside the disk that a claim of size bytes was
// asked for (AnnotationScratchBytes): 0 when absent, or when it is not a
// number of whole MiB below the size (the annotation can be edited by
// anyone, so it never makes a disk read as larger or negative).
func scratchOf(ann map[string]string, size int64) int64 {
	n, err := strconv.ParseInt(ann[AnnotationScratchBytes], 10, 64)
	if err != nil || n <= 0 || n%(1<<20) != 0 || n >= size {
		return 0
	}
	return n
}

// adoptCandidates reads every host's inventory (in parallel, one batched
// read per host) and scores every VM against the target.
func (e *Engine) adoptCandidates(ctx context.Context, namespace, name string, hosts []string, tgt *adoptTarget) ([]AdoptCandidate, error) {
	if len(hosts) == 0 {
		return nil, &AdoptError{Namespace: namespace, Name: name, Reason: "NoMatch",
			Message: fmt.Sprintf("VirtualMachine %s/%s has no migration record, and no ESXi host is configured to find its source on: add the esxi_host block of the host it came from", namespace, name)}
	}
	type result struct {
		vms []esxi.VM
		err error
	}
	results := make([]result, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			c, err := e.deps.ESXi.Client(h)
			if err != nil {
				results[i].err = err
				return
			}
			results[i].vms, _, results[i].err = c.Inventory(ctx)
		})
	}
	wg.Wait()
	var cands []AdoptCandidate
	for i, h := range hosts {
		if err := results[i].err; err != nil {
			// A host not read could hold a better or an equal match.
			return nil, &AdoptError{Namespace: namespace, Name: name, Reason: "HostUnreadable",
				Message: fmt.Sprintf("the inventory of ESXi host %q could not be read, so the source of VirtualMachine %s/%s cannot be shown to be unambiguous; fix the host or its esxi_host block and import again", h, namespace, name),
				Err:     err}
		}
		for j := range results[i].vms {
			cands = append(cands, scoreCandidate(h, &results[i].vms[j], name, tgt))
		}
	}
	return cands, nil
}

// scoreCandidate compares one source VM with the target.
func scoreCandidate(host string, vm *esxi.VM, name string, tgt *adoptTarget) AdoptCandidate {
	c := AdoptCandidate{Host: host, VMID: vm.VMID, Name: vm.Name, VMXPath: vm.VMXPath, PowerState: string(vm.PowerState), vm: vm,
		NameMatch:  sameVMName(vm.Name, name),
		MACsTotal:  len(vm.NICs),
		DisksTotal: len(vm.Disks), DestDisks: len(tgt.disks)}
	for _, n := range vm.NICs {
		if n.MAC != "" && slices.Contains(tgt.macs, normalMAC(n.MAC)) {
			c.MACsMatched++
		}
	}
	// Each source disk takes the first unused destination disk of its
	// size, so that disks in the same order pair in order.
	c.pairs = map[int]int{}
	used := map[int]bool{}
	for i, sd := range vm.Disks {
		for j, dd := range tgt.disks {
			if !used[j] && sizeMatches(sd.CapacityBytes, dd.size) {
				c.pairs[i], used[j] = j, true
				c.DisksMatched++
				break
			}
		}
	}
	for i := range vm.Disks {
		if _, ok := c.pairs[i]; ok {
			continue
		}
		for j := range tgt.disks {
			if !used[j] {
				c.pairs[i], used[j] = j, true
				break
			}
		}
	}
	return c
}

// sizeMatches reports whether a destination disk of dest bytes holds a
// source disk of src bytes, as a DataVolume sized for it is: at least src,
// and the same once both are rounded up to a whole MiB.
func sizeMatches(src, dest int64) bool {
	return src > 0 && dest >= src && roundUpMiB(dest) == roundUpMiB(src)
}

// sameVMName compares a source display name with a Kubernetes name: equal
// ignoring case, or once the characters a Kubernetes name cannot hold are
// turned into dashes ("Web 01" and "web-01").
func sameVMName(display, name string) bool {
	return strings.EqualFold(display, name) || dnsish(display) == dnsish(name)
}

func dnsish(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func normalMAC(mac string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(mac), "-", ":"))
}

// pickAdoptCandidate returns the single best acceptable candidate and the
// others that matched something, or an *AdoptError.
func pickAdoptCandidate(namespace, name string, hosts []string, cands []AdoptCandidate) (AdoptCandidate, []AdoptCandidate, error) {
	var relevant []AdoptCandidate
	for _, c := range cands {
		if c.signal() {
			relevant = append(relevant, c)
		}
	}
	slices.SortStableFunc(relevant, func(a, b AdoptCandidate) int {
		if a.Acceptable() != b.Acceptable() {
			if a.Acceptable() {
				return -1
			}
			return 1
		}
		ra, rb := a.rank(), b.rank()
		return -slices.Compare(ra[:], rb[:])
	})
	if len(relevant) == 0 || !relevant[0].Acceptable() {
		msg := fmt.Sprintf("VirtualMachine %s/%s has no migration record, and no VM on ESXi host(s) %s matches it well enough to adopt it: "+
			"a source must match by all its MAC addresses, or by name and the sizes of all its disks", namespace, name, strings.Join(hosts, ", "))
		if len(relevant) == 0 {
			msg += ". No VM matched by name or by any MAC address"
		}
		return AdoptCandidate{}, nil, &AdoptError{Namespace: namespace, Name: name, Reason: "NoMatch", Message: msg, Candidates: relevant}
	}
	best := relevant[0]
	if len(relevant) > 1 && relevant[1].Acceptable() && relevant[1].rank() == best.rank() {
		var tied []AdoptCandidate
		for _, c := range relevant {
			if c.Acceptable() && c.rank() == best.rank() {
				tied = append(tied, c)
			}
		}
		return AdoptCandidate{}, nil, &AdoptError{Namespace: namespace, Name: name, Reason: "Ambiguous",
			Message: fmt.Sprintf("VirtualMachine %s/%s has no migration record, and %d source VMs match it equally well, so which one it came from cannot be told. "+
				"Unregister or rename the copies that are not its source, then import again", namespace, name, len(tied)),
			Candidates: relevant}
	}
	return best, relevant[1:], nil
}

// labelAdopted labels the VirtualMachine and its DataVolumes as the
// migration's (a merge patch of the labels; nothing else changes).
func (e *Engine) labelAdopted(ctx context.Context, namespace, name string, tgt *adoptTarget) ([]string, error) {
	kc := e.deps.Kube
	var out []string
	label := func(kind string, obj client.Object, patch func(map[string]string) error) error {
		before := obj.GetLabels()
		want := maps.Clone(before)
		if want == nil {
			want = map[string]string{}
		}
		want[kube.LabelMigration] = name
		if _, ok := want[kube.LabelManagedBy]; !ok {
			// Only when no other tool claims the object.
			want[kube.LabelManagedBy] = kube.ManagedByValue
		}
		if maps.Equal(before, want) {
			return nil
		}
		if err := patch(want); err != nil {
			return err
		}
		out = append(out, kind+" "+namespace+"/"+obj.GetName())
		return nil
	}
	if err := label("VirtualMachine", tgt.vm, func(l map[string]string) error {
		return kc.PatchVirtualMachineLabels(ctx, tgt.vm, l)
	}); err != nil {
		return out, err
	}
	for _, d := range tgt.disks {
		if d.dv == nil {
			continue
		}
		if err := label("DataVolume", d.dv, func(l map[string]string) error {
			return kc.PatchDataVolumeLabels(ctx, d.dv, l)
		}); err != nil {
			return out, err
		}
	}
	return out, nil
}

// adoptedRecord is the Completed record of an adopted VirtualMachine.
func (e *Engine) adoptedRecord(namespace, name string, tgt *adoptTarget, c AdoptCandidate, rep *AdoptReport) record.Record {
	now := e.now()
	vm := c.vm
	rec := record.Record{
		Version: record.RecordVersion,
		Identity: record.Identity{Host: c.Host, VMID: vm.VMID, VMName: vm.Name, VMXPath: vm.VMXPath,
			Namespace: namespace, Name: name},
		Phase:      record.PhaseCompleted,
		Source:     sourceInventoryOf(vm),
		DiskDigest: record.DigestTree1MiB,
	}
	for i, sd := range vm.Disks {
		j, ok := c.pairs[i]
		if !ok {
			rep.Notes = append(rep.Notes, fmt.Sprintf("source disk %s (%d bytes) has no disk on the VirtualMachine and is not recorded", sd.Device, sd.CapacityBytes))
			continue
		}
		dd := tgt.disks[j]
		ev := record.DiskEvidence{Index: i, Device: sd.Device, SourcePath: sd.DataPath, SizeBytes: sd.CapacityBytes,
			DataVolume: dd.claim, Imported: true}
		if dd.dv != nil {
			ev.DataVolumeUID, ev.DataVolumePhase, ev.Progress = string(dd.dv.UID), string(dd.dv.Status.Phase), string(dd.dv.Status.Progress)
		}
		if !sizeMatches(sd.CapacityBytes, dd.size) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("source disk %s (%d bytes) is recorded as %s, which holds %d bytes", sd.Device, sd.CapacityBytes, dd.claim, dd.size))
		}
		rec.Disks = append(rec.Disks, ev)
	}
	if len(tgt.disks) > len(vm.Disks) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the VirtualMachine has %d disk(s) and the source %d: the extra ones are not recorded", len(tgt.disks), len(vm.Disks)))
	}
	rep.Notes = append(rep.Notes, "the disks' checksums are unknown (they were not copied by this provider), so source_sha256 and artifact_sha256 are empty")
	if vm.PowerState != esxi.PoweredOff {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the source VM is %s: if the VirtualMachine runs too, two servers with the same MAC addresses may be on the network", vm.PowerState))
	}
	rec.VM = &record.VMEvidence{Name: name, UID: string(tgt.vm.UID), RunStrategy: runStrategyOf(tgt.vm)}
	if tgt.vmi != nil {
		rec.VM.VMIPhase = string(tgt.vmi.Status.Phase)
	}
	stamp(&rec.Timestamps.Created, now)
	stamp(&rec.Timestamps.Completed, now)
	if ct := tgt.vm.CreationTimestamp; !ct.IsZero() {
		t := ct.UTC()
		rec.Timestamps.VMCreated = &t
	}
	msg := "adopted: " + c.Matched()
	rec.SetCondition(now, CondAdopted, true, "MatchedSource",
		fmt.Sprintf("%s; VirtualMachine %s/%s was migrated by other means from VM %q (vmid %d) on host %s", msg, namespace, name, vm.Name, vm.VMID, c.Host))
	rec.SetCondition(now, record.CondSourceDiscovered, true, "Adopted",
		fmt.Sprintf("VM %q (vmid %d, %d disk(s), %d NIC(s)) on host %s", vm.Name, vm.VMID, len(vm.Disks), len(vm.NICs), c.Host))
	rec.SetCondition(now, record.CondDiskImported, true, "Adopted", fmt.Sprintf("%d disk(s) found on the VirtualMachine; checksums unknown", len(rec.Disks)))
	rec.SetCondition(now, record.CondVMCreated, true, "Adopted", "VirtualMachine "+name+" existed before the migration was recorded")
	rec.SetCondition(now, record.CondReady, true, "Adopted", msg)
	return rec
}
