package transfer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/zerosum"
)

// ZeroBlockSize is the granularity of hole detection: an aligned block of
// this many bytes that is all zero is not written to the staging file.
const ZeroBlockSize = 64 << 10

// writeBufferSize is how much streamed data is gathered before it is
// scanned for zero blocks and written (runs of data blocks are coalesced
// into one write).
const writeBufferSize = 1 << 20

var zeroBlock = make([]byte, ZeroBlockSize)

// errWriterClosed is returned to a stream that keeps writing after its
// attempt ended (for example an SSH session's stdout copier still draining
// after ReadRange returned on cancellation).
var errWriterClosed = errors.New("transfer: write after the chunk attempt ended")

// chunkWriter receives one attempt at one chunk from a RangeReader. Unless
// the reader supplies the chunk's checked digest (takeDigest), it hashes
// every byte as it arrives into the chunk's disk digest, keeping the leaf
// hashes (which the whole file's digest then takes instead of the bytes),
// and writes the data at the chunk's offset in the staging file, skipping
// all-zero blocks (the region is a hole beforehand).
// It is safe against writes racing with close.
type chunkWriter struct {
	mu     sync.Mutex
	closed bool
	f      *os.File
	// base is the file offset of buf[0]; length is the chunk's length.
	base, length int64
	buf          []byte
	chunk        *diskdigest.Hasher
	n            int64 // bytes received
	zero         int64 // bytes in all-zero blocks (not written)
	localErr     error // first error writing the staging file
	onBytes      func(received int64)
	// unhashed zeros (from WriteZeros) join the chunk's disk digest only
	// when data follows; an all-zero chunk's digest is diskdigest.Zeros.
	unhashed int64
	hashed   bool
	// external: the chunk's digest comes from the reader (setLeaves), or
	// when it has none, from the staging file once the chunk is complete;
	// arriving bytes are not hashed for it. start is the chunk's offset.
	external bool
	digest   *[32]byte
	leaves   []byte // the reader's leaf hashes (setLeaves), or nil
	start    int64
	// out writes the buffers when there is no write-behind (behind).
	out    blockSink
	behind *writeBehind
	// first is when the first byte (or zero run) arrived; writing is how
	// long the stream was held up by writing; hashing is the time finish
	// spent hashing the chunk as written (Stages).
	first            time.Time
	writing, hashing time.Duration
}

func newChunkWriter(f *os.File, off, length int64, buf []byte, onBytes func(int64)) *chunkWriter {
	w := &chunkWriter{f: f, base: off, start: off, length: length, buf: buf[:0], chunk: diskdigest.New(), onBytes: onBytes,
		out: blockSink{f: f}}
	w.chunk.KeepLeaves()
	return w
}

// setVerifyZeros makes the writer check that zero blocks read as zeros
// (see blockSink.verifyZeros). Called before the first byte arrives.
func (w *chunkWriter) setVerifyZeros(v bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.verifyZeros = v
}

// writeBehind has the writes done by a goroutine of their own, with the
// buffers of ring, so that the stream goes on receiving while the
// destination writes. Called before the first byte arrives.
func (w *chunkWriter) writeBehind(ring chan []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.behind = startWriteBehind(w.out, ring)
	w.buf = (<-ring)[:0]
}

// takeDigest makes the chunk's digest the reader's (setLeaves) instead of
// one taken of the arriving bytes: the reader already hashed and checked
// exactly these bytes. Called before the first byte arrives.
func (w *chunkWriter) takeDigest() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.external = true
}

// setLeaves is the checked leaf hashes of the whole chunk, from the
// reader; the chunk's digest is their SHA-256.
func (w *chunkWriter) setLeaves(leaves []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leaves = leaves
	sum := sha256.Sum256(leaves)
	w.digest = &sum
}

// Write implements io.Writer.
func (w *chunkWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return 0, errWriterClosed
	}
	if w.localErr != nil {
		w.mu.Unlock()
		return 0, w.localErr
	}
	if w.n+int64(len(p)) > w.length {
		w.localErr = fmt.Errorf("the source sent more than the %d bytes asked for", w.length)
		w.mu.Unlock()
		return 0, w.localErr
	}
	w.arrivedLocked()
	if !w.external {
		w.hashChunkZeros()
		w.chunk.Write(p)
	}
	w.n += int64(len(p))
	written := len(p)
	for len(p) > 0 {
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flushLocked(); err != nil {
				w.mu.Unlock()
				return 0, err
			}
		}
	}
	n := w.n
	w.mu.Unlock()
	if w.onBytes != nil {
		w.onBytes(n)
	}
	return written, nil
}

func (w *chunkWriter) hashChunkZeros() {
	zerosum.Write(w.chunk, w.unhashed)
	w.unhashed, w.hashed = 0, true
}

// WriteZeros takes n zero bytes, as a sparse source reports a zero run.
// The chunk's own hash takes them only once data follows; the whole zero blocks among them (on the same grid as Write's)
// are neither copied nor compared, only left as holes. The bytes before
// the first block boundary and after the last go through Write.
func (w *chunkWriter) WriteZeros(n int64) error {
	if n <= 0 {
		return nil
	}
	head := min(n, (ZeroBlockSize-w.rel()%ZeroBlockSize)%ZeroBlockSize)
	if err := w.writeZeroBytes(head); err != nil {
		return err
	}
	n -= head
	body := n / ZeroBlockSize * ZeroBlockSize
	if body > 0 {
		w.mu.Lock()
		switch {
		case w.closed:
			w.mu.Unlock()
			return errWriterClosed
		case w.localErr != nil:
			w.mu.Unlock()
			return w.localErr
		case w.n+body > w.length:
			w.localErr = fmt.Errorf("the source sent more than the %d bytes asked for", w.length)
			w.mu.Unlock()
			return w.localErr
		}
		w.arrivedLocked()
		if len(w.buf) > 0 {
			if err := w.flushLocked(); err != nil {
				w.mu.Unlock()
				return err
			}
		}
		if w.out.verifyZeros {
			if err := w.ensureZeroLocked(w.base, body); err != nil {
				w.mu.Unlock()
				return err
			}
		}
		w.unhashed += body
		w.n += body
		w.base += body
		w.zero += body
		got := w.n
		w.mu.Unlock()
		if w.onBytes != nil {
			w.onBytes(got)
		}
	}
	return w.writeZeroBytes(n - body)
}

// rel is how many bytes of the chunk have arrived.
func (w *chunkWriter) rel() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *chunkWriter) writeZeroBytes(n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := w.Write(zeroBlock[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// flushLocked writes the buffered data, skipping all-zero blocks: at once,
// or through the write-behind, which hands back an empty buffer.
func (w *chunkWriter) flushLocked() error {
	n := int64(len(w.buf))
	if w.behind != nil {
		if err := w.behind.failure(); err != nil {
			w.localErr = err
			return err
		}
		start := time.Now()
		w.buf = w.behind.submit(w.buf, w.base)
		w.writing += time.Since(start)
	} else {
		start := time.Now()
		err := w.out.write(w.buf, w.base)
		w.writing += time.Since(start)
		if err != nil {
			w.localErr = err
			return err
		}
		w.buf = w.buf[:0]
	}
	w.base += n
	return nil
}

// ensureZeroLocked makes [off, off+n) of the destination read as zeros
// (see blockSink.ensureZero), at once or through the write-behind.
func (w *chunkWriter) ensureZeroLocked(off, n int64) error {
	if w.behind != nil {
		if err := w.behind.failure(); err != nil {
			w.localErr = err
			return err
		}
		w.behind.ensureZero(off, n)
		return nil
	}
	start := time.Now()
	err := w.out.ensureZero(off, n)
	w.writing += time.Since(start)
	if err != nil {
		w.localErr = err
	}
	return err
}

// arrivedLocked notes the arrival of the first byte.
func (w *chunkWriter) arrivedLocked() {
	if w.first.IsZero() {
		w.first = time.Now()
	}
}

// timing is when the first byte arrived, how long the stream was held up
// by writing (the writes themselves, or with a write-behind the waits for
// a free buffer and for the last writes) and how long finish hashed the
// chunk as written.
func (w *chunkWriter) timing() (first time.Time, writing, hashing time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first, w.writing, w.hashing
}

// blockSink writes a chunk's buffers into the destination, leaving
// all-zero blocks as holes. It is used by one goroutine at a time.
type blockSink struct {
	f *os.File
	// verifyZeros: the destination is not known to read zeros where the
	// chunk has them (a block device that cannot zero ahead): each zero
	// block is read back and written as zeros where it is not.
	verifyZeros bool
	scratch     []byte
	zero        int64 // bytes in all-zero blocks (not written)
}

// write writes buf, the content at file offset base, skipping all-zero
// blocks (runs of data blocks are coalesced into one write).
func (b *blockSink) write(buf []byte, base int64) error {
	runStart := -1 // start of the current run of data blocks in buf
	for i := 0; i < len(buf); i += ZeroBlockSize {
		j := min(i+ZeroBlockSize, len(buf))
		if bytes.Equal(buf[i:j], zeroBlock[:j-i]) {
			b.zero += int64(j - i)
			if b.verifyZeros {
				if err := b.ensureZero(base+int64(i), int64(j-i)); err != nil {
					return err
				}
			}
			if runStart >= 0 {
				if err := b.writeAt(buf[runStart:i], base+int64(runStart)); err != nil {
					return err
				}
				runStart = -1
			}
			continue
		}
		if runStart < 0 {
			runStart = i
		}
	}
	if runStart >= 0 {
		return b.writeAt(buf[runStart:], base+int64(runStart))
	}
	return nil
}

// ensureZero reads [off, off+n) of the destination back and writes zeros
// over each block of it that does not read as zeros.
func (b *blockSink) ensureZero(off, n int64) error {
	if b.scratch == nil {
		b.scratch = make([]byte, writeBufferSize)
	}
	for n > 0 {
		k := min(n, int64(len(b.scratch)))
		if _, err := b.f.ReadAt(b.scratch[:k], off); err != nil {
			return fmt.Errorf("read back the destination: %w", err)
		}
		for i := int64(0); i < k; i += ZeroBlockSize {
			j := min(i+ZeroBlockSize, k)
			if !bytes.Equal(b.scratch[i:j], zeroBlock[:j-i]) {
				if err := b.writeAt(zeroBlock[:j-i], off+i); err != nil {
					return err
				}
			}
		}
		off, n = off+k, n-k
	}
	return nil
}

func (b *blockSink) writeAt(p []byte, off int64) error {
	if _, err := b.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("write staging file: %w", err)
	}
	return nil
}

// finish flushes what is buffered and closes the writer: later writes fail.
// It returns the chunk's SHA-256 record, the bytes received and the first
// local write error.
func (w *chunkWriter) finish() (chunkRecord, int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && w.localErr == nil && len(w.buf) > 0 {
		_ = w.flushLocked()
	}
	if !w.closed && w.behind != nil {
		// The last writes land before the chunk is judged.
		start := time.Now()
		out, err := w.behind.finish(w.buf)
		w.writing += time.Since(start)
		w.buf = nil
		w.out.zero = out.zero
		if err != nil && w.localErr == nil {
			w.localErr = err
		}
	}
	w.closed = true
	var sum [32]byte
	var leaves []byte
	switch {
	case w.external && w.digest != nil:
		sum, leaves = *w.digest, w.leaves
	case w.external:
		// The reader had no digest (dd): hash the chunk as written. A chunk
		// cut short is discarded by the caller, unhashed.
		if w.localErr == nil && w.n == w.length {
			start := time.Now()
			h := diskdigest.New()
			h.KeepLeaves()
			if err := hashRange(h, w.f, w.start, w.n); err != nil {
				w.localErr = fmt.Errorf("read back the staging file: %w", err)
			}
			h.Sum(sum[:0])
			leaves = h.Leaves()
			w.hashing += time.Since(start)
		}
	case w.hashed:
		w.hashChunkZeros()
		w.chunk.Sum(sum[:0])
		leaves = w.chunk.Leaves()
	default:
		sum, leaves = diskdigest.Zeros(w.n), diskdigest.ZeroLeaves(w.n)
	}
	return chunkRecord{SHA256: fmt.Sprintf("%x", sum), ZeroBytes: w.zero + w.out.zero, Leaves: leaves}, w.n, w.localErr
}
