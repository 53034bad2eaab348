package copyjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// A disk that runs on snapshots is flattened into the claim as the guest
// sees it, with room for one delta file beside the disk, never a second
// copy of the disk:
//
//  1. the base (its flat extent) is copied into the target with the
//     journaled copy, exactly as a disk without snapshots;
//  2. each delta, oldest first, is copied whole into <target>.delta-<k>
//     (its own journal beside it), its grains are written over the target
//     (vmdk.ApplyDelta), the target is fsynced, and only then the state
//     file <target>.chain records the delta as applied and the delta's
//     copy is removed;
//  3. the guest-visible SHA-256 is hashed from the target.
//
// The state file is written after the base's copy completed and after
// each delta was applied, never before: a worker killed at any instant
// finds either no state (nothing applied: the base's journal resumes the
// base), or the deltas applied so far, and a delta killed mid-apply is
// applied again from its copy, which the journal kept (applying is
// idempotent). A state that describes another chain (a snapshot taken or
// removed since, a claim reused) is never built on: the target, its
// journal and the state start over.

// For a Block-mode target the state and the delta copies cannot be beside
// the device: they are beside the journal, in the disk's journal claim
// (Spec.sideBase), and starting over never removes the device.

// chainState is <target>.chain.
type chainState struct {
	// Base and Size name the base the target was copied from.
	Base string `json:"base"`
	Size int64  `json:"size"`
	// BaseSHA256 and BaseChunks are the base copy's evidence.
	BaseSHA256 string `json:"base_sha256"`
	BaseChunks int    `json:"base_chunks"`
	// Applied are the deltas applied over it, oldest first.
	Applied []appliedDelta `json:"applied,omitempty"`
	// LeavesValid says that the leaves file (leavesPath) holds the leaf
	// hashes of the target with its first LeavesApplied deltas applied:
	// applying the next one re-hashes only the leaves it touched, and the
	// flattened disk's digest is diskdigest.FromLeaves of the file.
	LeavesValid   bool `json:"leaves_valid,omitempty"`
	LeavesApplied int  `json:"leaves_applied,omitempty"`
}

// leavesWhole reports whether the leaves file beside side has one hash
// per leaf of a disk of size bytes: one that does not is never built on
// (hashing the touched leaves into a short one would leave it whole in
// length, with zeros for the hashes it lacked).
func leavesWhole(side string, size int64) bool {
	fi, err := os.Stat(leavesPath(side))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == diskdigest.LeafCount(size)*diskdigest.Size
}

// leavesPath is the file of the flattened disk's leaf hashes
// (diskdigest.Size bytes per MiB), beside the chain state.
func leavesPath(side string) string { return side + ".leaves" }

type appliedDelta struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Chunks int    `json:"chunks"`
}

// chainStatePath is the state file of a target whose side files are
// named from side (Spec.sideBase).
func chainStatePath(side string) string { return side + ".chain" }

// deltaCopyPath is where delta k is copied before it is applied.
func deltaCopyPath(side string, k int) string { return side + ".delta-" + strconv.Itoa(k) }

// sideBase is what the files kept beside a copy are named from: with a
// journal_path (a Block-mode target's, since a device has nothing beside
// it, or one in the disk's journal claim) the journal without its suffix
// (disk-0.chain beside disk-0.journal), else the file target itself
// (disk.img.chain beside disk.img).
func (s Spec) sideBase() string {
	if s.JournalPath != "" {
		return strings.TrimSuffix(s.JournalPath, transfer.JournalSuffix)
	}
	return s.Target.Path
}

// builtOn reports whether st describes the base and a prefix of the
// deltas of s: the target can be finished from it.
func (st *chainState) builtOn(s Spec) bool {
	if st.Base != s.Disk.Path || st.Size != s.Disk.SizeBytes || st.BaseSHA256 == "" || len(st.Applied) > len(s.Deltas) {
		return false
	}
	for k, a := range st.Applied {
		if a.Path != s.Deltas[k].Path || a.Bytes != s.Deltas[k].SizeBytes {
			return false
		}
	}
	return true
}

func loadChainState(p string) (*chainState, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var st chainState
	if err := json.Unmarshal(b, &st); err != nil {
		// Written by durable.WriteFile: a torn file is not ours.
		return nil, nil
	}
	return &st, nil
}

func (st *chainState) save(p string) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return durable.WriteFile(p, b)
}

// chainCopy flattens the spec's chain into its target (see above).
type chainCopy struct {
	s     Spec
	src   transfer.RangeReader
	opts  transfer.Options
	total int64 // bytes of every file of the chain, for progress
	done  int64 // bytes of the files finished before the current one
	print func(transfer.Progress)
	// timing is where the pod's time went, for the result.
	timing Timing
}

// runChain flattens s's chain into its target and returns the result.
func runChain(ctx context.Context, s Spec, src transfer.RangeReader, opts transfer.Options) (Result, error) {
	c := &chainCopy{s: s, src: src, opts: opts, total: s.Disk.SizeBytes, print: opts.Progress}
	for _, d := range s.Deltas {
		c.total += d.SizeBytes
	}
	c.opts.Progress = c.progress
	side := s.sideBase()
	state := chainStatePath(side)
	st, err := loadChainState(state)
	if err != nil {
		return Result{}, err
	}
	if st != nil && !st.builtOn(s) {
		if err := c.startOver(); err != nil {
			return Result{}, err
		}
		st = nil
	}
	res := Result{}
	if st == nil {
		t0 := time.Now()
		opts := c.opts
		opts.KeepLeaves = diskdigest.LeafCount(s.Disk.SizeBytes)*diskdigest.Size <= maxKeptLeaves
		r, err := transfer.Copy(ctx, src, transfer.Disk{Path: s.Disk.Path, SizeBytes: s.Disk.SizeBytes}, s.Target.Path, opts)
		c.timing.add(&c.timing.CopySeconds, t0)
		if err != nil {
			return Result{}, err
		}
		c.timing.addStages(r.Stages)
		res.ChunksCopied, res.ChunksSkipped = r.ChunksCopied, r.ChunksSkipped
		st = &chainState{Base: s.Disk.Path, Size: s.Disk.SizeBytes, BaseSHA256: r.SHA256, BaseChunks: r.ChunksCopied + r.ChunksSkipped}
		// The base's leaves, as the copy checked them, are the target's
		// until a delta is applied: written before the state vouches for
		// them. A copy resumed from its journal has none, and the digest
		// hashes the target once to make them.
		if r.Leaves != nil {
			if err := durable.WriteFile(leavesPath(side), r.Leaves); err != nil {
				return Result{}, err
			}
			st.LeavesValid = true
		}
		if err := st.save(state); err != nil {
			return Result{}, err
		}
	} else {
		res.ChunksSkipped += st.BaseChunks
	}
	c.done = s.Disk.SizeBytes
	for k, a := range st.Applied {
		// Applied in an earlier run; its copy may have outlived the state.
		if err := removeCopy(deltaCopyPath(side, k)); err != nil {
			return Result{}, err
		}
		res.ChunksSkipped += a.Chunks
		c.done += a.Bytes
	}
	for k := len(st.Applied); k < len(s.Deltas); k++ {
		// With the leaves file holding the target before delta k, the
		// leaves the delta touches are hashed again as it is applied,
		// before the state says it was: a crash in between applies it
		// and hashes them again.
		leavesBefore := st.LeavesValid && st.LeavesApplied == k && leavesWhole(side, s.Disk.SizeBytes)
		a, r, err := c.apply(ctx, k, leavesBefore)
		if err != nil {
			return Result{}, err
		}
		if leavesBefore {
			st.LeavesApplied = k + 1
		} else {
			st.LeavesValid = false
		}
		res.ChunksCopied += r.ChunksCopied
		res.ChunksSkipped += r.ChunksSkipped
		st.Applied = append(st.Applied, a)
		if err := st.save(state); err != nil {
			return Result{}, err
		}
		if err := removeCopy(deltaCopyPath(side, k)); err != nil {
			return Result{}, err
		}
		c.done += a.Bytes
	}
	// A device may be larger than the disk: the guest's disk is its
	// first SizeBytes. A file is the disk, all of it.
	n := int64(-1)
	if s.Target.Kind == TargetBlock {
		n = s.Disk.SizeBytes
	}
	t0 := time.Now()
	sum, err := c.digest(ctx, st, n)
	c.timing.add(&c.timing.HashSeconds, t0)
	if err != nil {
		return Result{}, err
	}
	if sum.Bytes != s.Disk.SizeBytes {
		return Result{}, fmt.Errorf("the flattened disk %s is %d bytes, the base %d", s.Target.Path, sum.Bytes, s.Disk.SizeBytes)
	}
	res.OK, res.Digest, res.SHA256, res.Bytes, res.ZeroBytes, res.BaseSHA256 = true, diskdigest.Name, sum.SHA256, sum.Bytes, sum.HoleBytes, st.BaseSHA256
	for _, a := range st.Applied {
		res.Deltas = append(res.Deltas, DeltaResult{SHA256: a.SHA256, Bytes: a.Bytes})
	}
	res.Timing = c.timing.orNil()
	return res, nil
}

// apply copies delta k beside the target, applies it and syncs the
// target. With leaves, the leaves file holds the target before delta k:
// the leaves the delta touches are hashed again into it while the rest of
// the delta is applied (leafRehash), and it is synced too.
func (c *chainCopy) apply(ctx context.Context, k int, leaves bool) (appliedDelta, transfer.Result, error) {
	d := c.s.Deltas[k]
	cp := deltaCopyPath(c.s.sideBase(), k)
	opts := c.opts
	opts.JournalPath = "" // beside the delta's copy
	t0 := time.Now()
	r, err := transfer.Copy(ctx, c.src, transfer.Disk{Path: d.Path, SizeBytes: d.SizeBytes}, cp, opts)
	c.timing.add(&c.timing.CopySeconds, t0)
	if err != nil {
		return appliedDelta{}, r, err
	}
	c.timing.addStages(r.Stages)
	defer c.timing.add(&c.timing.ApplySeconds, time.Now())
	f, err := os.OpenFile(c.s.Target.Path, os.O_RDWR, 0)
	if err != nil {
		return appliedDelta{}, r, err
	}
	defer f.Close()
	var rehash *leafRehash
	var leafDone func(int64)
	if leaves {
		if rehash, err = c.startRehash(ctx); err != nil {
			return appliedDelta{}, r, err
		}
		defer rehash.stop()
		leafDone = rehash.add
	}
	_, err = vmdk.ApplyDeltaFunc(ctx, cp, vmdk.Format(d.Format), f, leafDone)
	if err != nil {
		if ctx.Err() != nil {
			return appliedDelta{}, r, err
		}
		// The copy's journal verified it against the host: a delta that
		// does not parse is what the host holds.
		return appliedDelta{}, r, classed(fault.Permanent, fmt.Errorf("snapshot delta %s: %w", d.Path, err))
	}
	if err := f.Sync(); err != nil {
		return appliedDelta{}, r, fmt.Errorf("fsync %s: %w", c.s.Target.Path, err)
	}
	if rehash != nil {
		if err := rehash.finish(); err != nil {
			return appliedDelta{}, r, err
		}
	}
	return appliedDelta{Path: d.Path, SHA256: r.SHA256, Bytes: d.SizeBytes, Chunks: r.ChunksCopied + r.ChunksSkipped}, r, nil
}

// digest is the flattened disk's: from the leaves file when it holds the
// target as it now is (only the leaves the deltas touched were hashed),
// else by hashing the target's first n bytes (all of it when n < 0),
// whose leaves are kept for the next round.
func (c *chainCopy) digest(ctx context.Context, st *chainState, n int64) (sparsefile.Sum, error) {
	side := c.s.sideBase()
	size := c.s.Disk.SizeBytes
	if st.LeavesValid && st.LeavesApplied == len(st.Applied) {
		leaves, err := os.ReadFile(leavesPath(side))
		if err == nil && int64(len(leaves)) == diskdigest.LeafCount(size)*diskdigest.Size {
			holes, err := sparsefile.HoleBytes(c.s.Target.Path, size)
			if err != nil {
				return sparsefile.Sum{}, err
			}
			return sparsefile.Sum{SHA256: diskdigest.FromLeaves(leaves), Bytes: size, HoleBytes: holes}, nil
		}
	}
	sum, leaves, err := sparsefile.HashPrefixLeaves(ctx, c.s.Target.Path, n)
	if err != nil {
		return sparsefile.Sum{}, err
	}
	if sum.Bytes != size {
		return sum, nil // the caller refuses it
	}
	if err := durable.WriteFile(leavesPath(side), leaves); err != nil {
		return sparsefile.Sum{}, err
	}
	st.LeavesValid, st.LeavesApplied = true, len(st.Applied)
	if err := st.save(chainStatePath(side)); err != nil {
		return sparsefile.Sum{}, err
	}
	return sum, nil
}

// maxKeptLeaves bounds the leaf hashes a base's copy holds in memory
// while its streams copy (those of a 2 TiB disk): a larger disk's are made
// by hashing the target once after the copy.
const maxKeptLeaves = 64 << 20

// maxRehashers bounds the goroutines of a leafRehash.
const maxRehashers = 4

// leafRehash hashes leaves of the target again into the leaves file as
// they are handed over, on as many goroutines as the pod has CPUs (at most
// maxRehashers), each reading the target through its own descriptor.
type leafRehash struct {
	ctx     context.Context
	cancel  context.CancelFunc
	lf      *os.File
	size    int64
	queue   chan int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	drained bool
}

func (c *chainCopy) startRehash(ctx context.Context) (*leafRehash, error) {
	lf, err := os.OpenFile(leavesPath(c.s.sideBase()), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	h := &leafRehash{lf: lf, size: c.s.Disk.SizeBytes, queue: make(chan int64, 256)}
	h.ctx, h.cancel = context.WithCancel(ctx)
	for range min(runtime.GOMAXPROCS(0), maxRehashers) {
		t, err := os.Open(c.s.Target.Path)
		if err != nil {
			h.stop()
			return nil, err
		}
		h.wg.Add(1)
		go h.work(t)
	}
	return h, nil
}

func (h *leafRehash) work(t *os.File) {
	defer h.wg.Done()
	defer t.Close()
	buf := make([]byte, diskdigest.LeafSize)
	for i := range h.queue {
		if h.ctx.Err() != nil {
			continue // drained, so that add never blocks
		}
		sum, err := sparsefile.HashLeaf(t, i, h.size, buf)
		if err == nil {
			if _, werr := h.lf.WriteAt(sum[:], i*diskdigest.Size); werr != nil {
				err = fmt.Errorf("update %s: %w", h.lf.Name(), werr)
			}
		}
		if err != nil {
			h.fail(err)
		}
	}
}

func (h *leafRehash) fail(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.mu.Unlock()
	h.cancel()
}

// add hands leaf i over; a device's leaves past the disk are not the
// disk's.
func (h *leafRehash) add(i int64) {
	if i < diskdigest.LeafCount(h.size) {
		h.queue <- i
	}
}

// finish waits for every leaf handed over and syncs the leaves file. A
// stopped context is an error: its goroutines skipped what was left.
func (h *leafRehash) finish() error {
	h.drain()
	if h.err != nil {
		return h.err
	}
	if err := h.ctx.Err(); err != nil {
		return err
	}
	if err := h.lf.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", h.lf.Name(), err)
	}
	return nil
}

// drain waits for the goroutines to hash what was handed over.
func (h *leafRehash) drain() {
	if !h.drained {
		h.drained = true
		close(h.queue)
		h.wg.Wait()
	}
}

// stop ends the goroutines and closes the leaves file; after finish, or
// instead of it when the apply failed.
func (h *leafRehash) stop() {
	h.drain()
	h.cancel()
	_ = h.lf.Close()
}

// progress reports a file's progress as the whole chain's.
func (c *chainCopy) progress(p transfer.Progress) {
	if c.print == nil {
		return
	}
	p.BytesDone += c.done
	p.BytesTotal = c.total
	p.Percent = float64(p.BytesDone) * 100 / float64(c.total)
	c.print(p)
}

// leaveChain starts the target over when it holds a chain's flattening
// and s copies a disk on no snapshot.
func leaveChain(s Spec) error {
	if _, err := os.Lstat(chainStatePath(s.sideBase())); err != nil {
		return nil
	}
	return (&chainCopy{s: s}).startOver()
}

// startOver removes the target (a file; a device is only written over),
// its journal, the state and every delta copy: they were built on another
// chain.
func (c *chainCopy) startOver() error {
	t, side := c.s.Target.Path, c.s.sideBase()
	paths := []string{side + transfer.JournalSuffix, chainStatePath(side), leavesPath(side)}
	if c.s.Target.Kind == TargetFile {
		paths = append(paths, t)
	}
	for k := range MaxDeltas {
		paths = append(paths, deltaCopyPath(side, k), deltaCopyPath(side, k)+transfer.JournalSuffix)
	}
	if c.s.JournalPath != "" && !slices.Contains(paths, c.s.JournalPath) {
		paths = append(paths, c.s.JournalPath)
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// clearJournalClaim removes, for a copy with a journal_path, the files in
// the journal's folder (the disk's journal claim, which holds nothing
// else) that are not named from the spec's side base: those of a claim
// replaced since (their names carry the old claim's ID), which would
// otherwise keep the room the delta copies need.
func clearJournalClaim(s Spec) error {
	if s.JournalPath == "" {
		return nil
	}
	dir, own := filepath.Split(s.sideBase())
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), own+".") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// removeCopy removes an applied delta's copy and its journal.
func removeCopy(p string) error {
	for _, q := range []string{p, p + transfer.JournalSuffix} {
		if err := os.Remove(q); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
