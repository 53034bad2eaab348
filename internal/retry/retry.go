// Package retry is the one context-aware backoff helper of the provider:
// every wait-and-try-again loop goes through it, so cancellation, timeouts
// and backoff behave the same everywhere.
package retry

import (
	"context"
	"time"
)

// Policy bounds a retry loop.
type Policy struct {
	// Attempts is the total number of tries (at least 1).
	Attempts int
	// Initial is the wait after the first failure; it doubles each time up
	// to Max.
	Initial, Max time.Duration
}

// Backoff returns the wait after the n-th failure (n starting at 1).
func (p Policy) Backoff(n int) time.Duration {
	d := p.Initial
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// Do calls fn until it succeeds, returns an error retryable rejects, the
// attempts run out, or ctx ends. It returns fn's last error (or ctx's).
func Do(ctx context.Context, p Policy, retryable func(error) bool, fn func(context.Context) error) error {
	attempts := max(p.Attempts, 1)
	var err error
	for n := 1; ; n++ {
		if err = fn(ctx); err == nil || !retryable(err) || n >= attempts {
			return err
		}
		if werr := Sleep(ctx, p.Backoff(n)); werr != nil {
			return err
		}
	}
}

// Sleep waits for d or until ctx ends, returning ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error { return SleepOr(ctx, d, nil) }

// SleepOr is Sleep that also ends, early and without error, when wake is
// signalled (a nil wake never is).
func SleepOr(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-wake:
	}
	return nil
}
