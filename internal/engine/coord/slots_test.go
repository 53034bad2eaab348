package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

const slotHost, slotHostID = "esx1", "hostkey:SHA256:slots"

// holders plays the copy Jobs behind the slots: each is active unless
// marked finished, or its state cannot be read.
type holders struct {
	mu       sync.Mutex
	finished map[SlotHolder]bool
	failing  map[SlotHolder]error
	asked    []SlotHeld
}

func newHolders() *holders {
	return &holders{finished: map[SlotHolder]bool{}, failing: map[SlotHolder]error{}}
}

func (h *holders) active(_ context.Context, s SlotHeld) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, s)
	if err := h.failing[s.Holder]; err != nil {
		return false, err
	}
	return !h.finished[s.Holder], nil
}

func (h *holders) finish(x SlotHolder) { h.mu.Lock(); h.finished[x] = true; h.mu.Unlock() }

func (h *holders) fail(x SlotHolder, err error) { h.mu.Lock(); h.failing[x] = err; h.mu.Unlock() }

// slotLeases lists the slot Leases of the test host.
func slotLeases(t *testing.T, c *kube.Client, ns string) []coordinationv1.Lease {
	t.Helper()
	items, err := c.ListLeases(context.Background(), ns, map[string]string{labelClaimKind: slotKindValue, LabelSlotHost: slotHostKey(slotHostID)})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// slotNamespace is newNamespace under a name of its own on every run
// of the test.
func slotNamespace(t *testing.T, base string) (*kube.Client, string) {
	t.Helper()
	return newNamespace(t, fmt.Sprintf("%s-%d", base, slotRuns.Add(1)))
}

var slotRuns atomic.Int32

func job(ns, name string) SlotHolder { return SlotHolder{Namespace: ns, Job: name} }

// wantFull fails unless err is a *SlotsFullError naming exactly the
// holders want, in slot order.
func wantFull(t *testing.T, what string, err error, want ...SlotHolder) *SlotsFullError {
	t.Helper()
	var full *SlotsFullError
	if !errors.As(err, &full) {
		t.Fatalf("%s: %v, want the slots full", what, err)
	}
	var got []SlotHolder
	for _, s := range full.Held {
		got = append(got, s.Holder)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: full, held by %v, want %v", what, got, want)
	}
	if c, _ := fault.Of(err); c != fault.Transient {
		t.Errorf("%s: class %v, want transient (wait and retry)", what, c)
	}
	return full
}

// Limit 1: the second holder waits, naming the first, until the first
// releases. The slot is a Lease kubectl users can read.
func TestHostSlotsWaitForRelease(t *testing.T) {
	ctx := t.Context()
	c, other := slotNamespace(t, "coord-slots-jobs")
	clk := newClock()
	// The slot namespace does not exist yet: Acquire creates it.
	hs := HostSlots{Kube: c, Namespace: other + "-system", Limit: 1, Now: clk.Now}
	a, b := job(other, "disk-a-copy-1"), job(other, "disk-b-copy-1")

	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, a); err != nil || slot != 0 {
		t.Fatalf("first Acquire = %d, %v; want slot 0", slot, err)
	}
	l, err := c.GetLease(ctx, hs.Namespace, HostSlotName(slotHostID, 0))
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != a.String() || l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(clk.Now()) {
		t.Errorf("slot Lease spec = %+v, want held by %s since %s", l.Spec, a, clk.Now())
	}
	for k, v := range map[string]string{LabelClaimNamespace: other, LabelSlotJob: a.Job, LabelSlot: "0", labelClaimKind: slotKindValue,
		LabelSlotHost: slotHostKey(slotHostID), kube.LabelManagedBy: kube.ManagedByValue} {
		if l.Labels[k] != v {
			t.Errorf("slot Lease label %s = %q, want %q", k, l.Labels[k], v)
		}
	}
	if l.Annotations[AnnotationSlotHost] != slotHost || l.Annotations[AnnotationSlotHostID] != slotHostID {
		t.Errorf("slot Lease annotations = %v, want the host's name and identity", l.Annotations)
	}

	_, err = hs.Acquire(ctx, slotHost, slotHostID, b)
	full := wantFull(t, "Acquire by a second holder", err, a)
	if msg := err.Error(); !strings.Contains(msg, a.String()) || !strings.Contains(msg, slotHost) {
		t.Errorf("full error %q does not name the holder and the host", msg)
	}
	if full.Limit != 1 || full.Host != slotHost || !full.Held[0].Since.Equal(clk.Now()) {
		t.Errorf("full error = %+v, want limit 1 on %s since %s", full, slotHost, clk.Now())
	}

	if released, err := hs.Release(ctx, slotHostID, b); err != nil || released {
		t.Fatalf("Release by a holder of nothing = %v, %v; want nothing released", released, err)
	}
	if released, err := hs.Release(ctx, slotHostID, a); err != nil || !released {
		t.Fatalf("Release = %v, %v; want released", released, err)
	}
	if released, err := hs.Release(ctx, slotHostID, a); err != nil || released {
		t.Fatalf("second Release = %v, %v; want nothing released", released, err)
	}
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, b); err != nil || slot != 0 {
		t.Fatalf("Acquire after Release = %d, %v; want slot 0", slot, err)
	}
	// Another host's slots are its own.
	if slot, err := hs.Acquire(ctx, "esx2", "hostkey:SHA256:other", a); err != nil || slot != 0 {
		t.Fatalf("Acquire on another host = %d, %v; want its slot 0", slot, err)
	}
}

// A holder that re-enters (a runner restarted) gets its slot back and
// creates nothing.
func TestHostSlotsAcquireIsIdempotent(t *testing.T) {
	ctx := t.Context()
	c, ns := slotNamespace(t, "coord-slots-idem")
	hs := HostSlots{Kube: c, Namespace: ns, Limit: 2, Now: newClock().Now}
	a, b := job(ns, "a-copy-1"), job(ns, "b-copy-1")
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, a); err != nil || slot != 0 {
		t.Fatalf("Acquire = %d, %v; want 0", slot, err)
	}
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, b); err != nil || slot != 1 {
		t.Fatalf("Acquire by b = %d, %v; want 1", slot, err)
	}
	before := slotLeases(t, c, ns)
	for range 3 {
		if slot, err := hs.Acquire(ctx, slotHost, slotHostID, a); err != nil || slot != 0 {
			t.Fatalf("Acquire again = %d, %v; want 0", slot, err)
		}
	}
	// With the slots full, the holder still gets its own.
	hs.Limit = 1
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, b); err != nil || slot != 1 {
		t.Fatalf("Acquire again above the limit = %d, %v; want 1", slot, err)
	}
	after := slotLeases(t, c, ns)
	if len(after) != len(before) {
		t.Fatalf("%d slot Leases after re-entering, want %d", len(after), len(before))
	}
	for i := range after {
		if after[i].UID != before[i].UID || after[i].ResourceVersion != before[i].ResourceVersion {
			t.Errorf("Lease %s changed: uid %s rv %s, was %s %s", after[i].Name, after[i].UID, after[i].ResourceVersion, before[i].UID, before[i].ResourceVersion)
		}
	}
}

// Eight runners racing for two slots: two at a time hold one, never more,
// and each gets its turn.
func TestHostSlotsRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, ns := slotNamespace(t, "coord-slots-race")
	const n, limit = 8, 2
	hs := HostSlots{Kube: c, Namespace: ns, Limit: limit, Now: newClock().Now}

	// All at once: exactly two win.
	errs := acquireAtOnce(ctx, hs, ns, n, func(i int) string { return fmt.Sprintf("r%d-copy-1", i) })
	won := map[int]bool{}
	for i, err := range errs {
		var full *SlotsFullError
		switch {
		case err == nil:
			won[i] = true
		case !errors.As(err, &full):
			t.Errorf("runner %d: %v, want a slot or the slots full", i, err)
		}
	}
	if got := len(slotLeases(t, c, ns)); len(won) != limit || got != limit {
		t.Fatalf("%d runners won, %d Leases; want %d", len(won), got, limit)
	}

	// Then each in turn: hold, check, release; the others retry.
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := job(ns, fmt.Sprintf("r%d-copy-1", i))
			for !won[i] {
				_, err := hs.Acquire(ctx, slotHost, slotHostID, h)
				if err == nil {
					break
				}
				var full *SlotsFullError
				if !errors.As(err, &full) {
					t.Errorf("runner %d: %v", i, err)
					return
				}
				if retry.Sleep(ctx, 20*time.Millisecond) != nil {
					t.Errorf("runner %d never got a slot", i)
					return
				}
			}
			now := holding.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			if got, err := c.ListLeases(ctx, ns, map[string]string{LabelSlotHost: slotHostKey(slotHostID)}); err != nil || len(got) > limit {
				t.Errorf("%d slot Leases (%v) while runner %d holds one, want at most %d", len(got), err, i, limit)
			}
			_ = retry.Sleep(ctx, 50*time.Millisecond)
			holding.Add(-1)
			if released, err := hs.Release(ctx, slotHostID, h); err != nil || !released {
				t.Errorf("runner %d: Release = %v, %v", i, released, err)
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > limit || m < 1 {
		t.Errorf("at most %d runners held a slot at once, want 1..%d", m, limit)
	}
	if got := len(slotLeases(t, c, ns)); got != 0 {
		t.Errorf("%d slot Leases after every runner released, want 0", got)
	}
}

// A slot whose holder finished is reclaimed; one whose holder runs, or
// whose holder's state cannot be read, is not. The finished holder's
// late Release leaves the new holder's slot alone.
func TestHostSlotsReclaimStale(t *testing.T) {
	ctx := t.Context()
	c, ns := slotNamespace(t, "coord-slots-stale")
	clk := newClock()
	jobs := newHolders()
	hs := HostSlots{Kube: c, Namespace: ns, Limit: 1, Active: jobs.active, Now: clk.Now}
	a, b := job(ns, "a-copy-1"), job(ns, "b-copy-1")
	if _, err := hs.Acquire(ctx, slotHost, slotHostID, a); err != nil {
		t.Fatal(err)
	}
	held := slotLeases(t, c, ns)

	_, err := hs.Acquire(ctx, slotHost, slotHostID, b)
	wantFull(t, "Acquire with an active holder", err, a)
	if len(jobs.asked) != 1 || jobs.asked[0].Holder != a || !jobs.asked[0].Since.Equal(clk.Now()) {
		t.Errorf("Active was asked %+v, want once about %s taken at %s", jobs.asked, a, clk.Now())
	}

	jobs.fail(a, errors.New("jobs.batch is forbidden"))
	_, err = hs.Acquire(ctx, slotHost, slotHostID, b)
	full := wantFull(t, "Acquire with a holder whose state cannot be read", err, a)
	if full.Held[0].Unknown == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("full error %q does not say why the holder's state is unknown", err)
	}
	jobs.finish(a)
	_, err = hs.Acquire(ctx, slotHost, slotHostID, b)
	wantFull(t, "Acquire with a finished holder whose state cannot be read", err, a)
	if now := slotLeases(t, c, ns); len(now) != 1 || now[0].UID != held[0].UID || now[0].ResourceVersion != held[0].ResourceVersion {
		t.Fatalf("the slot changed while its holder's state could not be read")
	}

	jobs.fail(a, nil)
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, b); err != nil || slot != 0 {
		t.Fatalf("Acquire with a finished holder = %d, %v; want its slot 0", slot, err)
	}
	if released, err := hs.Release(ctx, slotHostID, a); err != nil || released {
		t.Fatalf("Release by the finished holder = %v, %v; want nothing released", released, err)
	}
	now := slotLeases(t, c, ns)
	if len(now) != 1 || *now[0].Spec.HolderIdentity != b.String() {
		t.Fatalf("slot Leases after reclaim = %d, want one held by %s", len(now), b)
	}

	// A slot Lease that names no holder (edited by hand) is free.
	now[0].Labels[LabelSlotJob] = ""
	if err := c.UpdateLease(ctx, &now[0]); err != nil {
		t.Fatal(err)
	}
	if slot, err := hs.Acquire(ctx, slotHost, slotHostID, a); err != nil || slot != 0 {
		t.Fatalf("Acquire of a slot that names no holder = %d, %v; want 0", slot, err)
	}
}

// Runners racing for the same stale slot: one wins, each time.
func TestHostSlotsReclaimRace(t *testing.T) {
	ctx := t.Context()
	c, ns := slotNamespace(t, "coord-slots-reclaim")
	jobs := newHolders()
	hs := HostSlots{Kube: c, Namespace: ns, Limit: 1, Active: jobs.active, Now: newClock().Now}
	stale := job(ns, "dead-copy-1")
	if _, err := hs.Acquire(ctx, slotHost, slotHostID, stale); err != nil {
		t.Fatal(err)
	}
	const n = 6
	for round := range 4 {
		jobs.finish(stale)
		errs := acquireAtOnce(ctx, hs, ns, n, func(i int) string { return fmt.Sprintf("r%d-%d-copy-1", round, i) })
		winner := -1
		for i, err := range errs {
			var full *SlotsFullError
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: runners %d and %d both took the stale slot", round, winner, i)
			case err == nil:
				winner = i
			case !errors.As(err, &full):
				t.Errorf("round %d: runner %d: %v, want the slots full", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody took the stale slot: %v", round, errs)
		}
		stale = job(ns, fmt.Sprintf("r%d-%d-copy-1", round, winner))
		if now := slotLeases(t, c, ns); len(now) != 1 || *now[0].Spec.HolderIdentity != stale.String() {
			t.Fatalf("round %d: %d slot Leases, want one held by the winner %s", round, len(now), stale)
		}
		for i, err := range errs {
			if i != winner {
				wantFull(t, fmt.Sprintf("round %d: runner %d", round, i), err, stale)
			}
		}
	}
}

// A lowered limit: slots numbered above it stay counted, and nobody takes
// one until fewer than the limit are held.
func TestHostSlotsLimitLowered(t *testing.T) {
	ctx := t.Context()
	c, ns := slotNamespace(t, "coord-slots-lowered")
	clk := newClock()
	three := HostSlots{Kube: c, Namespace: ns, Limit: 3, Active: newHolders().active, Now: clk.Now}
	a, b, x, d, e := job(ns, "a-copy-1"), job(ns, "b-copy-1"), job(ns, "x-copy-1"), job(ns, "d-copy-1"), job(ns, "e-copy-1")
	for i, h := range []SlotHolder{a, b, x} {
		if slot, err := three.Acquire(ctx, slotHost, slotHostID, h); err != nil || slot != i {
			t.Fatalf("Acquire under limit 3 = %d, %v; want %d", slot, err, i)
		}
	}
	two := three
	two.Limit = 2
	_, err := two.Acquire(ctx, slotHost, slotHostID, d)
	wantFull(t, "Acquire with 3 held under limit 2", err, a, b, x)
	if !strings.Contains(err.Error(), "more than its limit of 2") {
		t.Errorf("full error %q does not say more are held than the limit", err)
	}
	if _, err := two.Release(ctx, slotHostID, a); err != nil {
		t.Fatal(err)
	}
	_, err = two.Acquire(ctx, slotHost, slotHostID, d)
	wantFull(t, "Acquire with 2 held under limit 2", err, b, x)
	if _, err := two.Release(ctx, slotHostID, b); err != nil {
		t.Fatal(err)
	}
	if slot, err := two.Acquire(ctx, slotHost, slotHostID, d); err != nil || slot != 0 {
		t.Fatalf("Acquire with 1 held under limit 2 = %d, %v; want 0", slot, err)
	}
	_, err = two.Acquire(ctx, slotHost, slotHostID, e)
	wantFull(t, "Acquire with slots 0 and 2 held under limit 2", err, d, x)
	if _, err := two.Release(ctx, slotHostID, x); err != nil {
		t.Fatal(err)
	}
	if slot, err := two.Acquire(ctx, slotHost, slotHostID, e); err != nil || slot != 1 {
		t.Fatalf("Acquire after the slot above the limit was released = %d, %v; want 1", slot, err)
	}
	if held, err := two.Held(ctx, slotHostID); err != nil || len(held) != 2 || held[0].Holder != d || held[1].Holder != e {
		t.Fatalf("Held = %+v, %v; want d and e", held, err)
	}
}

// A lowered limit with a slot above it held, and runners racing for the
// room below it: the runners that count after taking one give it back
// when too many are held, so never more than the limit stay.
func TestHostSlotsLimitLoweredRace(t *testing.T) {
	ctx := t.Context()
	c, ns := slotNamespace(t, "coord-slots-lowered-race")
	clk := newClock()
	three := HostSlots{Kube: c, Namespace: ns, Limit: 3, Now: clk.Now}
	for _, h := range []string{"a", "b", "x"} {
		if _, err := three.Acquire(ctx, slotHost, slotHostID, job(ns, h+"-copy-1")); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []string{"a", "b"} {
		if _, err := three.Release(ctx, slotHostID, job(ns, h+"-copy-1")); err != nil {
			t.Fatal(err)
		}
	}
	two := three
	two.Limit = 2
	for round := range 4 {
		const n = 8
		errs := acquireAtOnce(ctx, two, ns, n, func(i int) string { return fmt.Sprintf("r%d-%d-copy-1", round, i) })
		var won []SlotHolder
		for i, err := range errs {
			var full *SlotsFullError
			switch {
			case err == nil:
				won = append(won, job(ns, fmt.Sprintf("r%d-%d-copy-1", round, i)))
			case !errors.As(err, &full):
				t.Errorf("round %d: runner %d: %v, want a slot or the slots full", round, i, err)
			}
		}
		leases := slotLeases(t, c, ns)
		if len(won) > 1 || len(leases) != len(won)+1 {
			t.Fatalf("round %d: %d runners won, %d slot Leases; want at most 1 winner beside the slot above the limit", round, len(won), len(leases))
		}
		for _, h := range won {
			if _, err := two.Release(ctx, slotHostID, h); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Without access to Leases, the slots stop the copy saying which
// permission is missing.
func TestHostSlotsForbidden(t *testing.T) {
	ctx := t.Context()
	_, ns := slotNamespace(t, "coord-slots-forbidden")
	cfg, err := cluster.Get(t).UserConfig("nobody")
	if err != nil {
		t.Fatal(err)
	}
	hs := HostSlots{Kube: kube.NewForRESTConfig(cfg), Namespace: ns, Limit: 1}
	_, aerr := hs.Acquire(ctx, slotHost, slotHostID, job(ns, "a-copy-1"))
	_, rerr := hs.Release(ctx, slotHostID, job(ns, "a-copy-1"))
	for what, err := range map[string]error{"Acquire": aerr, "Release": rerr} {
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Class != fault.NeedsHuman || fe.Reason != "HostSlotsUnavailable" ||
			!strings.Contains(fe.Action, "Leases") || !strings.Contains(fe.Action, ns) {
			t.Errorf("%s as an unprivileged user: %#v, want a stop asking for access to Leases in %s", what, err, ns)
		}
	}
}

func TestHostSlotName(t *testing.T) {
	a := HostSlotName("hostkey:x", 0)
	for _, other := range []string{HostSlotName("hostkey:y", 0), HostSlotName("hostkey:x", 1)} {
		if a == other {
			t.Errorf("HostSlotName gives %q to two slots", a)
		}
	}
	if a != HostSlotName("hostkey:x", 0) {
		t.Errorf("HostSlotName is not deterministic")
	}
	for _, slot := range []int{0, 1<<63 - 1} {
		if msgs := validation.IsDNS1123Label(HostSlotName("hostkey:x", slot)); len(msgs) > 0 {
			t.Errorf("HostSlotName(slot %d) = %q: %v", slot, HostSlotName("hostkey:x", slot), msgs)
		}
	}
	if msgs := validation.IsValidLabelValue(slotHostKey("hostkey:SHA256:abc/+=")); len(msgs) > 0 {
		t.Errorf("slotHostKey is not a label value: %v", msgs)
	}
}

// acquireAtOnce has n holders (Jobs named by name(i) in ns) ask hs for a
// slot at the same moment and returns each one's error.
func acquireAtOnce(ctx context.Context, hs HostSlots, ns string, n int, name func(int) string) []error {
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = hs.Acquire(ctx, slotHost, slotHostID, job(ns, name(i)))
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// Waiters of one process share a board: of the disks waiting for a full
// host, one asks the cluster (lists the Leases, asks whether each holder
// still runs) and the others are told the same until FreshFor passes or
// the process releases a slot of the host. A slot another runner frees is
// seen once FreshFor has passed; a waiter that holds a slot always asks.
func TestHostSlotsBoardSharesFull(t *testing.T) {
	ctx := t.Context()
	c, other := slotNamespace(t, "coord-slots-board")
	clk, boardClk := newClock(), newClock()
	h := newHolders()
	board := &SlotBoard{FreshFor: 2 * time.Second, now: boardClk.Now}
	ours := HostSlots{Kube: c, Namespace: other + "-system", Limit: 1, Now: clk.Now, Active: h.active, Board: board}
	theirs := ours
	theirs.Board = nil // another runner
	a, b, x := job(other, "disk-a-copy-1"), job(other, "disk-b-copy-1"), job(other, "disk-x-copy-1")
	asked := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.asked) }

	if _, err := theirs.Acquire(ctx, slotHost, slotHostID, x); err != nil {
		t.Fatal(err)
	}
	_, err := ours.Acquire(ctx, slotHost, slotHostID, a)
	wantFull(t, "first waiter", err, x)
	if n := asked(); n != 1 {
		t.Fatalf("the first waiter asked about %d holders, want 1", n)
	}
	for range 5 {
		_, err = ours.Acquire(ctx, slotHost, slotHostID, b)
		wantFull(t, "other waiters of the process", err, x)
	}
	if n := asked(); n != 1 {
		t.Fatalf("other waiters asked about holders %d times more, want 0: the board answers them", n-1)
	}
	// The holder itself always asks, and keeps its slot.
	if slot, err := theirs.Acquire(ctx, slotHost, slotHostID, x); err != nil || slot != 0 {
		t.Fatalf("the holder's Acquire = %d, %v; want its slot 0", slot, err)
	}
	withBoard := ours
	if slot, err := withBoard.Acquire(ctx, slotHost, slotHostID, x); err != nil || slot != 0 {
		t.Fatalf("the holder's Acquire through the board = %d, %v; want its slot 0", slot, err)
	}

	// Freed by the other runner: seen once FreshFor has passed.
	if released, err := theirs.Release(ctx, slotHostID, x); err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	_, err = ours.Acquire(ctx, slotHost, slotHostID, a)
	wantFull(t, "a waiter before FreshFor passed", err, x)
	boardClk.add(2 * time.Second)
	if slot, err := ours.Acquire(ctx, slotHost, slotHostID, a); err != nil || slot != 0 {
		t.Fatalf("Acquire after FreshFor = %d, %v; want slot 0", slot, err)
	}

	// Full again; released by this process: the next waiter asks at once.
	_, err = ours.Acquire(ctx, slotHost, slotHostID, b)
	wantFull(t, "b behind a", err, a)
	if released, err := ours.Release(ctx, slotHostID, a); err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	if slot, err := ours.Acquire(ctx, slotHost, slotHostID, b); err != nil || slot != 0 {
		t.Fatalf("Acquire after this process released = %d, %v; want slot 0 at once", slot, err)
	}
}
