package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errTransient = errors.New("transient")

func TestBackoff(t *testing.T) {
	p := Policy{Initial: time.Second, Max: 5 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 9: 5 * time.Second} {
		if got := p.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestDo(t *testing.T) {
	isT := func(err error) bool { return errors.Is(err, errTransient) }
	tests := []struct {
		name      string
		failures  []error
		attempts  int
		wantCalls int
		wantErr   error
	}{
		{"first try", nil, 3, 1, nil},
		{"recovers", []error{errTransient, errTransient}, 3, 3, nil},
		{"budget exhausted", []error{errTransient, errTransient, errTransient}, 3, 3, errTransient},
		{"not retryable", []error{errors.ErrUnsupported}, 3, 1, errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Do(context.Background(), Policy{Attempts: tt.attempts, Initial: time.Millisecond}, isT, func(context.Context) error {
				calls++
				if calls <= len(tt.failures) {
					return tt.failures[calls-1]
				}
				return nil
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("calls=%d err=%v, want calls=%d err=%v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
}

func TestDoStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Do(ctx, Policy{Attempts: 10, Initial: time.Hour}, func(error) bool { return true }, func(context.Context) error {
		calls++
		cancel()
		return errTransient
	})
	if calls != 1 || !errors.Is(err, errTransient) {
		t.Errorf("calls=%d err=%v, want one call and the last error", calls, err)
	}
}

// SleepOr ends without error when woken, and with the context's error
// when the context ends first; a nil wake never ends it.
func TestSleepOr(t *testing.T) {
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if err := SleepOr(context.Background(), time.Hour, wake); err != nil {
		t.Fatalf("woken: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := SleepOr(ctx, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: got %v", err)
	}
	if err := SleepOr(context.Background(), time.Millisecond, nil); err != nil {
		t.Fatalf("timer: %v", err)
	}
}
