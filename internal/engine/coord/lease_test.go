package coord

import (
	"context"
	"errors"
	"testing"
	"time"
)

// One holder at a time: a live lease is refused to another holder, an
// expired one is taken over, and a released one is free.
func TestLease(t *testing.T) {
	ctx := t.Context()
	c, ns := newNamespace(t, "coord-lease")
	clk := newClock()
	a := Leases{Kube: c, Holder: "a", Duration: time.Hour, Now: clk.Now}
	b := Leases{Kube: c, Holder: "b", Duration: time.Hour, Now: clk.Now}

	la, _, err := a.Acquire(ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	var held *LeaseHeldError
	if _, _, err := b.Acquire(ctx, ns, "web"); !errors.As(err, &held) || held.Holder != "a" || !held.Expires.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("Acquire of a held lease: %v, want held by a for an hour", err)
	}
	// AcquireWaiting does not wait for a lease that outlasts its
	// context's deadline.
	waited := false
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, _, err := b.AcquireWaiting(dctx, ns, "web", func(*LeaseHeldError) { waited = true }); !errors.As(err, &held) || waited {
		t.Fatalf("AcquireWaiting of a live lease: %v (waited %v), want LeaseHeldError without waiting", err, waited)
	}
	la.Release()

	lb, _, err := b.Acquire(ctx, ns, "web")
	if err != nil {
		t.Fatalf("Acquire of a released lease: %v", err)
	}
	// Not released, but expired: a takes it over, and b's renewal finds
	// it lost.
	clk.add(2 * time.Hour)
	la, _, err = a.Acquire(ctx, ns, "web")
	if err != nil {
		t.Fatalf("Acquire of an expired lease: %v", err)
	}
	defer la.Release()
	if err := lb.renewOnce(); !isLostLease(err) {
		t.Errorf("renewal of a lease taken over: %v, want a lost lease", err)
	}
	lb.Release()
}

func TestGiveUp(t *testing.T) {
	if got := giveUp(45 * time.Second); got != 37500*time.Millisecond {
		t.Errorf("giveUp(45s) = %v, want 37.5s", got)
	}
}
