package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

func (r *run) chunkSize() int64 { return r.spec.chunkSize() }

// chunkSize is the copy's unit of copying and resumption.
func (s Spec) chunkSize() int64 {
	if s.CopyChunkSize > 0 {
		return s.CopyChunkSize
	}
	return transfer.DefaultChunkSize
}

// copyDisks copies every disk into the work folder, resuming from the
// transfer journals.
func (r *run) copyDisks(ctx context.Context) error {
	c, err := r.copyReady(ctx)
	if err != nil {
		return err
	}
	cp := r.newDiskCopy(ctx, c)
	// The copies run in their own goroutines; this one owns the record.
	// When disks need no conversion, each disk verified while others still
	// copy is recorded and sent to its DataVolume at once (pipeline.go).
	finished := make(chan transfer.JobResult, len(cp.jobs))
	var results []transfer.JobResult
	go func() {
		results, err = transfer.CopyEach(ctx, c, cp.jobs, len(cp.jobs), cp.opts, func(jr transfer.JobResult) { finished <- jr })
		close(finished)
	}()
	for open := true; open; {
		select {
		case <-cp.watch.wake:
			cp.tryLast(ctx)
		case jr, ok := <-finished:
			if !ok {
				open = false
				continue
			}
			cp.finished(ctx, jr)
		}
	}
	return r.recordCopies(ctx, cp, results, err)
}

// copyReady is what the copy needs before it starts: the host's client,
// usable local paths, the staging folder, and the chain files of disks
// that run on snapshots (see chain.go).
func (r *run) copyReady(ctx context.Context) (*esxi.Client, error) {
	c, err := r.esxiClient()
	if err != nil {
		return nil, err
	}
	if err := r.stagingReady(); err != nil {
		return nil, err
	}
	if err := r.copyChains(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// stagingReady checks the local paths and creates the staging folder.
func (r *run) stagingReady() error {
	if err := r.localPathsUsable(); err != nil {
		return err
	}
	if err := os.MkdirAll(r.spec.stagingDir(), 0o700); err != nil {
		return needsHuman("WorkDirUnusable", "cannot create the work folder "+r.spec.stagingDir(), "make work_dir writable, then run apply again", err)
	}
	return nil
}

// diskCopy is one copy of the disks that run on no snapshot: its jobs,
// and what the main goroutine tracks while they run.
type diskCopy struct {
	r      *run
	jobs   []transfer.Job
	byDest map[string]int // staged path -> disk index
	opts   transfer.Options
	watch  *copyWatch

	running   int
	ended     map[string]bool
	last      *lastUpload
	lastTried bool
	failed    bool
}

func (r *run) newDiskCopy(ctx context.Context, c *esxi.Client) *diskCopy {
	cp := &diskCopy{r: r, byDest: map[string]int{}, ended: map[string]bool{}, watch: newCopyWatch(r.chunkSize())}
	for i, d := range r.rec().Disks {
		if d.OnChain() {
			continue
		}
		cp.jobs = append(cp.jobs, transfer.Job{Disk: transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, Dest: r.spec.stagedPath(i)})
		cp.byDest[r.spec.stagedPath(i)] = i
	}
	cp.running = len(cp.jobs)
	// Streams per disk, each on its own connection (the host's setting,
	// within its max_sessions).
	var sources []transfer.RangeReader
	streams := c.Config().StreamsPerDisk
	for _, s := range c.StreamClients(streams) {
		sources = append(sources, s)
	}
	cp.opts = transfer.Options{
		ChunkSize: r.chunkSize(),
		Streams:   streams,
		Sources:   sources,
		Progress: func(p transfer.Progress) {
			cp.watch.progress(p)
			// From the copy's goroutines: the phase is given, not read
			// from the record the main goroutine saves.
			r.report(ctx, Event{Kind: EventProgress, Phase: record.PhasePreparing, Disk: cp.byDest[p.Dest], Transfer: Transfer{Kind: TransferCopy}, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Percent: p.Percent, Stages: p.Stages,
				Message: fmt.Sprintf("disk %d: copied %d of %d bytes (%.1f%%)", cp.byDest[p.Dest], p.BytesDone, p.BytesTotal, p.Percent)})
		},
	}
	return cp
}

// tryLast: once one disk still copies and enough of it is verified to
// judge it, it is sent as its copy is verified (startLastUpload), from
// then on.
func (cp *diskCopy) tryLast(ctx context.Context) {
	if cp.lastTried || cp.failed || cp.running != 1 || len(cp.jobs) < 2 || !cp.r.pipelined() {
		return
	}
	for _, j := range cp.jobs {
		if !cp.ended[j.Dest] && cp.watch.verifiedPrefix(j.Dest) >= j.Disk.SizeBytes/8 {
			cp.lastTried = true
			cp.last = cp.r.startLastUpload(ctx, cp.byDest[j.Dest], cp.watch)
		}
	}
}

// finished records a disk whose copy ended while others still copy and,
// when the disks need no conversion, sends it to its DataVolume at once.
func (cp *diskCopy) finished(ctx context.Context, jr transfer.JobResult) {
	cp.running--
	cp.ended[jr.Job.Dest] = true
	cp.failed = cp.failed || jr.Err != nil
	if jr.Err != nil || !cp.r.pipelined() || cp.running == 0 {
		return
	}
	i := cp.byDest[jr.Job.Dest]
	d := &cp.r.rec().Disks[i]
	d.SourceSHA256, d.ZeroBytes, d.Acquired = jr.Result.SHA256, jr.Result.ZeroBytes, true
	if cp.r.save(ctx) != nil {
		return
	}
	cp.tryLast(ctx) // before this disk's upload, so that the two overlap
	cp.r.uploadEarly(ctx, i, false)
}

// recordCopies records every disk's checksum, ends the last disk's send,
// and returns the worst of the copies' errors (err is CopyEach's own).
func (r *run) recordCopies(ctx context.Context, cp *diskCopy, results []transfer.JobResult, err error) error {
	rec := r.rec()
	var worst error
	worstRank := -1
	for _, jr := range results {
		i := cp.byDest[jr.Job.Dest]
		d := &rec.Disks[i]
		if isNoSpace(jr.Err) {
			jr.Err = r.noSpace(fmt.Sprintf("copying disk %d", i), jr.Err)
		}
		if jr.Err != nil {
			class, _ := classify(jr.Err)
			rank := map[fault.Class]int{fault.Transient: 0, fault.Interrupted: 1, fault.Permanent: 2, fault.NeedsHuman: 3}[class]
			if rank > worstRank {
				worst, worstRank = fmt.Errorf("disk %d (%s): %w", i, d.SourcePath, jr.Err), rank
			}
			continue
		}
		d.SourceSHA256, d.ZeroBytes, d.Acquired = jr.Result.SHA256, jr.Result.ZeroBytes, true
	}
	if cp.last != nil {
		var copyErr error
		for _, jr := range results {
			if jr.Job.Dest == cp.last.dest {
				copyErr = jr.Err
			}
		}
		if copyErr == nil && err != nil {
			copyErr = err
		}
		r.finishLastUpload(ctx, cp.last, copyErr)
	}
	if worst == nil && err != nil {
		worst = err
		if isNoSpace(err) {
			worst = r.noSpace("copying the disks", err)
		}
	}
	if worst != nil {
		// Keep the evidence of the disks that did finish.
		if serr := r.save(context.WithoutCancel(ctx)); serr != nil {
			return errors.Join(worst, serr)
		}
		return worst
	}
	now := r.now()
	stamp(&rec.Timestamps.Acquired, now)
	rec.SetCondition(now, record.CondDiskAcquired, true, "Copied", fmt.Sprintf("%d disk(s) copied and checksummed", len(rec.Disks)))
	return nil
}

// copyChains copies the chain files of every disk that runs on snapshots.
// The plan comes from the source as observed now; a plan that differs from
// the recorded one (a snapshot taken or removed since) starts that disk
// over. Descriptors are read whole and written durably; extent files go
// through transfer.CopyAll, resuming from their journals.
func (r *run) copyChains(ctx context.Context, c *esxi.Client) error {
	rec := r.rec()
	var jobs []transfer.Job
	var refs []chainRef
	for i := range rec.Disks {
		d := &rec.Disks[i]
		if r.src != nil && i < len(r.src.Disks) {
			if plan := chainPlan(r.src.Disks[i].Chain); !sameChain(plan, d.Chain) {
				if err := r.removeChainCopies(i); err != nil {
					return err
				}
				d.Chain, d.Acquired, d.SourceSHA256, d.GuestSHA256, d.ZeroBytes = plan, false, "", "", 0
			}
		}
		if !d.OnChain() {
			continue
		}
		if err := r.copyChainDescriptors(ctx, c, i); err != nil {
			return err
		}
		j, rf, err := r.chainExtentJobs(ctx, c, i)
		if err != nil {
			return err
		}
		jobs, refs = append(jobs, j...), append(refs, rf...)
	}
	if len(jobs) == 0 {
		return nil
	}
	results, err := transfer.CopyAll(ctx, c, jobs, len(jobs), transfer.Options{
		ChunkSize: r.chunkSize(),
		Progress: func(p transfer.Progress) {
			for n, j := range jobs {
				if j.Dest == p.Dest {
					r.report(ctx, Event{Kind: EventProgress, Disk: refs[n].disk, Transfer: Transfer{Kind: TransferCopy, File: p.Source}, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Percent: p.Percent,
						Message: fmt.Sprintf("disk %d: snapshot chain file %s: copied %d of %d bytes (%.1f%%)", refs[n].disk, p.Source, p.BytesDone, p.BytesTotal, p.Percent)})
				}
			}
		},
	})
	for n, jr := range results {
		if jr.Err == nil {
			f := &rec.Disks[refs[n].disk].Chain[refs[n].file]
			if f.SHA256 != "" && f.SHA256 != jr.Result.SHA256 {
				rec.Disks[refs[n].disk].GuestSHA256 = ""
			}
			f.SHA256 = jr.Result.SHA256
		}
	}
	if err != nil {
		if isNoSpace(err) {
			err = r.noSpace("copying the snapshot chains", err)
		}
		// Keep the evidence of the files that did finish.
		if serr := r.save(context.WithoutCancel(ctx)); serr != nil {
			return errors.Join(err, serr)
		}
		return err
	}
	for i := range rec.Disks {
		if rec.Disks[i].OnChain() {
			rec.Disks[i].Acquired = true
		}
	}
	return nil
}

// chainRef is a chain file's place in the record: disk and file index.
type chainRef struct{ disk, file int }

// copyChainDescriptors reads disk i's chain descriptors whole and writes
// them durably, recording their sizes and checksums; a descriptor that
// changed since the chain was flattened makes it flatten again.
func (r *run) copyChainDescriptors(ctx context.Context, c *esxi.Client, i int) error {
	d := &r.rec().Disks[i]
	for k := range d.Chain {
		f := &d.Chain[k]
		if f.Kind == record.ChainFileExtent {
			continue
		}
		text, err := c.ReadDescriptor(ctx, f.SourcePath)
		if err != nil {
			return fmt.Errorf("disk %d: reading the snapshot descriptor %s: %w", i, f.SourcePath, err)
		}
		sum := diskdigest.Bytes([]byte(text))
		if f.SHA256 != "" && f.SHA256 != sum && d.GuestSHA256 != "" {
			// The descriptor changed since the chain was flattened.
			d.GuestSHA256, d.SourceSHA256 = "", ""
		}
		if err := durable.WriteFile(r.spec.chainLocalPath(i, *f), []byte(text)); err != nil {
			if isNoSpace(err) {
				return r.noSpace(fmt.Sprintf("copying the chain of disk %d", i), err)
			}
			return needsHuman("WorkDirUnusable", "cannot write "+r.spec.chainLocalPath(i, *f), "make work_dir writable, then run apply again", err)
		}
		f.Bytes, f.SHA256 = int64(len(text)), sum
	}
	return nil
}

// chainExtentJobs sizes disk i's chain extents in one call and returns a
// copy job for each; an extent whose size changed is copied again.
func (r *run) chainExtentJobs(ctx context.Context, c *esxi.Client, i int) ([]transfer.Job, []chainRef, error) {
	d := &r.rec().Disks[i]
	var extents []string
	for _, f := range d.Chain {
		if f.Kind == record.ChainFileExtent {
			extents = append(extents, f.SourcePath)
		}
	}
	sizes, err := c.FileSizes(ctx, extents...)
	if err != nil {
		return nil, nil, fmt.Errorf("disk %d: sizing the snapshot chain's files: %w", i, err)
	}
	var jobs []transfer.Job
	var refs []chainRef
	for k := range d.Chain {
		f := &d.Chain[k]
		if f.Kind != record.ChainFileExtent {
			continue
		}
		n := sizes[f.SourcePath]
		if n <= 0 || n%512 != 0 {
			return nil, nil, permanent("ChainFileUnreadable", fmt.Sprintf("disk %d: the snapshot chain's file %s is %d bytes, not whole 512-byte sectors: it is not a VMDK extent ESXi wrote", i, f.SourcePath, n),
				"check the file on the host (vmkfstools -x check on its descriptor); consolidate the snapshots in the host client if the chain is damaged, then run apply again", nil)
		}
		if f.Bytes != n {
			f.SHA256 = ""
		}
		f.Bytes = n
		jobs = append(jobs, transfer.Job{Disk: transfer.Disk{Path: f.SourcePath, SizeBytes: n}, Dest: r.spec.chainLocalPath(i, *f)})
		refs = append(refs, chainRef{i, k})
	}
	return jobs, refs, nil
}

// removeChainCopies deletes disk i's chain copies and flattened image
// (all derived paths; missing files are fine).
func (r *run) removeChainCopies(i int) error {
	var errs []error
	d := r.rec().Disks[i]
	for _, f := range d.Chain {
		p := r.spec.chainLocalPath(i, f)
		if f.Kind == record.ChainFileExtent {
			errs = append(errs, transfer.Remove(p))
			continue
		}
		errs = append(errs, removeIfExists(p), removeIfExists(filepath.Join(r.spec.stagingDir(), chainDescriptorName(i, f.Link))))
	}
	if d.OnChain() {
		errs = append(errs, convert.Remove(r.spec.flattenedPath(i)), transfer.Remove(r.spec.stagedPath(i)))
	}
	return errors.Join(errs...)
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// The last disk's upload follows its copy. When the VM's other disks are
// copied and sent (pipeline.go) and one disk is still copying, its raw
// staging file is sent to its DataVolume as the copy verifies it: the
// upload reads the file only up to the chunks verified so far, in order,
// and waits for the next, so the upload ends moments after the copy
// instead of starting then.
//
// The guarantees stay those of any upload: only verified chunks leave,
// read back from the staging file as a later upload would read them; the
// record says what is being sent before the first byte leaves and
// Uploaded only once both the copy and the upload have ended. A copy
// that stops first stops the upload; a DataVolume that received the whole
// image of a copy that then failed is deleted, so that no unverified
// import is taken as done; anything else is left to Importing, which
// sends the completed staging file again.
//
// Only a dense disk is sent this way, raw: what is copied so far holds at
// least 7/8 data. A disk with more zeros goes as a qcow2 copy after its
// copy (uploadImage), keeping its zeros off the wire.

// copyWatch follows the verified prefix of every disk being copied; wake
// receives a value (without blocking the copy) when one grows.
type copyWatch struct {
	chunk  int64
	wake   chan struct{}
	mu     sync.Mutex
	prefix map[string]int64
	images map[string]*growingImage
}

func newCopyWatch(chunk int64) *copyWatch {
	return &copyWatch{chunk: chunk, wake: make(chan struct{}, 1), prefix: map[string]int64{}, images: map[string]*growingImage{}}
}

// progress takes a copy's progress report (from the copy's goroutines):
// its verified chunks are a prefix of the disk.
func (w *copyWatch) progress(p transfer.Progress) {
	v := min(int64(p.ChunksDone)*w.chunk, p.BytesTotal)
	w.mu.Lock()
	grew := v > w.prefix[p.Dest]
	if grew {
		w.prefix[p.Dest] = v
	}
	g := w.images[p.Dest]
	w.mu.Unlock()
	if g != nil {
		g.verified(v)
	}
	if grew {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// follow returns the staging file dest as a growing image, fed by the
// copy's further reports.
func (w *copyWatch) follow(ctx context.Context, dest string, size int64) *growingImage {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := newGrowingImage(ctx, dest, size)
	g.verified(w.prefix[dest])
	w.images[dest] = g
	return g
}

func (w *copyWatch) verifiedPrefix(dest string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.prefix[dest]
}

// growingImage reads a staging file as far as its copy has verified it.
// A read past that point waits for the next verified chunk, and fails
// with the copy's error (or the context's) when the copy stops first.
type growingImage struct {
	path string
	size int64

	mu     sync.Mutex
	cond   *sync.Cond
	prefix int64
	err    error
	f      *os.File
	pos    int64
	stopAt func() bool
}

func newGrowingImage(ctx context.Context, path string, size int64) *growingImage {
	g := &growingImage{path: path, size: size}
	g.cond = sync.NewCond(&g.mu)
	g.stopAt = context.AfterFunc(ctx, func() { g.stop(ctx.Err()) })
	return g
}

// verified says the first n bytes are verified.
func (g *growingImage) verified(n int64) {
	g.mu.Lock()
	if n > g.prefix {
		g.prefix = min(n, g.size)
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// stop makes reads past the verified prefix fail with err.
func (g *growingImage) stop(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

func (g *growingImage) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.pos >= g.size {
		g.mu.Unlock()
		return 0, io.EOF
	}
	for g.prefix <= g.pos && g.err == nil {
		g.cond.Wait()
	}
	if g.prefix <= g.pos {
		err := g.err
		g.mu.Unlock()
		return 0, err
	}
	if g.f == nil {
		f, err := os.Open(g.path)
		if err != nil {
			g.mu.Unlock()
			return 0, err
		}
		g.f = f
	}
	f, pos, want := g.f, g.pos, int(min(int64(len(p)), g.prefix-g.pos))
	g.mu.Unlock()
	n, err := f.ReadAt(p[:want], pos)
	if errors.Is(err, io.EOF) {
		// Verified bytes past the file's end are zeros the copy has not
		// written out yet (it sizes the file when it ends).
		clear(p[n:want])
		n, err = want, nil
	}
	g.mu.Lock()
	g.pos += int64(n)
	g.mu.Unlock()
	return n, err
}

// Seek supports what a retried upload needs: the position, and the start.
func (g *growingImage) Seek(off int64, whence int) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case whence == io.SeekCurrent && off == 0:
	case whence == io.SeekStart && off >= 0 && off <= g.size:
		g.pos = off
	default:
		return 0, fmt.Errorf("growing image: unsupported seek (%d, %d)", off, whence)
	}
	return g.pos, nil
}

func (g *growingImage) Close() error {
	g.stopAt()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f != nil {
		return g.f.Close()
	}
	return nil
}

// lastUpload is the upload of the disk still copying.
type lastUpload struct {
	i      int
	dest   string
	img    *growingImage
	cancel context.CancelFunc
	done   chan error
	// route is the way the upload took (UploadRequest.Route).
	route string
}

// startLastUpload starts sending disk i, the last one still copying,
// when it qualifies (see above); nil when it does not or CDI is not
// ready for it, leaving the disk to Importing.
func (r *run) startLastUpload(ctx context.Context, i int, watch *copyWatch) *lastUpload {
	d := &r.rec().Disks[i]
	dest := r.spec.stagedPath(i)
	if !r.pipelined() || d.OnChain() || d.Uploaded || d.Imported || r.spec.artifactPath(i, r.rec().StagingToken) != dest {
		return nil
	}
	prefix := watch.verifiedPrefix(dest)
	if prefix < d.SizeBytes/8 {
		return nil // too little copied to tell whether the disk is dense
	}
	var data int64
	f, err := os.Open(dest)
	if err != nil {
		return nil
	}
	err = sparsefile.Walk(f, 0, prefix, func(_, n int64, isData bool) error {
		if isData {
			data += n
		}
		return nil
	})
	f.Close()
	if err != nil || data < prefix-prefix/qcow2MinSaving {
		return nil
	}
	if err := r.importDisk(ctx, i, importCreated); err != nil {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copies (%v); Importing sends it", i, err)})
		return nil
	}
	if err := r.waitUploadReady(ctx, i); err != nil {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copies (%v); Importing sends it", i, err)})
		return nil
	}
	// What is being sent, before it leaves; its SHA-256 is the copy's,
	// known when the copy ends.
	d.UploadFormat, d.UploadBytes, d.UploadSHA256 = string(convert.Raw), d.SizeBytes, ""
	if err := r.save(ctx); err != nil {
		return nil
	}
	uctx, cancel := context.WithCancel(ctx)
	lu := &lastUpload{i: i, dest: dest, img: watch.follow(uctx, dest, d.SizeBytes), cancel: cancel, done: make(chan error, 1)}
	size := d.SizeBytes
	req := UploadRequest{
		Namespace: r.spec.Namespace, DataVolume: d.DataVolume, Path: dest, Size: size, Body: lu.img,
		ProxyURL: r.spec.Transport.UploadProxyURL, CAPEM: r.spec.Transport.UploadProxyCAPEM, Insecure: r.spec.Transport.Insecure,
		ServerName: r.spec.Transport.UploadProxyServerName,
		// From the upload's goroutine: the phase is given.
		Progress: r.uploadProgress(ctx, i, size, record.PhasePreparing, fmt.Sprintf("disk %d, sent as it copies", i)),
		// Also from the upload's goroutine: read once done is.
		Route: func(route string) {
			lu.route = route
			r.report(ctx, Event{Kind: EventInfo, Phase: record.PhasePreparing, Message: fmt.Sprintf("disk %d: uploading through %s", i, route)})
		},
	}
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: sending its image to DataVolume %s as its copy is verified", i, d.DataVolume)})
	go func() { lu.done <- r.e.deps.Uploader.Upload(uctx, req) }()
	return lu
}

// finish ends the last disk's upload once its copy has ended (copyErr),
// on the goroutine that owns the record, and records Uploaded when both
// succeeded.
func (r *run) finishLastUpload(ctx context.Context, lu *lastUpload, copyErr error) {
	d := &r.rec().Disks[lu.i]
	if copyErr != nil {
		lu.img.stop(copyErr)
		lu.cancel()
	}
	err := <-lu.done
	lu.cancel()
	lu.img.Close()
	switch {
	case copyErr == nil && err == nil:
		d.Uploaded, d.UploadSHA256, d.UploadRoute = true, d.SourceSHA256, lu.route
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: its image reached DataVolume %s as its copy ended", lu.i, d.DataVolume)})
	case copyErr != nil && err == nil:
		// The whole image left, but the copy did not complete: the
		// DataVolume must not count as imported.
		if derr := r.e.deps.Kube.DeleteDataVolume(context.WithoutCancel(ctx), r.spec.Namespace, d.DataVolume); derr == nil {
			d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = "", false, "", ""
		}
	case ctx.Err() == nil:
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copied (%v); Importing sends it", lu.i, err)})
	}
}

// waitUploadReady waits until CDI's upload pod for disk i's DataVolume
// is ready.
func (r *run) waitUploadReady(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	dvChanges := r.e.wake.follow(kube.WatchDataVolumes, r.spec.Namespace, d.DataVolume)
	defer dvChanges.stop()
	wait := r.pollerWaking(dvChanges)
	for {
		dv, err := r.e.deps.Kube.GetDataVolume(ctx, r.spec.Namespace, d.DataVolume)
		if err != nil {
			return err
		}
		if string(dv.UID) != d.DataVolumeUID || dv.Spec.Source == nil || dv.Spec.Source.Upload == nil {
			return fmt.Errorf("DataVolume %s changed", d.DataVolume)
		}
		switch dvKind(dv.Status.Phase) {
		case dvUploadReady:
			return nil
		case dvPreparing, dvAwaitingConsumer:
			// CDI is preparing its upload pod.
		default:
			return fmt.Errorf("DataVolume %s is %s", d.DataVolume, dv.Status.Phase)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}
