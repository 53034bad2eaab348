package coord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Host slots: how many disks are copied from one ESXi host at once.
//
// A provider's max_concurrent_migrations bounds what one ESXi host serves
// at a time. In cluster execution the copies are Jobs, and several runners
// (two Terraform workspaces, two CI jobs) may copy from one host, so the
// bound is kept in the cluster: a host has Limit slots, and a copy Job
// holds one while it runs. Slot i of a host is the Lease
// HostSlotName(host identity, i) in the claim namespace (the identity is
// the engine's hostIdentity, as for source claims, so one host under two
// names has one set of slots). Creating an object of a given name
// succeeds once, so two runners never hold one slot; the Lease's
// holderIdentity and labels name the holding Job, so that
//
//	kubectl get leases -n vmmigration-system -l vmmigration.io/kind=host-slot \
//	    -L vmmigration.io/namespace,vmmigration.io/job,vmmigration.io/slot
//
// shows who holds what (annotations vmmigration.io/host and
// vmmigration.io/host-id name the host). The Leases are not renewed and
// do not expire: a slot is held until its holder releases it, or until
// its holder is no longer active (its Job finished or gone, as the
// caller's Active tells) and another runner reclaims it.
//
// Every Lease of a host counts, whatever its number: when Limit is
// lowered, slots numbered Limit or more stay held until released, and no
// slot is taken while as many as Limit are held.
//
// Like the source claims, the slots live in the claim namespace, which is
// created when missing. The provider's credentials need get, list, create
// and delete on Leases (coordination.k8s.io) there.

// Conversion slots: the same mechanism bounds the conversion Jobs running
// in the cluster at once, across every runner (the provider's
// max_concurrent_conversions), as the slots of one pseudo-host whose
// identity is ConversionSlotsID and whose name is ConversionSlotsHost.
const (
	ConversionSlotsID   = "vmmigration.io/conversions"
	ConversionSlotsHost = "conversions"
)

// Labels and annotations of a host slot's Lease. LabelClaimNamespace and
// LabelSlotJob name its holder; labelClaimKind is slotKindValue.
const (
	// LabelSlotHost is a hash of the host's identity (the one in
	// HostSlotName), for selecting a host's slots.
	LabelSlotHost = "vmmigration.io/host-key"
	// LabelSlotJob is the holding copy Job's name.
	LabelSlotJob = "vmmigration.io/job"
	// LabelSlot is the slot's number.
	LabelSlot = "vmmigration.io/slot"
	// AnnotationSlotHost is the host's name in the configuration of the
	// runner that took the slot; AnnotationSlotHostID its identity.
	AnnotationSlotHost   = "vmmigration.io/host"
	AnnotationSlotHostID = "vmmigration.io/host-id"

	slotKindValue = "host-slot"
)

// slotAttempts bounds how often Acquire and Release look again when the
// slots change under them.
const slotAttempts = 5

// slotHostKey is the hash of a host's identity that names and labels its
// slots.
func slotHostKey(hostID string) string {
	h := sha256.Sum256([]byte(hostID))
	return hex.EncodeToString(h[:12])
}

// HostSlotName is the name of the Lease of slot number slot (from 0) of
// the ESXi host whose identity is hostID: within 63 characters for any
// slot an int can number.
func HostSlotName(hostID string, slot int) string {
	return "vmmigration-slot-" + slotHostKey(hostID) + "-" + strconv.Itoa(slot)
}

// SlotHolder is what holds a host slot: a copy Job.
type SlotHolder struct{ Namespace, Job string }

// String is the holder as the Lease's holderIdentity spells it.
func (h SlotHolder) String() string { return h.Namespace + "/" + h.Job }

// valid reports whether h names a namespace and a Job that can be label
// values.
func (h SlotHolder) valid() bool {
	return len(validation.IsDNS1123Label(h.Namespace)) == 0 && len(validation.IsDNS1123Label(h.Job)) == 0
}

func slotHolderOf(labels map[string]string) SlotHolder {
	return SlotHolder{Namespace: labels[LabelClaimNamespace], Job: labels[LabelSlotJob]}
}

// SlotHeld is one held slot of a host.
type SlotHeld struct {
	Slot   int
	Holder SlotHolder
	// Since is when it was taken.
	Since time.Time
	// Unknown, in a *SlotsFullError, says why whether the holder is still
	// active could not be told (it was then not reclaimed).
	Unknown error
}

// heldSlot is a SlotHeld with the Lease it was read from.
type heldSlot struct {
	SlotHeld
	lease *coordinationv1.Lease
}

// SlotsFullError says as many slots of a host as its limit are held, by
// others: the copy waits and asks again. It is Transient.
type SlotsFullError struct {
	// Host is the host's configured name, HostID its identity.
	Host, HostID string
	Limit        int
	// Held are the slots held, by number.
	Held []SlotHeld
}

func (e *SlotsFullError) Error() string {
	var b strings.Builder
	if e.HostID == ConversionSlotsID {
		fmt.Fprintf(&b, "all %d conversion slots of the cluster are held (max_concurrent_conversions)", e.Limit)
	} else if len(e.Held) > e.Limit {
		fmt.Fprintf(&b, "%d copies from ESXi host %s are running, more than its limit of %d", len(e.Held), e.Host, e.Limit)
	} else {
		fmt.Fprintf(&b, "all %d copy slots of ESXi host %s are held", e.Limit, e.Host)
	}
	for i, s := range e.Held {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%sslot %d by %s", sep, s.Slot, s.Holder)
		if !s.Since.IsZero() {
			fmt.Fprintf(&b, " since %s", s.Since.UTC().Format(time.RFC3339))
		}
		if s.Unknown != nil {
			fmt.Fprintf(&b, " (whether it still runs cannot be told: %v)", s.Unknown)
		}
	}
	if e.HostID == ConversionSlotsID {
		b.WriteString("; this conversion starts when one is released")
	} else {
		b.WriteString("; this copy starts when one is released")
	}
	return b.String()
}

// FaultClass is Transient: wait and ask again.
func (e *SlotsFullError) FaultClass() fault.Class { return fault.Transient }

// HostSlots hands out the slots of ESXi hosts, at most Limit held per host
// at once across every runner sharing the cluster.
type HostSlots struct {
	Kube *kube.Client
	// Namespace holds the slots (the claim namespace).
	Namespace string
	// Limit is how many slots of a host may be held at once.
	Limit int
	// Active tells whether the holder of a held slot still runs (its
	// Job exists and has not finished). Only a holder it says is not
	// active loses its slot to another; one it cannot tell about (an
	// error) keeps it. When nil, no slot is ever reclaimed.
	//
	// A runner that takes a slot before it creates its Job must not lose
	// it meanwhile: either it creates the Job suspended first, or Active
	// counts a Job not found as active for a while after the slot's
	// Since.
	Active func(ctx context.Context, held SlotHeld) (bool, error)
	// Now tells the time of acquisitions (time.Now when nil).
	Now func() time.Time
	// Board, when set, is shared by the waiters of one process: a host
	// one of them found full is not asked again by the others until the
	// board's FreshFor has passed or the process released one of the
	// host's slots (see SlotBoard).
	Board *SlotBoard
}

// SlotBoard is what the copies of one process last learned of each host's
// slots. While many disks wait for one host (a wave of 40 VMs behind a
// limit of 2), each would otherwise list the host's Leases and read every
// holder's Job on every poll; with a board, one of them asks per FreshFor
// and the others are told the same answer. Only "full" is remembered, and
// only for FreshFor: a slot released by another runner is seen at most
// FreshFor later, one released by this process at once. A waiter that
// holds one of the slots itself always asks. Safe for concurrent use.
type SlotBoard struct {
	// FreshFor is how long a host found full is believed full, on the
	// machine's clock (how often the cluster is asked, not a recorded
	// time).
	FreshFor time.Duration

	mu   sync.Mutex
	full map[string]boardFull
	now  func() time.Time // time.Now; tests set it
}

func (b *SlotBoard) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

type boardFull struct {
	at  time.Time
	err SlotsFullError
}

// lookFull is the host's full error seen less than FreshFor ago,
// unless holder is among its holders; nil when the host must be asked.
func (b *SlotBoard) lookFull(hostID string, holder SlotHolder) *SlotsFullError {
	if b == nil {
		return nil
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.full[hostID]
	if !ok || now.Sub(f.at) >= b.FreshFor || now.Before(f.at) {
		return nil
	}
	for _, h := range f.err.Held {
		if h.Holder == holder {
			return nil
		}
	}
	e := f.err
	e.Held = append([]SlotHeld(nil), f.err.Held...)
	return &e
}

// sawFull remembers that the host was found full now.
func (b *SlotBoard) sawFull(hostID string, err *SlotsFullError) {
	if b == nil || err == nil {
		return
	}
	now := b.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.full == nil {
		b.full = map[string]boardFull{}
	}
	e := *err
	e.Held = append([]SlotHeld(nil), err.Held...)
	b.full[hostID] = boardFull{at: now, err: e}
}

// freed forgets what was seen of the host: a slot of it was released.
func (b *SlotBoard) freed(hostID string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.full, hostID)
}

func (hs HostSlots) now() time.Time {
	if hs.Now == nil {
		return time.Now()
	}
	return hs.Now()
}

// Acquire gives holder a slot of the host whose configured name is host
// and whose identity is hostID, and returns its number. A holder that
// holds one already (a runner that re-enters after a crash) gets the same
// slot back. When as many as Limit are held by others, the slots of those
// that are no longer active are reclaimed; if none is, the error is a
// *SlotsFullError naming the holders.
//
// A transient error after the slot's Lease was created leaves it held:
// the next Acquire by the same holder returns it.
func (hs HostSlots) Acquire(ctx context.Context, host, hostID string, holder SlotHolder) (int, error) {
	if hs.Limit < 1 {
		return -1, fmt.Errorf("coord: host slots of %s: limit %d, want at least 1", host, hs.Limit)
	}
	if !holder.valid() {
		return -1, fmt.Errorf("coord: host slot holder %q: want a namespace and a Job name of at most 63 characters", holder)
	}
	if full := hs.Board.lookFull(hostID, holder); full != nil {
		return -1, full
	}
	for attempt := 0; attempt < slotAttempts; attempt++ {
		slots, err := hs.held(ctx, hostID, nil)
		if err != nil {
			return -1, err
		}
		for _, s := range slots {
			if s.Holder == holder {
				return s.Slot, nil
			}
		}
		if len(slots) >= hs.Limit {
			changed, full, err := hs.reclaim(ctx, host, hostID, slots)
			if err != nil {
				return -1, err
			}
			if !changed {
				hs.Board.sawFull(hostID, full)
				return -1, full
			}
			continue
		}
		slot, err := hs.take(ctx, host, hostID, holder, slots)
		var full *SlotsFullError
		if errors.As(err, &full) {
			hs.Board.sawFull(hostID, full)
		}
		if err != nil || slot >= 0 {
			return slot, err
		}
		// Every free slot was taken meanwhile: look again.
	}
	return -1, &fault.Error{Class: fault.Transient, Reason: "HostSlotsContended",
		Message: "the copy slots of ESXi host " + host + " kept changing while " + holder.String() + " tried to take one"}
}

// take creates the Lease of the lowest free slot below Limit, given the
// slots held. It returns -1 and no error when all were taken meanwhile.
//
// Two runners may each see fewer than Limit held and take one (when
// slots numbered Limit or more are held, there is room below Limit for
// both): so each counts again after taking one, and gives it back if
// more than Limit are held. Of such runners, whichever counts last sees
// all the others.
func (hs HostSlots) take(ctx context.Context, host, hostID string, holder SlotHolder, slots []heldSlot) (int, error) {
	taken := map[int]bool{}
	for _, s := range slots {
		taken[s.Slot] = true
	}
	for i := 0; i < hs.Limit; i++ {
		if taken[i] {
			continue
		}
		l, err := hs.create(ctx, host, hostID, holder, i)
		var other *kube.NotOwnedError
		switch {
		case errors.As(err, &other):
			continue
		case err != nil:
			return -1, err
		}
		now, err := hs.held(ctx, hostID, nil)
		if err != nil {
			return -1, err
		}
		if len(now) <= hs.Limit {
			return i, nil
		}
		if err := hs.Kube.DeleteLeaseIfUnchanged(ctx, l); err != nil && !kube.IsConflict(err) {
			return -1, slotError(hs.Namespace, "delete", "Lease "+l.Name, err)
		}
		others := now[:0]
		for _, s := range now {
			if s.Holder != holder {
				others = append(others, s)
			}
		}
		return -1, fullError(host, hostID, hs.Limit, others)
	}
	return -1, nil
}

// create creates slot's Lease for holder, creating the namespace when
// it is missing. A Lease found in the way that holder holds (a create
// whose reply was lost) is returned; one held by another is a
// *kube.NotOwnedError.
func (hs HostSlots) create(ctx context.Context, host, hostID string, holder SlotHolder, slot int) (*coordinationv1.Lease, error) {
	kc := hs.Kube
	name := HostSlotName(hostID, slot)
	id := holder.String()
	now := metav1.NewMicroTime(hs.now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: hs.Namespace, Name: name,
			Labels: map[string]string{kube.LabelManagedBy: kube.ManagedByValue, labelClaimKind: slotKindValue,
				LabelSlotHost: slotHostKey(hostID), LabelSlot: strconv.Itoa(slot),
				LabelClaimNamespace: holder.Namespace, LabelSlotJob: holder.Job},
			Annotations: map[string]string{AnnotationSlotHost: host, AnnotationSlotHostID: hostID}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, AcquireTime: &now},
	}
	holds := func(obj client.Object) (string, bool) {
		h := slotHolderOf(obj.GetLabels())
		return h.String(), h == holder
	}
	for ensured := false; ; ensured = true {
		got, _, err := kube.EnsureOwned(ctx, kc, l.DeepCopy(), kc.CreateLease, holds)
		var other *kube.NotOwnedError
		switch {
		case err == nil:
			return got, nil
		case errors.As(err, &other):
			return nil, err
		case kube.IsNotFound(err) && !ensured:
			// The namespace is missing.
			if err := ensureNamespace(ctx, kc, hs.Namespace, "HostSlotsUnavailable",
				"the slots that bound how many disks are copied from one ESXi host at once", "Leases"); err != nil {
				return nil, err
			}
			continue
		}
		return nil, slotError(hs.Namespace, "create", "Lease "+name, err)
	}
}

// reclaim deletes the Leases of the held slots whose holders are not
// active, and says whether any changed. Each delete holds only if the
// Lease is still the one read, so of two runners reclaiming one slot,
// one deletes it and the other finds it changed. When none changed, the
// error to return is full.
func (hs HostSlots) reclaim(ctx context.Context, host, hostID string, slots []heldSlot) (bool, *SlotsFullError, error) {
	changed := false
	for i := range slots {
		s := &slots[i]
		// A Lease that names no holder was edited by hand: nothing can
		// be running under it.
		stale := !s.Holder.valid()
		if !stale {
			if hs.Active == nil {
				continue
			}
			active, err := hs.Active(ctx, s.SlotHeld)
			if err != nil {
				if ctx.Err() != nil {
					return false, nil, ctx.Err()
				}
				s.Unknown = err
				continue
			}
			stale = !active
		}
		if !stale {
			continue
		}
		err := hs.Kube.DeleteLeaseIfUnchanged(ctx, s.lease)
		switch {
		case err == nil, kube.IsConflict(err):
			changed = true
		default:
			return false, nil, slotError(hs.Namespace, "delete", "Lease "+s.lease.Name, err)
		}
	}
	if changed {
		return true, nil, nil
	}
	return false, fullError(host, hostID, hs.Limit, slots), nil
}

func fullError(host, hostID string, limit int, slots []heldSlot) *SlotsFullError {
	e := &SlotsFullError{Host: host, HostID: hostID, Limit: limit}
	for _, s := range slots {
		e.Held = append(e.Held, s.SlotHeld)
	}
	return e
}

// Held returns the held slots of the host whose identity is hostID, by
// number.
func (hs HostSlots) Held(ctx context.Context, hostID string) ([]SlotHeld, error) {
	slots, err := hs.held(ctx, hostID, nil)
	if err != nil {
		return nil, err
	}
	out := make([]SlotHeld, len(slots))
	for i, s := range slots {
		out[i] = s.SlotHeld
	}
	return out, nil
}

// held lists the held slots of a host, by number, among the Leases that
// also carry the labels more. A Lease whose name is not the slot's its
// labels say is not a slot.
func (hs HostSlots) held(ctx context.Context, hostID string, more map[string]string) ([]heldSlot, error) {
	sel := map[string]string{labelClaimKind: slotKindValue, LabelSlotHost: slotHostKey(hostID)}
	for k, v := range more {
		sel[k] = v
	}
	items, err := hs.Kube.ListLeases(ctx, hs.Namespace, sel)
	switch {
	case kube.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, slotError(hs.Namespace, "list", "the Leases of host slots", err)
	}
	var out []heldSlot
	for i := range items {
		l := &items[i]
		n, err := strconv.Atoi(l.Labels[LabelSlot])
		if err != nil || n < 0 || l.Name != HostSlotName(hostID, n) {
			continue
		}
		s := heldSlot{SlotHeld: SlotHeld{Slot: n, Holder: slotHolderOf(l.Labels)}, lease: l}
		if l.Spec.AcquireTime != nil {
			s.Since = l.Spec.AcquireTime.Time
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out, nil
}

// Release gives up the slot holder holds of the host whose identity is
// hostID, and says whether it held one. A slot reclaimed by another
// meanwhile is not holder's any more and is left alone.
func (hs HostSlots) Release(ctx context.Context, hostID string, holder SlotHolder) (bool, error) {
	if !holder.valid() {
		return false, nil
	}
	// Whatever comes of it, what this process saw of the host is stale.
	defer hs.Board.freed(hostID)
	released := false
	for attempt := 0; attempt < slotAttempts; attempt++ {
		slots, err := hs.held(ctx, hostID, map[string]string{LabelClaimNamespace: holder.Namespace, LabelSlotJob: holder.Job})
		if err != nil {
			return released, err
		}
		again := false
		for _, s := range slots {
			if s.Holder != holder {
				continue
			}
			err := hs.Kube.DeleteLeaseIfUnchanged(ctx, s.lease)
			switch {
			case err == nil:
				released = true
			case kube.IsConflict(err):
				// Changed since read (relabelled, or reclaimed and
				// taken again): read it again.
				again = true
			default:
				return released, slotError(hs.Namespace, "delete", "Lease "+s.lease.Name, err)
			}
		}
		if !again {
			return released, nil
		}
	}
	return released, &fault.Error{Class: fault.Transient, Reason: "HostSlotsContended",
		Message: "the copy slot held by " + holder.String() + " kept changing while it was released"}
}

// slotError is err, from op on what (Leases in namespace ns), as a
// transient error, or as a stop that says which permission the provider
// lacks.
func slotError(ns, op, what string, err error) error {
	if kube.Classify(err) == kube.Transient {
		return err
	}
	cause := kube.Cause(err)
	return &fault.Error{Class: fault.NeedsHuman, Reason: "HostSlotsUnavailable",
		Message: fmt.Sprintf("cannot %s %s in namespace %s, which bound how many disks are copied from one ESXi host at once: %v", op, what, ns, cause),
		Action:  "grant the provider's credentials get, list, create and delete on Leases (coordination.k8s.io) in namespace " + ns + ", then run apply again",
		Err:     cause}
}
