package transfer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

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

// chunkWriter receives one attempt at one chunk from a RangeReader. It
// hashes every byte as it arrives into the whole-file SHA-256 and, unless
// the reader supplies the chunk's checked digest (takeDigest), into the
// chunk's own, and writes the data at the chunk's offset in the staging
// file, skipping all-zero blocks (the region is a hole beforehand).
// whole may be nil: a chunk read out of order is added to the whole-file
// hash later, from the staging file.
// It is safe against writes racing with close.
type chunkWriter struct {
	mu     sync.Mutex
	closed bool
	f      *os.File
	// base is the file offset of buf[0]; length is the chunk's length.
	base, length int64
	buf          []byte
	whole        hash.Hash
	chunk        hash.Hash
	n            int64 // bytes received
	zero         int64 // bytes in all-zero blocks (not written)
	localErr     error // first error writing the staging file
	onBytes      func(received int64)
	// unhashed zeros (from WriteZeros) join the chunk's hash only when
	// data follows; an all-zero chunk's digest comes from zerosum.
	unhashed int64
	hashed   bool
	// external: the chunk's digest comes from the reader (setDigest), or
	// when it has none, from the staging file once the chunk is complete;
	// arriving bytes are not hashed for it. start is the chunk's offset.
	external bool
	digest   *[32]byte
	start    int64
	// verifyZeros: the destination is not known to read zeros where the
	// chunk has them (a block device that cannot zero ahead): each zero
	// block is read back and written as zeros where it is not.
	verifyZeros bool
	scratch     []byte
}

func newChunkWriter(f *os.File, off, length int64, whole hash.Hash, buf []byte, onBytes func(int64)) *chunkWriter {
	return &chunkWriter{f: f, base: off, start: off, length: length, buf: buf[:0], whole: whole, chunk: sha256.New(), onBytes: onBytes}
}

// takeDigest makes the chunk's digest the reader's (setDigest) instead of
// one taken of the arriving bytes: the reader already hashed and checked
// exactly these bytes. Called before the first byte arrives.
func (w *chunkWriter) takeDigest() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.external = true
}

// setDigest is the checked digest of the whole chunk, from the reader.
func (w *chunkWriter) setDigest(sum [32]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
	if w.whole != nil {
		w.whole.Write(p)
	}
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
// The whole-file hash absorbs them; the chunk's own hash only once data
// follows; the whole zero blocks among them (on the same grid as Write's)
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
		if len(w.buf) > 0 {
			if err := w.flushLocked(); err != nil {
				w.mu.Unlock()
				return err
			}
		}
		if w.verifyZeros {
			if err := w.ensureZeroLocked(w.base, body); err != nil {
				w.mu.Unlock()
				return err
			}
		}
		if w.whole != nil {
			zerosum.Write(w.whole, body)
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

// flushLocked writes the buffered data, skipping all-zero blocks.
func (w *chunkWriter) flushLocked() error {
	buf := w.buf
	runStart := -1 // start of the current run of data blocks in buf
	for i := 0; i < len(buf); i += ZeroBlockSize {
		j := min(i+ZeroBlockSize, len(buf))
		if bytes.Equal(buf[i:j], zeroBlock[:j-i]) {
			w.zero += int64(j - i)
			if w.verifyZeros {
				if err := w.ensureZeroLocked(w.base+int64(i), int64(j-i)); err != nil {
					return err
				}
			}
			if runStart >= 0 {
				if err := w.writeAt(buf[runStart:i], w.base+int64(runStart)); err != nil {
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
		if err := w.writeAt(buf[runStart:], w.base+int64(runStart)); err != nil {
			return err
		}
	}
	w.base += int64(len(buf))
	w.buf = w.buf[:0]
	return nil
}

// ensureZeroLocked reads [off, off+n) of the destination back and writes
// zeros over each block of it that does not read as zeros.
func (w *chunkWriter) ensureZeroLocked(off, n int64) error {
	if w.scratch == nil {
		w.scratch = make([]byte, writeBufferSize)
	}
	for n > 0 {
		k := min(n, int64(len(w.scratch)))
		if _, err := w.f.ReadAt(w.scratch[:k], off); err != nil {
			w.localErr = fmt.Errorf("read back the destination: %w", err)
			return w.localErr
		}
		for i := int64(0); i < k; i += ZeroBlockSize {
			j := min(i+ZeroBlockSize, k)
			if !bytes.Equal(w.scratch[i:j], zeroBlock[:j-i]) {
				if err := w.writeAt(zeroBlock[:j-i], off+i); err != nil {
					return err
				}
			}
		}
		off, n = off+k, n-k
	}
	return nil
}

func (w *chunkWriter) writeAt(p []byte, off int64) error {
	if _, err := w.f.WriteAt(p, off); err != nil {
		w.localErr = fmt.Errorf("write staging file: %w", err)
		return w.localErr
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
	w.closed = true
	var sum [32]byte
	switch {
	case w.external && w.digest != nil:
		sum = *w.digest
	case w.external:
		// The reader had no digest (dd): hash the chunk as written. A chunk
		// cut short is discarded by the caller, unhashed.
		if w.localErr == nil && w.n == w.length {
			h := sha256.New()
			if _, err := io.Copy(h, io.NewSectionReader(w.f, w.start, w.n)); err != nil {
				w.localErr = fmt.Errorf("read back the staging file: %w", err)
			}
			h.Sum(sum[:0])
		}
	case w.hashed:
		w.hashChunkZeros()
		w.chunk.Sum(sum[:0])
	default:
		sum = zerosum.SHA256(w.n)
	}
	return chunkRecord{SHA256: fmt.Sprintf("%x", sum), ZeroBytes: w.zero}, w.n, w.localErr
}

// zeroFill writes zeros over [off, off+n) of f.
func zeroFill(f *os.File, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := f.WriteAt(zeroBlock[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}
