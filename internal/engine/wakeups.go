package engine

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// wakeups end a run's waits on cluster objects (its copy and conversion
// Jobs, its VirtualMachineInstance) as soon as one of them changes, rather
// than at the wait's next poll: a Job that completes during the cutover
// is acted on at once, not up to a poll interval later, and a wait with
// nothing to see costs no request. A change is a hint to look again,
// never evidence: the wait reads the object as before, and still polls
// every PollInterval at most, so a watch that fails or lags delays
// nothing beyond today's polls.
//
// One watch per kind and namespace (metadata only) serves every run of
// the process; it runs while some wait follows it and is opened again,
// with a backoff, when the API server ends it. Credentials without the
// watch verb leave the waits to their polls.
type wakeups struct {
	kc *kube.Client

	mu    sync.Mutex
	feeds map[feedKey]*feed
}

type feedKey struct {
	kind      kube.WatchKind
	namespace string
}

// feed is one watch and the waits that follow it.
type feed struct {
	followers map[*follower]struct{}
	stop      context.CancelFunc
}

// follower is one wait's interest: the names it waits on, and a channel
// signalled, without blocking, when one of them changes.
type follower struct {
	names map[string]bool
	c     chan struct{}
}

// follow makes c signalled whenever an object of kind named in names
// changes in namespace, until stop is called.
func (w *wakeups) follow(kind kube.WatchKind, namespace string, names ...string) (c <-chan struct{}, stop func()) {
	f := &follower{names: map[string]bool{}, c: make(chan struct{}, 1)}
	for _, n := range names {
		f.names[n] = true
	}
	key := feedKey{kind, namespace}
	w.mu.Lock()
	if w.feeds == nil {
		w.feeds = map[feedKey]*feed{}
	}
	fd := w.feeds[key]
	if fd == nil {
		ctx, cancel := context.WithCancel(context.Background())
		fd = &feed{followers: map[*follower]struct{}{}, stop: cancel}
		w.feeds[key] = fd
		go w.watch(ctx, key)
	}
	fd.followers[f] = struct{}{}
	w.mu.Unlock()
	return f.c, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(fd.followers, f)
		if len(fd.followers) == 0 && w.feeds[key] == fd {
			fd.stop()
			delete(w.feeds, key)
		}
	}
}

// rename replaces the names c's follower waits on (a wait whose objects
// change as it goes: a disk's Job of a new attempt).
func (w *wakeups) rename(c <-chan struct{}, kind kube.WatchKind, namespace string, names ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd := w.feeds[feedKey{kind, namespace}]
	if fd == nil {
		return
	}
	for f := range fd.followers {
		if f.c == c {
			clear(f.names)
			for _, n := range names {
				f.names[n] = true
			}
		}
	}
}

// changed signals the followers of key waiting on name.
func (w *wakeups) changed(key feedKey, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd := w.feeds[key]
	if fd == nil {
		return
	}
	for f := range fd.followers {
		if f.names[name] {
			select {
			case f.c <- struct{}{}:
			default:
			}
		}
	}
}

// Watch reopening: at once after the API server ends a watch normally
// (its timeout), with a growing pause after a failure.
const (
	watchRetryMin = time.Second
	watchRetryMax = 30 * time.Second
)

// watch runs key's watch until ctx ends.
func (w *wakeups) watch(ctx context.Context, key feedKey) {
	pause := watchRetryMin
	for ctx.Err() == nil {
		wi, err := w.kc.WatchNames(ctx, key.kind, key.namespace)
		if kube.IsForbidden(err) {
			// Credentials without watch: the waits poll, as they would.
			return
		}
		if err == nil {
			events := 0
			for ev := range wi.ResultChan() {
				if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ok {
					events++
					w.changed(key, m.Name)
				}
			}
			wi.Stop()
			if events > 0 {
				pause = watchRetryMin
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, watchRetryMax)
	}
}

// pollerWaking is poller's wait, also ended by a signal on wake (see
// wakeups).
func (r *run) pollerWaking(wake <-chan struct{}) func(context.Context) error {
	next := min(firstPoll, r.e.deps.PollInterval)
	return func(ctx context.Context) error {
		d := next
		next = min(2*next, r.e.deps.PollInterval)
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
}
