package engine

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// wakeups end a run's waits on cluster objects (its copy and conversion
// Jobs, its VirtualMachineInstance) as soon as one of them changes, rather
// than at the wait's next poll: a Job that completes during the cutover
// is acted on at once, not up to a poll interval later, and a wait with
// nothing to see skips the short first polls. A change is a hint to look
// again, never evidence: the wait reads the object as before, and still
// polls every PollInterval at most, so a watch that fails or lags delays
// nothing by more than a poll interval.
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

// feed is one watch and the waits that follow it. live is true while its
// watch is open: every change since the watch opened reaches the
// followers (it opens with an event per existing object).
type feed struct {
	followers map[*follower]struct{}
	stop      context.CancelFunc
	live      bool
}

// follower is one wait's interest: the names it waits on, and a channel
// signalled, without blocking, when one of them changes.
type follower struct {
	names map[string]bool
	c     chan struct{}
}

// following is a wait's hold on a feed.
type following struct {
	w   *wakeups
	key feedKey
	fd  *feed
	f   *follower
}

// follow signals the returned following whenever an object of kind named
// in names changes in namespace, until its stop.
func (w *wakeups) follow(kind kube.WatchKind, namespace string, names ...string) *following {
	f := &follower{names: map[string]bool{}, c: make(chan struct{}, 1)}
	for _, n := range names {
		f.names[n] = true
	}
	key := feedKey{kind, namespace}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.feeds == nil {
		w.feeds = map[feedKey]*feed{}
	}
	fd := w.feeds[key]
	if fd == nil {
		ctx, cancel := context.WithCancel(context.Background())
		fd = &feed{followers: map[*follower]struct{}{}, stop: cancel}
		w.feeds[key] = fd
		go w.watch(ctx, key, fd, key.kind)
		if key.kind == kube.WatchJobs {
			// A Job's pod ending is its Job's change: seen at once,
			// not when the Job controller gets to mark the Job.
			go w.watch(ctx, key, fd, kube.WatchJobPods)
		}
	}
	fd.followers[f] = struct{}{}
	return &following{w: w, key: key, fd: fd, f: f}
}

// changes is signalled when a followed object changes.
func (fl *following) changes() <-chan struct{} { return fl.f.c }

// live reports whether the feed's watch is open, so that a change is
// signalled as it happens.
func (fl *following) live() bool {
	fl.w.mu.Lock()
	defer fl.w.mu.Unlock()
	return fl.fd.live
}

// add follows more names (a wait whose objects change as it goes: a
// disk's Job of a new attempt). It is called before the wait reads the
// object, so that no change after the read goes unsignalled.
func (fl *following) add(names ...string) {
	fl.w.mu.Lock()
	defer fl.w.mu.Unlock()
	for _, n := range names {
		fl.f.names[n] = true
	}
}

// stop ends the following; the feed's watch closes with its last.
func (fl *following) stop() {
	w := fl.w
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(fl.fd.followers, fl.f)
	if len(fl.fd.followers) == 0 && w.feeds[fl.key] == fl.fd {
		fl.fd.stop()
		delete(w.feeds, fl.key)
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

// watch runs fd's watch of kind (key's own, or the pods of key's Jobs)
// until ctx ends. Only the watch of key's own kind says whether the feed
// is live: the pods' is a hint more.
func (w *wakeups) watch(ctx context.Context, key feedKey, fd *feed, kind kube.WatchKind) {
	setLive := func(v bool) {
		if kind != key.kind {
			return
		}
		w.mu.Lock()
		fd.live = v
		w.mu.Unlock()
	}
	pause := watchRetryMin
	for ctx.Err() == nil {
		wi, err := w.kc.WatchNames(ctx, kind, key.namespace)
		if kube.IsForbidden(err) {
			// Credentials without watch: the waits poll, as they would.
			return
		}
		if err == nil {
			setLive(true)
			events := 0
			for ev := range wi.ResultChan() {
				if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ok {
					events++
					if name := kube.WatchedName(kind, m); name != "" {
						w.changed(key, name)
					}
				}
			}
			setLive(false)
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

// pollerWaking is poller's wait, also ended by a change fl follows. While
// fl's watch is open a change is signalled as it happens, so the wait
// looks again only every PollInterval (for what no change signals: a
// worker's progress in its log); otherwise it polls as poller does.
func (r *run) pollerWaking(fl *following) func(context.Context) error {
	next := min(firstPoll, r.e.deps.PollInterval)
	return func(ctx context.Context) error {
		d := next
		next = min(2*next, r.e.deps.PollInterval)
		var changes <-chan struct{}
		if fl != nil {
			changes = fl.changes()
			if fl.live() {
				d = r.e.deps.PollInterval
			}
		}
		return retry.SleepOr(ctx, d, changes)
	}
}
