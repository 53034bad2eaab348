package transfer

import (
	"sync/atomic"
	"time"
)

// Stages is where one disk's copy spent its time in one Copy call, summed
// over its streams: with several streams the stages overlap and their sum
// exceeds the copy's wall time. A stage that grows with a regression
// points at it: Waiting at the host's start-up per range, Reading at the
// network or the decryption, Writing and Syncing at the destination,
// Hashing at the whole-file SHA-256.
type Stages struct {
	// Waiting: from asking the host for a range until its first byte
	// arrived (the SSH exec, the host's interpreter starting, its first
	// read), and from a failed attempt until the next one.
	Waiting time.Duration
	// Reading: from a range's first byte until its end, less Writing: the
	// network, the decryption and the stream's own checks.
	Reading time.Duration
	// Writing: writes into the destination (and zeroing where the
	// destination cannot hold holes).
	Writing time.Duration
	// Syncing: fsync of the destination before a chunk is recorded.
	Syncing time.Duration
	// Hashing: the whole-file SHA-256 taken from the destination, and
	// chunk digests taken after the fact (where the host sent none).
	Hashing time.Duration
	// Journal: writing the journal (each save is fsync-ed and renamed).
	Journal time.Duration
}

// stageClock sums Stages from several goroutines.
type stageClock struct {
	waiting, reading, writing, syncing, hashing, journal atomic.Int64
}

func (s *stageClock) add(d *atomic.Int64, since time.Time) { d.Add(int64(time.Since(since))) }

func (s *stageClock) snapshot() Stages {
	return Stages{
		Waiting: time.Duration(s.waiting.Load()), Reading: time.Duration(s.reading.Load()),
		Writing: time.Duration(s.writing.Load()), Syncing: time.Duration(s.syncing.Load()),
		Hashing: time.Duration(s.hashing.Load()), Journal: time.Duration(s.journal.Load()),
	}
}

// attemptClock times one attempt at one range: it is started before the
// range is asked for, learns when the first byte arrives (arrived) and
// how long writing took (the chunk writer's own clock), and is added to
// the copy's stages when the attempt ends.
type attemptClock struct {
	start, first time.Time
}

func startAttempt() attemptClock { return attemptClock{start: time.Now()} }

// end adds the attempt through w to s.
func (a attemptClock) end(s *stageClock, w *chunkWriter) {
	first, writing, hashing := w.timing()
	s.hashing.Add(int64(hashing))
	now := time.Now().Add(-hashing)
	if first.IsZero() {
		s.waiting.Add(int64(now.Sub(a.start)))
		s.writing.Add(int64(writing))
		return
	}
	s.waiting.Add(int64(first.Sub(a.start)))
	s.reading.Add(int64(max(now.Sub(first)-writing, 0)))
	s.writing.Add(int64(writing))
}
