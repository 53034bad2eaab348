package engine

import (
	"fmt"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"sync"
	"time"
)

// Throughput and the time left are computed from a transfer's own
// progress: the bytes done since its first report over the time since then.
// A transfer is what an Event's Phase, Disk and Transfer name (one disk or
// chain file copied, flattened, uploaded or imported in one phase), never
// what its message says; a resumed transfer starts counting again, so bytes
// verified by an earlier run do not inflate the rate.

// rateMinWindow is how long a transfer must have run before a rate is
// reported: earlier figures swing too much to be useful.
const rateMinWindow = time.Second

// progressEventInterval is how often a run records a Kubernetes Event with
// its throughput and time left, per transfer: often enough to follow a long
// copy with `kubectl get events`, rarely enough not to flood the API server.
const progressEventInterval = 30 * time.Second

// rateKey identifies a transfer: its phase, disk and Transfer (see
// Transfer), and its size, so that a transfer started again with another
// size counts afresh.
type rateKey struct {
	phase    record.Phase
	disk     int
	transfer Transfer
	total    int64
}

type rateStart struct {
	at        time.Time
	done      int64
	last      int64
	lastEvent time.Time
}

// rateTracker measures the transfers of one run.
type rateTracker struct {
	mu    sync.Mutex
	start map[rateKey]rateStart
}

// observe fills ev's BytesPerSecond and ETA from the transfer's history and
// reports whether a Kubernetes Event is due for it.
func (t *rateTracker) observe(ev *Event) (eventDue bool) {
	if ev.Kind != EventProgress || ev.BytesTotal <= 0 {
		return false
	}
	key := rateKey{phase: ev.Phase, disk: ev.Disk, transfer: ev.Transfer, total: ev.BytesTotal}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start == nil {
		t.start = map[rateKey]rateStart{}
	}
	st, ok := t.start[key]
	if !ok || ev.BytesDone < st.last {
		t.start[key] = rateStart{at: ev.Time, done: ev.BytesDone, last: ev.BytesDone, lastEvent: ev.Time}
		return false
	}
	st.last = ev.BytesDone
	t.start[key] = st
	el := ev.Time.Sub(st.at)
	if el < rateMinWindow || ev.BytesDone == st.done {
		return false
	}
	ev.BytesPerSecond = float64(ev.BytesDone-st.done) / el.Seconds()
	if left := ev.BytesTotal - ev.BytesDone; left > 0 {
		ev.ETA = time.Duration(float64(left) / ev.BytesPerSecond * float64(time.Second)).Round(time.Second)
	}
	if ev.Time.Sub(st.lastEvent) >= progressEventInterval || ev.BytesDone >= ev.BytesTotal {
		st.lastEvent = ev.Time
		t.start[key] = st
		return true
	}
	return false
}

// RateText says a progress event's throughput and time left, or "" when
// the transfer has not run long enough to tell.
func (ev Event) RateText() string {
	if ev.BytesPerSecond <= 0 {
		return ""
	}
	s := fmt.Sprintf("%.1f MB/s", ev.BytesPerSecond/1e6)
	if ev.ETA > 0 {
		s += ", about " + ev.ETA.String() + " left"
	}
	return s
}
