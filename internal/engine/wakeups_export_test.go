package engine

import "github.com/vmmigration/terraform-provider-vmmigration/internal/kube"

// Follow is wakeups.follow, for the engine_test package: the channel
// signalled on a change, whether the watch is open, and the stop.
func (e *Engine) Follow(kind kube.WatchKind, namespace string, names ...string) (<-chan struct{}, func() bool, func()) {
	fl := e.wake.follow(kind, namespace, names...)
	return fl.changes(), fl.live, fl.stop
}

// Watches is how many watches the engine keeps open.
func (e *Engine) Watches() int {
	e.wake.mu.Lock()
	defer e.wake.mu.Unlock()
	return len(e.wake.feeds)
}
