package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// DefaultLeaseDuration is how long a Run's lease lasts without renewal.
const DefaultLeaseDuration = 45 * time.Second

// LeaseHeldError says another run is driving the migration.
type LeaseHeldError struct {
	Namespace, Name string
	// Holder is the other run's identity; Expires when its lease runs out
	// unless renewed.
	Holder  string
	Expires time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("migration %s/%s is being driven by another run (%s) holding Lease %s until %s; wait for it to finish, or if that process is gone, run apply again after the lease expires",
		e.Namespace, e.Name, e.Holder, RecordName(e.Name), e.Expires.UTC().Format(time.RFC3339))
}

// Leases hands out the Leases (named RecordName) that let one run at a
// time drive a migration.
type Leases struct {
	Kube *kube.Client
	// Holder names this process as the holder of the leases it takes.
	Holder string
	// Duration is how long a lease lasts without renewal.
	Duration time.Duration
	// Now tells the time of acquisitions, renewals and expiry.
	Now func() time.Time
}

// Lease is a held coordination.k8s.io Lease, renewed in the background
// until Release.
type Lease struct {
	leases Leases
	mu     sync.Mutex
	lease  *coordinationv1.Lease
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelCauseFunc
}

// Acquire takes the migration's Lease, or fails with a *LeaseHeldError
// when another live holder has it. The returned context is cancelled if
// the lease is lost.
func (ls Leases) Acquire(ctx context.Context, namespace, name string) (*Lease, context.Context, error) {
	kc := ls.Kube
	secs := int32(ls.Duration / time.Second)
	if secs < 1 {
		secs = 1
	}
	now := metav1.NewMicroTime(ls.Now())
	holder := ls.Holder
	l, err := kc.GetLease(ctx, namespace, RecordName(name))
	switch {
	case kube.IsNotFound(err):
		// Not kube.EnsureOwned: a Lease found in the way belongs to
		// whichever run holds it until it expires, and taking an expired
		// one over is an update that counts a transition. A create whose
		// reply was lost fails this attempt; the next one finds the Lease
		// held by this holder and takes it.
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RecordName(name), Labels: kube.MigrationLabels(name)},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now,
			},
		}
		if err := kc.CreateLease(ctx, l); err != nil {
			if kube.IsAlreadyExists(err) {
				return nil, nil, ls.heldError(ctx, namespace, name)
			}
			return nil, nil, err
		}
	case err != nil:
		return nil, nil, err
	default:
		if h, exp, live := ls.live(l); live && h != holder {
			return nil, nil, &LeaseHeldError{Namespace: namespace, Name: name, Holder: h, Expires: exp}
		}
		var trans int32
		if l.Spec.LeaseTransitions != nil {
			trans = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &holder, &secs
		l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseTransitions = &now, &now, &trans
		if err := kc.UpdateLease(ctx, l); err != nil {
			if kube.IsConflict(err) {
				return nil, nil, ls.heldError(ctx, namespace, name)
			}
			return nil, nil, err
		}
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	h := &Lease{leases: ls, lease: l, stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go h.renew()
	return h, runCtx, nil
}

// AcquireWaiting is Acquire for a run that may wait. A run that was killed
// (Terraform and its provider SIGKILLed, a machine lost) leaves its lease
// behind unreleased; it expires within one lease duration because nobody
// renews it. So when the lease is held, AcquireWaiting waits for it to
// expire once, if that happens before ctx's deadline, and tries again;
// waiting, if set, is told first. A holder that renewed it meanwhile is
// alive, and its LeaseHeldError is returned.
func (ls Leases) AcquireWaiting(ctx context.Context, namespace, name string, waiting func(*LeaseHeldError)) (*Lease, context.Context, error) {
	waited := ""
	for {
		l, runCtx, err := ls.Acquire(ctx, namespace, name)
		var held *LeaseHeldError
		if !errors.As(err, &held) || held.Holder == waited {
			return l, runCtx, err
		}
		wait := held.Expires.Sub(ls.Now()) + 250*time.Millisecond
		if wait > 2*ls.Duration {
			return nil, nil, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(dl) {
			return nil, nil, err
		}
		if waiting != nil {
			waiting(held)
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return nil, nil, err
		}
		waited = held.Holder
	}
}

// live reports the holder of l, when it expires, and whether it is
// unexpired.
func (ls Leases) live(l *coordinationv1.Lease) (string, time.Time, bool) {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return "", time.Time{}, false
	}
	d := DefaultLeaseDuration
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	exp := l.Spec.RenewTime.Add(d)
	return *l.Spec.HolderIdentity, exp, ls.Now().Before(exp)
}

func (ls Leases) heldError(ctx context.Context, namespace, name string) error {
	l, err := ls.Kube.GetLease(ctx, namespace, RecordName(name))
	if err != nil {
		// It was there a moment ago: whatever keeps it from being read
		// now is worth another try.
		return kube.AsTransient(err)
	}
	h, exp, _ := ls.live(l)
	return &LeaseHeldError{Namespace: namespace, Name: name, Holder: h, Expires: exp}
}

// renew renews the lease every third of its duration until Release. If a
// renewal finds someone else holding it, the run's context is cancelled.
// So it is when the lease could not be renewed for most of its duration
// (the API server unreachable): by then another run may see it expired
// and take over, so this one must stop acting first.
func (h *Lease) renew() {
	defer close(h.done)
	dur := h.leases.Duration
	t := time.NewTicker(max(dur/3, 100*time.Millisecond))
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		err := h.renewOnce()
		if err == nil {
			renewed = time.Now()
			continue
		}
		if kube.IsConflict(err) || isLostLease(err) {
			h.cancel(err)
			return
		}
		// A transient failure: try again at the next tick, unless the
		// lease is about to expire for everyone else.
		if since := time.Since(renewed); since >= giveUp(dur) {
			h.cancel(&lostLeaseError{expired: since, cause: err})
			return
		}
	}
}

// giveUp is how long a run goes on without renewing its lease: five
// sixths of its duration, so that it stops before any other run can see
// the lease expired.
func giveUp(dur time.Duration) time.Duration { return dur - dur/6 }

// lostLeaseError says the lease was taken over, or could not be renewed
// for so long that it may be.
type lostLeaseError struct {
	holder  string
	expired time.Duration
	cause   error
}

func (e *lostLeaseError) Error() string {
	if e.holder == "" {
		return fmt.Sprintf("the lease could not be renewed for %s (%v): it may expire for other runs, so this one stopped", e.expired.Round(time.Second), e.cause)
	}
	return fmt.Sprintf("the lease was taken over by %s", e.holder)
}

func isLostLease(err error) bool {
	_, ok := err.(*lostLeaseError)
	return ok
}

func (h *Lease) renewOnce() error {
	kc := h.leases.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.mu.Lock()
	l := h.lease.DeepCopy()
	h.mu.Unlock()
	// The API's own errors: lostLeaseError names its cause.
	cur, err := kc.GetLease(ctx, l.Namespace, l.Name)
	if err != nil {
		return kube.Cause(err)
	}
	if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != h.leases.Holder {
		holder := "nobody"
		if cur.Spec.HolderIdentity != nil {
			holder = *cur.Spec.HolderIdentity
		}
		return &lostLeaseError{holder: holder}
	}
	now := metav1.NewMicroTime(h.leases.Now())
	cur.Spec.RenewTime = &now
	if err := kc.UpdateLease(ctx, cur); err != nil {
		return kube.Cause(err)
	}
	h.mu.Lock()
	h.lease = cur
	h.mu.Unlock()
	return nil
}

// Release stops renewing and deletes the lease if it is still ours.
func (h *Lease) Release() {
	close(h.stop)
	<-h.done
	h.cancel(nil)
	kc := h.leases.Kube
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.mu.Lock()
	namespace, name := h.lease.Namespace, h.lease.Name
	h.mu.Unlock()
	cur, err := kc.GetLease(ctx, namespace, name)
	if err != nil {
		return
	}
	if cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != h.leases.Holder {
		return
	}
	_ = kc.DeleteLeaseIfUnchanged(ctx, cur)
}
