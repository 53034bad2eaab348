package transfer

import "sync"

// writeBehindBuffers is how many buffers of writeBufferSize one stream's
// write-behind has: one filling, the others queued or being written.
const writeBehindBuffers = 4

// newBufferRing returns the buffers of one stream's write-behind.
func newBufferRing() chan []byte {
	ring := make(chan []byte, writeBehindBuffers)
	for range writeBehindBuffers {
		ring <- make([]byte, 0, writeBufferSize)
	}
	return ring
}

// writeBehind writes one chunk attempt's buffers into the destination in
// a goroutine of its own, in the order they were handed over, and gives
// each buffer back to the ring once written. After a failed write the
// rest are not written (the attempt has failed; its bytes are cleared
// before the chunk is read again).
type writeBehind struct {
	jobs chan writeJob
	ring chan []byte
	done chan struct{}
	out  blockSink // the goroutine's own until done is closed

	mu  sync.Mutex
	err error
}

// writeJob is a buffer to write at base, or (buf nil) a range to make read
// as zeros.
type writeJob struct {
	buf           []byte
	base, zeroLen int64
}

func startWriteBehind(out blockSink, ring chan []byte) *writeBehind {
	b := &writeBehind{jobs: make(chan writeJob, writeBehindBuffers), ring: ring, done: make(chan struct{}), out: out}
	go b.run()
	return b
}

func (b *writeBehind) run() {
	defer close(b.done)
	for j := range b.jobs {
		if b.failure() == nil {
			var err error
			if j.buf != nil {
				err = b.out.write(j.buf, j.base)
			} else {
				err = b.out.ensureZero(j.base, j.zeroLen)
			}
			if err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
			}
		}
		if j.buf != nil {
			b.ring <- j.buf[:0]
		}
	}
}

// failure is the first write error so far.
func (b *writeBehind) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// submit hands buf, the content at base, over to be written and returns
// an empty buffer, waiting for one while all are queued or being written.
func (b *writeBehind) submit(buf []byte, base int64) []byte {
	b.jobs <- writeJob{buf: buf, base: base}
	return (<-b.ring)[:0]
}

// ensureZero queues making [off, off+n) read as zeros.
func (b *writeBehind) ensureZero(off, n int64) {
	b.jobs <- writeJob{base: off, zeroLen: n}
}

// finish gives the unused buffer back, waits for the queued writes and
// returns the sink's counts and the first write error.
func (b *writeBehind) finish(unused []byte) (blockSink, error) {
	if unused != nil {
		b.ring <- unused[:0]
	}
	close(b.jobs)
	<-b.done
	return b.out, b.failure()
}
