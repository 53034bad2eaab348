package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

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
}

// startLastUpload starts sending disk i, the last one still copying,
// when it qualifies (see above); nil when it does not or CDI is not
// ready for it, leaving the disk to Importing.
func (r *run) startLastUpload(ctx context.Context, i int, watch *copyWatch) *lastUpload {
	d := &r.rec().Disks[i]
	dest := r.spec.stagedPath(i)
	if !r.pipelined() || d.onChain() || d.Uploaded || d.Imported || r.spec.artifactPath(i) != dest {
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
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copies (%v); Importing sends it", i, err)})
		return nil
	}
	if err := r.waitUploadReady(ctx, i); err != nil {
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copies (%v); Importing sends it", i, err)})
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
		// From the upload's goroutine: the phase is given.
		Progress: r.uploadProgress(i, size, PhasePreparing, fmt.Sprintf("disk %d, sent as it copies", i)),
	}
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: sending its image to DataVolume %s as its copy is verified", i, d.DataVolume)})
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
		d.Uploaded, d.UploadSHA256 = true, d.SourceSHA256
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: its image reached DataVolume %s as its copy ended", lu.i, d.DataVolume)})
	case copyErr != nil && err == nil:
		// The whole image left, but the copy did not complete: the
		// DataVolume must not count as imported.
		if derr := r.e.deps.Kube.DeleteDataVolume(context.WithoutCancel(ctx), r.spec.Namespace, d.DataVolume); derr == nil {
			d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = "", false, "", ""
		}
	case ctx.Err() == nil:
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent while it copied (%v); Importing sends it", lu.i, err)})
	}
}

// waitUploadReady waits until CDI's upload pod for disk i's DataVolume
// is ready.
func (r *run) waitUploadReady(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	wait := r.poller()
	for {
		dv, err := r.e.deps.Kube.GetDataVolume(ctx, r.spec.Namespace, d.DataVolume)
		if err != nil {
			return err
		}
		if string(dv.UID) != d.DataVolumeUID || dv.Spec.Source == nil || dv.Spec.Source.Upload == nil {
			return fmt.Errorf("DataVolume %s changed", d.DataVolume)
		}
		switch dv.Status.Phase {
		case cdiv1beta1.UploadReady:
			return nil
		case "", cdiv1beta1.Pending, cdiv1beta1.PVCBound, cdiv1beta1.UploadScheduled, cdiv1beta1.WaitForFirstConsumer:
			// CDI is preparing its upload pod.
		default:
			return fmt.Errorf("DataVolume %s is %s", d.DataVolume, dv.Status.Phase)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}
