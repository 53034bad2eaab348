package transfer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// Defaults for Options.
const (
	DefaultChunkSize        = 64 << 20
	DefaultRetries          = 5
	DefaultRetryDelay       = time.Second
	DefaultProgressInterval = time.Second
	maxRetryDelay           = 30 * time.Second
	chunkAlign              = 1 << 20
	sectorSize              = 512
)

// RangeReader reads byte ranges of a file on the source host.
// (*esxi.Client) satisfies it.
type RangeReader interface {
	// ReadRange writes length bytes of the file at path, starting at
	// offset, to w and returns how many it wrote. offset and length are
	// multiples of 512. Reading fewer bytes than asked is an error.
	ReadRange(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error)
}

// ZeroSkippingReader is optionally implemented by a RangeReader that can
// read a range without sending its zero runs over the network, with the
// contract of ReadRange ((*esxi.Client) does, through a reader it runs on
// the host where the host has Python, and dd where it has not). Copy
// prefers it: the data written to the staging file and its checksums are
// the same, only the bytes on the wire differ.
type ZeroSkippingReader interface {
	ReadRangeSkippingZeros(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error)
}

// LeafRangeReader is optionally implemented by a ZeroSkippingReader whose
// read also yields the hashes of the range's 1 MiB leaves (the disk
// digest's, counted from the range's offset), computed by the source and
// checked against what arrived ((*esxi.Client) does through its sparse
// reader; checked is false where it fell back to dd). A chunk read in one
// such range takes their SHA-256 as its digest, and the whole file's
// digest takes the leaves: no byte of it is hashed again.
type LeafRangeReader interface {
	ReadRangeLeaves(ctx context.Context, path string, offset, length int64, w io.Writer) (n int64, leaves []byte, checked bool, err error)
}

// Sizer is optionally implemented by a RangeReader that can stat files on
// the source ((*esxi.Client) does). When available, Copy checks that the
// source file is exactly Disk.SizeBytes long before starting.
type Sizer interface {
	FileSizes(ctx context.Context, paths ...string) (map[string]int64, error)
}

// Disk is the source data file to copy.
type Disk struct {
	// Path is the data file on the host, e.g. the -flat.vmdk.
	Path string
	// SizeBytes is the file's size (the disk's capacity for a flat file),
	// a positive multiple of 512.
	SizeBytes int64
}

// Options tune Copy and CopyAll. The zero value uses the defaults.
type Options struct {
	// ChunkSize is the unit of copying, verification and resumption
	// (DefaultChunkSize if 0; must be a multiple of 1 MiB). Changing it
	// between attempts restarts the copy.
	ChunkSize int64
	// Progress, if set, is called at most about every ProgressInterval
	// while data flows and at the end of every chunk. CopyAll serializes
	// its calls.
	Progress func(Progress)
	// ProgressInterval defaults to DefaultProgressInterval.
	ProgressInterval time.Duration
	// Retries bounds how many times a chunk is retried after a transient
	// read error (fault.Classify == Transient); DefaultRetries if 0,
	// no retries if negative.
	Retries int
	// RetryDelay is the first backoff delay, doubled after each retry up
	// to 30s (DefaultRetryDelay if 0).
	RetryDelay time.Duration
	// Streams is how many chunks of one disk are read at once (1 if < 1).
	// With more than one, chunks land out of order: each is hashed on its
	// own as it arrives, joins the whole file's digest in order by its leaf
	// hashes, and the journal records every chunk that landed,
	// so a resumed copy checks them against their hashes and skips them.
	// A stream reads its next chunk while its last one is recorded, and no
	// further: a copy killed at any point reads at most two chunks per
	// stream again.
	Streams int
	// Sources, when set, are the readers of the streams: stream w reads
	// through Sources[w%len(Sources)] (for example one SSH connection
	// each, since a host's sshd encrypts a connection on one core). When
	// empty every stream reads through Copy's src.
	Sources []RangeReader
	// JournalPath is where the journal is kept; <dest>.journal if empty.
	// A block-device destination needs one, on a file system that
	// outlives the process (a device node has no place beside it).
	JournalPath string
	// KeepLeaves asks for the copied file's leaf hashes (package
	// diskdigest) in Result.Leaves, from the hashes each chunk was checked
	// with: nothing is hashed again for them.
	KeepLeaves bool
}

// Progress reports how far one disk's copy has come.
type Progress struct {
	// Source is Disk.Path and Dest the staging file, identifying the disk.
	Source, Dest string
	// BytesDone counts bytes in the staging file, including chunks
	// verified by an earlier attempt.
	BytesDone, BytesTotal int64
	// Percent is BytesDone / BytesTotal * 100.
	Percent float64
	// ChunksDone is the number of verified chunks out of ChunksTotal.
	ChunksDone, ChunksTotal int
	// Stages is where this Copy call has spent its time so far.
	Stages Stages
}

// Result is the evidence of a completed copy. It is recorded in the journal
// and returned unchanged by every later Copy of the same disk.
type Result struct {
	// SHA256 is the hex disk digest (package diskdigest) of the whole
	// source file.
	SHA256 string `json:"sha256"`
	// Bytes is the file's size.
	Bytes int64 `json:"bytes"`
	// ZeroBytes is how many bytes were all-zero blocks, left as holes.
	ZeroBytes int64 `json:"zero_bytes"`
	// ChunksCopied is the number of chunks read from the source by the
	// call that completed the copy; ChunksSkipped the number it found
	// already verified by interrupted earlier calls.
	ChunksCopied  int `json:"chunks_copied"`
	ChunksSkipped int `json:"chunks_skipped"`
	// Leaves are the file's leaf hashes, with Options.KeepLeaves, when
	// this call read every chunk (nil when it resumed a copy: the leaves
	// of chunks an earlier call verified are not kept). Never journaled.
	Leaves []byte `json:"-"`
	// Stages is where this call spent its time (not journaled).
	Stages Stages `json:"-"`
}

func (o Options) withDefaults() (Options, error) {
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < 0 || o.ChunkSize%chunkAlign != 0 {
		return o, fmt.Errorf("chunk size %d is not a positive multiple of 1 MiB", o.ChunkSize)
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.Streams < 1 {
		o.Streams = 1
	}
	return o, nil
}

func (d Disk) validate() error {
	if d.Path == "" {
		return errors.New("source path is empty")
	}
	if d.SizeBytes <= 0 || d.SizeBytes%sectorSize != 0 {
		return fmt.Errorf("source size %d is not a positive multiple of 512 bytes", d.SizeBytes)
	}
	return nil
}

// Copy copies disk from src into the staging file dest, resuming a previous
// interrupted copy recorded in dest's journal (<dest>.journal), and returns
// the evidence of the complete copy. It is idempotent: once a copy is
// complete, Copy verifies the staging file's size and last chunk locally and
// returns the recorded Result without contacting the host.
//
// Nothing is created before the source has been read successfully once, so
// a locked source (a powered-on VM: an error whose class is NeedsHuman)
// leaves the work directory untouched. Errors from the source keep the
// class they carry (fault.Classed); errors of the local file system are
// returned as they are, never retried.
//
// Only one Copy may work on a dest at a time; a second one (in this or
// another process) fails at once.
func Copy(ctx context.Context, src RangeReader, disk Disk, dest string, opts Options) (Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Result{}, fmt.Errorf("copy %s: %w", disk.Path, err)
	}
	if err := disk.validate(); err != nil {
		return Result{}, fmt.Errorf("copy %s: %w", disk.Path, err)
	}
	if dest == "" {
		return Result{}, fmt.Errorf("copy %s: destination path is empty", disk.Path)
	}
	jpath := opts.JournalPath
	if jpath == "" {
		jpath = journalPath(dest)
	}
	if filepath.Clean(jpath) == filepath.Clean(dest) {
		return Result{}, fmt.Errorf("copy %s: the journal path is the destination %s", disk.Path, dest)
	}
	c := &copier{src: src, disk: disk, dest: dest, jpath: jpath, opts: opts, chunks: NumChunks(disk.SizeBytes, opts.ChunkSize)}
	defer c.close()
	res, err := c.run(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("copy %s to %s: %w", disk.Path, dest, err)
	}
	return res, nil
}

type copier struct {
	src    RangeReader
	disk   Disk
	dest   string
	jpath  string // the journal
	opts   Options
	chunks int

	f *os.File
	// block: f is a block device (see target.go); verifyZeros: it cannot
	// be zeroed without writing, so chunk writers check zero blocks.
	block       bool
	verifyZeros atomic.Bool
	unlock      func()
	j           *journal
	whole       hash.Hash
	ring        chan []byte // the write-behind's buffers (one stream)
	repMu       sync.Mutex  // report may be called from a stream's goroutine
	lastRep     time.Time
	lastDone    int64 // the most BytesDone reported
	lastChunks  int   // the most ChunksDone reported
	stages      stageClock
	// leaves are the leaf hashes of the verified prefix while
	// Options.KeepLeaves and every chunk of it had them (leavesLost
	// otherwise).
	leaves     []byte
	leavesLost bool
}

// keepLeaves adds the leaf hashes of chunk [off, off+n), which has just
// joined the verified prefix, to c.leaves: nil hashes, or a chunk that
// does not follow the ones kept (a resumed copy's), lose them.
func (c *copier) keepLeaves(off int64, leaves []byte) {
	if !c.opts.KeepLeaves || c.leavesLost {
		return
	}
	if leaves == nil || int64(len(c.leaves)) != off/diskdigest.LeafSize*diskdigest.Size {
		c.leaves, c.leavesLost = nil, true
		return
	}
	c.leaves = append(c.leaves, leaves...)
}

// sync fsyncs the destination, timed.
func (c *copier) sync() error {
	defer c.stages.add(&c.stages.syncing, time.Now())
	return c.f.Sync()
}

// saveJournal writes the journal, timed.
func (c *copier) saveJournal() error {
	defer c.stages.add(&c.stages.journal, time.Now())
	return c.j.saveAt(c.jpath)
}

// hashRange adds [off, off+n) of the destination to h, timed.
func (c *copier) hashRange(h hash.Hash, off, n int64) error {
	defer c.stages.add(&c.stages.hashing, time.Now())
	return hashRange(h, c.f, off, n)
}

func (c *copier) close() {
	if c.unlock != nil {
		c.unlock()
	}
	if c.f != nil {
		c.f.Close()
	}
}

func (c *copier) run(ctx context.Context) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	// An existing staging file: lock it and see whether the copy is done.
	f, err := os.OpenFile(c.dest, os.O_RDWR, 0)
	switch {
	case err == nil:
		if err := c.adopt(f); err != nil {
			return Result{}, err
		}
		if res, ok, err := c.completed(); err != nil || ok {
			return res, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return Result{}, fmt.Errorf("open staging file: %w", err)
	}

	// Not complete: make sure the source is readable before writing
	// anything (a powered-on VM's disk is locked).
	if err := c.probe(ctx); err != nil {
		return Result{}, err
	}
	if c.f == nil {
		f, err := os.OpenFile(c.dest, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return Result{}, fmt.Errorf("create staging file: %w", err)
		}
		if err := c.adopt(f); err != nil {
			return Result{}, err
		}
	}
	start, err := c.reconcile()
	if err != nil {
		return Result{}, err
	}
	skipped := start + len(c.j.Ahead)
	if c.opts.Streams > 1 && c.chunks-start > 1 {
		c.report(c.verifiedBytes(), start, true)
		if err := c.runStreams(ctx, start); err != nil {
			return Result{}, err
		}
		return c.finish(skipped)
	}
	c.ring = newBufferRing()
	c.report(int64(start)*c.opts.ChunkSize, start, true)
	for i := start; i < c.chunks; i++ {
		if err := c.copyChunk(ctx, i); err != nil {
			return Result{}, err
		}
	}
	return c.finish(start)
}

// adopt takes f as the staging file and locks it.
func (c *copier) adopt(f *os.File) error {
	unlock, err := lockFile(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("another copy is using the staging file (or it cannot be locked): %w", err)
	}
	c.f, c.unlock = f, unlock
	return c.checkTarget()
}

// completed reports the recorded Result when the journal says the copy is
// complete and the staging file still holds it.
func (c *copier) completed() (Result, bool, error) {
	j, err := loadJournalAt(c.jpath)
	if err != nil || j == nil || !j.Complete || !j.matches(c.disk, c.opts.ChunkSize) {
		return Result{}, false, err
	}
	size, err := c.extent()
	if err != nil {
		return Result{}, false, err
	}
	if size != c.disk.SizeBytes {
		return Result{}, false, nil
	}
	ok, err := c.verifyLocal(j, c.chunks-1)
	if err != nil || !ok {
		return Result{}, false, err
	}
	return *j.Result, true, nil
}

// probe reads the source's last sector (proving the file is readable and
// at least SizeBytes long) and, when src can stat, checks the exact size.
func (c *copier) probe(ctx context.Context) error {
	if s, ok := c.src.(Sizer); ok {
		var sizes map[string]int64
		err := c.retry(ctx, func() error {
			var err error
			sizes, err = s.FileSizes(ctx, c.disk.Path)
			return err
		})
		if err != nil {
			return err
		}
		if got, ok := sizes[c.disk.Path]; !ok || got != c.disk.SizeBytes {
			return fmt.Errorf("the source file is %d bytes, expected %d: the disk changed since discovery; refresh the inventory", got, c.disk.SizeBytes)
		}
	}
	return c.retry(ctx, func() error {
		_, err := c.src.ReadRange(ctx, c.disk.Path, c.disk.SizeBytes-sectorSize, sectorSize, io.Discard)
		return err
	})
}

// reconcile compares the journal with the staging file and returns the
// first chunk to copy. It leaves the staging file exactly SizeBytes long
// with every unverified byte a hole, and the journal recording what the
// file verifiably holds.
func (c *copier) reconcile() (int, error) {
	j, err := loadJournalAt(c.jpath)
	if err != nil {
		return 0, err
	}
	if j == nil || !j.matches(c.disk, c.opts.ChunkSize) {
		// Another copy's journal or none: record this copy's identity
		// before touching the file, then start over.
		c.whole = diskdigest.New()
		c.j = &journal{Version: journalVersion, Source: c.disk.Path, SizeBytes: c.disk.SizeBytes,
			ChunkSize: c.opts.ChunkSize, Chunks: []chunkRecord{}, SHA256State: marshalHash(c.whole)}
		if err := c.saveJournal(); err != nil {
			return 0, err
		}
		return 0, c.resetFrom(0)
	}
	j.Complete, j.Result = false, nil
	k := j.VerifiedChunks
	size, err := c.extent()
	if err != nil {
		return 0, err
	}
	end := min(int64(k)*c.opts.ChunkSize, c.disk.SizeBytes)
	trusted := false
	if k == 0 {
		trusted = true
	} else if size >= end {
		if trusted, err = c.verifyLocal(j, k-1); err != nil {
			return 0, err
		}
		// A zero chunk verifies on any zeroed target, so the last chunk
		// alone does not tell a fresh device (a block claim recreated
		// while its journal claim was kept) from the one the journal
		// describes: the last chunk holding data must verify too.
		if i := lastDataChunk(j, k-1, c.opts.ChunkSize); trusted && i >= 0 {
			if trusted, err = c.verifyLocal(j, i); err != nil {
				return 0, err
			}
		}
	}
	if trusted {
		if c.whole, err = restoreHash(j.SHA256State); err != nil {
			return 0, fmt.Errorf("journal hash state: %w", err)
		}
	} else {
		// The file does not hold what the journal claims: keep only the
		// prefix of chunks that still verify, rebuilding the whole-file
		// hash from the local file.
		if k, err = c.reverify(j, size); err != nil {
			return 0, err
		}
		j.VerifiedChunks, j.Chunks, j.SHA256State = k, j.Chunks[:k], marshalHash(c.whole)
	}
	c.j = j
	if !trusted || c.opts.Streams <= 1 {
		// Chunks read ahead are kept only when the copy resumes with
		// streams and the journal's prefix held.
		j.Ahead = nil
	}
	if len(j.Ahead) == 0 {
		j.Ahead = nil
		if err := c.resetFrom(k); err != nil {
			return 0, err
		}
	} else if err := c.keepAhead(k, size); err != nil {
		return 0, err
	} else {
		// Those next in order join the prefix now: the copy resumes
		// after them.
		var mu sync.Mutex
		if err := c.advance(&mu); err != nil {
			return 0, err
		}
		k = j.VerifiedChunks
	}
	if err := c.saveJournal(); err != nil {
		return 0, err
	}
	return k, nil
}

// lastDataChunk is the last of the journal's first n chunks (all full
// chunks) that is not all zeros, or -1.
func lastDataChunk(j *journal, n int, chunk int64) int {
	zero := diskdigest.Zeros(chunk)
	zeroHex := hex.EncodeToString(zero[:])
	for i := n - 1; i >= 0; i-- {
		if j.Chunks[i].SHA256 != zeroHex {
			return i
		}
	}
	return -1
}

// verifyLocal re-hashes chunk i from the staging file and compares it with
// the journal.
func (c *copier) verifyLocal(j *journal, i int) (bool, error) {
	off := int64(i) * c.opts.ChunkSize
	n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
	h := diskdigest.New()
	if err := hashRange(h, c.f, off, n); err != nil {
		return false, fmt.Errorf("verify staging file: %w", err)
	}
	return h.Hex() == j.Chunks[i].SHA256, nil
}

// reverify hashes the recorded chunks from the start of the staging file
// and returns how many still match, leaving c.whole in the state after them.
func (c *copier) reverify(j *journal, fileSize int64) (int, error) {
	c.whole = diskdigest.New()
	for i := 0; i < j.VerifiedChunks; i++ {
		off := int64(i) * c.opts.ChunkSize
		n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
		if off+n > fileSize {
			return i, nil
		}
		state := marshalHash(c.whole)
		h := diskdigest.New()
		if err := hashRange(multiHash{h, c.whole}, c.f, off, n); err != nil {
			return 0, fmt.Errorf("verify staging file: %w", err)
		}
		if h.Hex() != j.Chunks[i].SHA256 {
			var err error
			c.whole, err = restoreHash(state)
			return i, err
		}
	}
	return j.VerifiedChunks, nil
}

// resetFrom turns everything from chunk k on into a hole and makes the
// file SizeBytes long: unverified bytes must read as zeros because the
// copy does not write zero blocks.
func (c *copier) resetFrom(k int) error {
	off := min(int64(k)*c.opts.ChunkSize, c.disk.SizeBytes)
	if c.block {
		return c.resetBlockFrom(off)
	}
	if err := c.f.Truncate(off); err != nil {
		return fmt.Errorf("truncate staging file: %w", err)
	}
	if err := c.f.Truncate(c.disk.SizeBytes); err != nil {
		return fmt.Errorf("allocate staging file: %w", err)
	}
	if err := c.sync(); err != nil {
		return fmt.Errorf("fsync staging file: %w", err)
	}
	return nil
}

// copyChunk copies chunk i, retrying transient read errors, then makes the
// data durable and records it in the journal.
func (c *copier) copyChunk(ctx context.Context, i int) error {
	off := int64(i) * c.opts.ChunkSize
	n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
	state := marshalHash(c.whole)
	var rec chunkRecord
	var leaves []byte
	first := true
	err := c.retry(ctx, func() error {
		if !first {
			// A failed attempt may have written part of the chunk.
			if err := c.resetFrom(i); err != nil {
				return &localError{err}
			}
		}
		first = false
		whole, err := restoreHash(state)
		if err != nil {
			return &localError{err}
		}
		w := newChunkWriter(c.f, off, n, nil, func(got int64) { c.report(off+got, i, false) })
		w.setVerifyZeros(c.verifyZeros.Load())
		w.writeBehind(c.ring)
		clock := startAttempt()
		rerr := c.readChunk(ctx, c.src, off, n, w)
		r, got, lerr := w.finish()
		clock.end(&c.stages, w)
		if lerr != nil {
			return &localError{lerr}
		}
		if rerr != nil {
			return rerr
		}
		if got != n {
			return fmt.Errorf("read %d bytes of chunk %d at offset %d, expected %d", got, i, off, n)
		}
		if leaves, err = c.addToWhole(whole, r, off, n); err != nil {
			return &localError{err}
		}
		r.Leaves = nil
		rec, c.whole = r, whole
		return nil
	})
	if err != nil {
		return fmt.Errorf("chunk %d at offset %d: %w", i, off, err)
	}
	c.keepLeaves(off, leaves)
	if err := c.sync(); err != nil {
		return fmt.Errorf("fsync staging file: %w", err)
	}
	c.j.Chunks = append(c.j.Chunks, rec)
	c.j.VerifiedChunks = i + 1
	c.j.SHA256State = marshalHash(c.whole)
	if err := c.saveJournal(); err != nil {
		return err
	}
	c.report(off+n, i+1, true)
	return nil
}

// readChunk reads [off, off+n) in at most two ranges: whole MiBs (so the
// host's dd runs with 1 MiB blocks) and the sector-aligned tail of the
// last chunk.
func (c *copier) readChunk(ctx context.Context, src RangeReader, off, n int64, w *chunkWriter) error {
	main := n &^ (chunkAlign - 1)
	if lr, ok := src.(LeafRangeReader); ok && (main == n || main == 0) {
		// One range: the reader's checked leaves are the chunk's.
		w.takeDigest()
		got, leaves, checked, err := lr.ReadRangeLeaves(ctx, c.disk.Path, off, n, w)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("read %d bytes at offset %d, expected %d", got, off, n)
		}
		if checked {
			w.setLeaves(leaves)
		}
		return nil
	}
	for _, r := range [][2]int64{{off, main}, {off + main, n - main}} {
		if r[1] == 0 {
			continue
		}
		read := src.ReadRange
		if z, ok := src.(ZeroSkippingReader); ok {
			read = z.ReadRangeSkippingZeros
		}
		got, err := read(ctx, c.disk.Path, r[0], r[1], w)
		if err != nil {
			return err
		}
		if got != r[1] {
			return fmt.Errorf("read %d bytes at offset %d, expected %d", got, r[0], r[1])
		}
	}
	return nil
}

// finish checks the staging file and records the completed copy.
func (c *copier) finish(skipped int) (Result, error) {
	size, err := c.extent()
	if err != nil {
		return Result{}, err
	}
	if size != c.disk.SizeBytes {
		return Result{}, fmt.Errorf("staging file is %d bytes, expected %d", size, c.disk.SizeBytes)
	}
	res := Result{SHA256: fmt.Sprintf("%x", c.whole.Sum(nil)), Bytes: c.disk.SizeBytes,
		ChunksCopied: c.chunks - skipped, ChunksSkipped: skipped}
	if !c.leavesLost && int64(len(c.leaves)) == diskdigest.LeafCount(c.disk.SizeBytes)*diskdigest.Size {
		res.Leaves = c.leaves
	}
	res.Stages = c.stages.snapshot()
	for _, r := range c.j.Chunks {
		res.ZeroBytes += r.ZeroBytes
	}
	c.j.Complete, c.j.Result = true, &res
	if err := c.saveJournal(); err != nil {
		return Result{}, err
	}
	return res, nil
}

// localError marks a failure of the local file system: never retried.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// retry runs op until it succeeds, fails with a non-transient error, ctx
// ends or the retry budget is spent, sleeping with exponential backoff
// between attempts.
func (c *copier) retry(ctx context.Context, op func() error) error {
	delay := c.opts.RetryDelay
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		var le *localError
		if errors.As(err, &le) {
			return le.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (after: %v)", ctx.Err(), err)
		}
		if fault.Classify(err) != fault.Transient || attempt >= c.opts.Retries {
			return err
		}
		if serr := retry.Sleep(ctx, delay); serr != nil {
			return fmt.Errorf("%w (while waiting to retry after: %v)", serr, err)
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// report calls the Progress callback, at most every ProgressInterval unless
// force is set.
func (c *copier) report(done int64, chunksDone int, force bool) {
	if c.opts.Progress == nil {
		return
	}
	c.repMu.Lock()
	defer c.repMu.Unlock()
	now := time.Now()
	if !force && now.Sub(c.lastRep) < c.opts.ProgressInterval {
		return
	}
	c.lastRep = now
	// Reports come from the streams' collector and from the advancer;
	// what they say never goes back (the upload that follows a copy
	// reads ChunksDone).
	done, chunksDone = max(done, c.lastDone), max(chunksDone, c.lastChunks)
	c.lastDone, c.lastChunks = done, chunksDone
	c.opts.Progress(Progress{Source: c.disk.Path, Dest: c.dest, BytesDone: done, BytesTotal: c.disk.SizeBytes,
		Percent: float64(done) * 100 / float64(c.disk.SizeBytes), ChunksDone: chunksDone, ChunksTotal: c.chunks,
		Stages: c.stages.snapshot()})
}

// State is what Inspect observes of a copy.
type State string

// States of a copy.
const (
	// StateAbsent: no journal for this disk (nothing copied, or another
	// disk's leftovers).
	StateAbsent State = "absent"
	// StatePartial: some chunks are recorded; Copy resumes after them.
	StatePartial State = "partial"
	// StateComplete: the journal records a complete copy and the staging
	// file has the right size.
	StateComplete State = "complete"
)

// Status is the observed state of a copy.
type Status struct {
	State State
	// VerifiedBytes is what the journal records as copied.
	VerifiedBytes int64
	// Result is the recorded evidence when State is StateComplete.
	Result *Result
}

// Inspect observes the copy of disk into dest without contacting the host
// and without writing anything, for a controller's observe step. It trusts
// the journal as far as the staging file's size allows; Copy re-verifies
// data before relying on it.
func Inspect(disk Disk, dest string, chunkSize int64) (Status, error) {
	if chunkSize == 0 {
		chunkSize = DefaultChunkSize
	}
	j, err := loadJournal(dest)
	if err != nil {
		return Status{}, err
	}
	if j == nil || !j.matches(disk, chunkSize) {
		return Status{State: StateAbsent}, nil
	}
	fi, err := os.Stat(dest)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{State: StateAbsent}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("stat staging file: %w", err)
	}
	verified := min(int64(j.VerifiedChunks+len(j.Ahead))*chunkSize, disk.SizeBytes, fi.Size())
	if j.Complete && fi.Size() == disk.SizeBytes {
		r := *j.Result
		return Status{State: StateComplete, VerifiedBytes: verified, Result: &r}, nil
	}
	if verified == 0 {
		return Status{State: StateAbsent}, nil
	}
	return Status{State: StatePartial, VerifiedBytes: verified}, nil
}

// Remove deletes the staging file and its journal (cleanup after the
// artifact is no longer needed). Missing files are not an error.
func Remove(dest string) error {
	var errs []error
	for _, p := range []string{journalPath(dest), journalPath(dest) + ".tmp", dest} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// A folder that does not exist holds nothing to remove.
		if err := durable.SyncDir(filepath.Dir(dest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Job is one disk for CopyAll.
type Job struct {
	Disk Disk
	Dest string
}

// JobResult is the outcome of one Job.
type JobResult struct {
	Job    Job
	Result Result
	Err    error
}

// CopyAll copies several disks with at most parallel copies at a time
// (1 if parallel < 1) and returns one JobResult per job, in order. A failed
// disk does not stop the others (each keeps its journal and resumes next
// time); the returned error joins the failures. Two jobs with the same Dest
// are refused.
func CopyAll(ctx context.Context, src RangeReader, jobs []Job, parallel int, opts Options) ([]JobResult, error) {
	return CopyEach(ctx, src, jobs, parallel, opts, nil)
}

// CopyEach is CopyAll that also calls done with each job's outcome as
// soon as that job ends, from the goroutine that ran it, so that a caller
// can use a finished disk while the others still copy. done must not
// block for long.
func CopyEach(ctx context.Context, src RangeReader, jobs []Job, parallel int, opts Options, done func(JobResult)) ([]JobResult, error) {
	seen := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		abs, err := filepath.Abs(j.Dest)
		if err != nil {
			return nil, fmt.Errorf("destination %q: %w", j.Dest, err)
		}
		if seen[abs] {
			return nil, fmt.Errorf("two disks are to be copied to %s", abs)
		}
		seen[abs] = true
	}
	if parallel < 1 {
		parallel = 1
	}
	if opts.Progress != nil {
		var mu sync.Mutex
		p := opts.Progress
		opts.Progress = func(pr Progress) {
			mu.Lock()
			defer mu.Unlock()
			p(pr)
		}
	}
	out := make([]JobResult, len(jobs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		out[i].Job = j
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i].Err = fmt.Errorf("copy %s: %w", j.Disk.Path, ctx.Err())
				return
			}
			defer func() { <-sem }()
			out[i].Result, out[i].Err = Copy(ctx, src, j.Disk, j.Dest, opts)
			if done != nil {
				done(out[i])
			}
		}()
	}
	wg.Wait()
	var errs []error
	for _, r := range out {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return out, errors.Join(errs...)
}
