package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// A disk that runs on snapshots is migrated as the guest sees it now:
// Preparing copies every file of its chain (descriptors read whole, extent
// files with the chunked, resumable, verified copy and its journal) into
// the migration's folder; Converting rebuilds the chain there with
// descriptors naming only the local copies, checks CID/parentCID, flattens
// it with qemu-img and stages the flattened image as the disk's raw copy.
// The guest-visible SHA-256 becomes the disk's SourceSHA256: what the
// destination must hold. The source is only read: its snapshots are never
// removed or consolidated.
//
// Local file names are derived from the disk's index and the link's and
// extent's positions, never read from the record:
//
//	disk-<i>-link-<k>.source.vmdk   descriptor as read from the host
//	disk-<i>-link-<k>.vmdk          descriptor rewritten for the local chain
//	disk-<i>-link-<k>-extent-<e>    extent file copy (with its journal)
//	disk-<i>-flattened.raw          qemu-img's output, until staged

// Kinds of ChainFileEvidence.
const (
	ChainFileDescriptor = "descriptor"
	ChainFileExtent     = "extent"
)

// ChainFileEvidence is one file of a disk's snapshot chain.
type ChainFileEvidence struct {
	// Link is the link's position, 0 for the descriptor the VM runs on,
	// the last for the base; Extent the extent's position in its link.
	Link   int `json:"link"`
	Extent int `json:"extent,omitempty"`
	// Kind is "descriptor" or "extent".
	Kind string `json:"kind"`
	// Format is the link's createType ("seSparse", "vmfsSparse", "vmfs").
	Format string `json:"format"`
	// SourcePath is the file on the host.
	SourcePath string `json:"sourcePath"`
	// CID and ParentCID are the descriptor's (descriptors only).
	CID       string `json:"cid,omitempty"`
	ParentCID string `json:"parentCID,omitempty"`
	// Bytes and SHA256 are the copied file's length and hex SHA-256.
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// chainPlan lists the files of a disk's chain, top first, each link's
// descriptor before its extents; nil when the disk runs on no snapshot.
func chainPlan(ch *esxi.DiskChain) []ChainFileEvidence {
	if ch == nil {
		return nil
	}
	var out []ChainFileEvidence
	for k, l := range ch.Links {
		out = append(out, ChainFileEvidence{Link: k, Kind: ChainFileDescriptor, Format: l.CreateType, SourcePath: l.DescriptorPath, CID: l.CID, ParentCID: l.ParentCID})
		for e, p := range l.ExtentPaths {
			out = append(out, ChainFileEvidence{Link: k, Extent: e, Kind: ChainFileExtent, Format: l.CreateType, SourcePath: p})
		}
	}
	return out
}

// sameChain reports whether two plans name the same files in the same
// places.
func sameChain(a, b []ChainFileEvidence) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Link != b[i].Link || a[i].Extent != b[i].Extent || a[i].Kind != b[i].Kind || a[i].SourcePath != b[i].SourcePath {
			return false
		}
	}
	return true
}

// chainLocalPath is where a chain file of disk i is copied.
func (s Spec) chainLocalPath(i int, f ChainFileEvidence) string {
	if f.Kind == ChainFileDescriptor {
		return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d-link-%d.source.vmdk", i, f.Link))
	}
	return filepath.Join(s.stagingDir(), chainExtentName(i, f.Link, f.Extent))
}

func chainDescriptorName(i, link int) string { return fmt.Sprintf("disk-%d-link-%d.vmdk", i, link) }

func chainExtentName(i, link, extent int) string {
	return fmt.Sprintf("disk-%d-link-%d-extent-%d", i, link, extent)
}

// flattenedPath is where earlier versions flattened disk i's chain before
// staging it; it is removed when found.
func (s Spec) flattenedPath(i int) string {
	return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d-flattened.raw", i))
}

// onChain reports a disk that runs on a snapshot chain.
func (d *DiskEvidence) onChain() bool { return len(d.Chain) > 0 }

// copyChains copies the chain files of every disk that runs on snapshots.
// The plan comes from the source as observed now; a plan that differs from
// the recorded one (a snapshot taken or removed since) starts that disk
// over. Descriptors are read whole and written durably; extent files go
// through transfer.CopyAll, resuming from their journals.
func (r *run) copyChains(ctx context.Context, c *esxi.Client) error {
	rec := r.rec()
	type ref struct{ disk, file int }
	var jobs []transfer.Job
	var refs []ref
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
		if !d.onChain() {
			continue
		}
		var extents []string
		for k := range d.Chain {
			f := &d.Chain[k]
			if f.Kind == ChainFileExtent {
				extents = append(extents, f.SourcePath)
				continue
			}
			text, err := c.ReadDescriptor(ctx, f.SourcePath)
			if err != nil {
				return fmt.Errorf("disk %d: reading the snapshot descriptor %s: %w", i, f.SourcePath, err)
			}
			sum := sha256.Sum256([]byte(text))
			if h := hex.EncodeToString(sum[:]); f.SHA256 != "" && f.SHA256 != h && d.GuestSHA256 != "" {
				// The descriptor changed since the chain was flattened.
				d.GuestSHA256, d.SourceSHA256 = "", ""
			}
			if err := durable.WriteFile(r.spec.chainLocalPath(i, *f), []byte(text)); err != nil {
				if isNoSpace(err) {
					return r.noSpace(fmt.Sprintf("copying the chain of disk %d", i), err)
				}
				return needsHuman("WorkDirUnusable", "cannot write "+r.spec.chainLocalPath(i, *f), "make work_dir writable, then run apply again", err)
			}
			f.Bytes, f.SHA256 = int64(len(text)), hex.EncodeToString(sum[:])
		}
		sizes, err := c.FileSizes(ctx, extents...)
		if err != nil {
			return fmt.Errorf("disk %d: sizing the snapshot chain's files: %w", i, err)
		}
		for k := range d.Chain {
			f := &d.Chain[k]
			if f.Kind != ChainFileExtent {
				continue
			}
			n := sizes[f.SourcePath]
			if n <= 0 || n%512 != 0 {
				return permanent("ChainFileUnreadable", fmt.Sprintf("disk %d: the snapshot chain's file %s is %d bytes, not whole 512-byte sectors: it is not a VMDK extent ESXi wrote", i, f.SourcePath, n),
					"check the file on the host (vmkfstools -x check on its descriptor); consolidate the snapshots in the host client if the chain is damaged, then run apply again", nil)
			}
			if f.Bytes != n {
				f.SHA256 = ""
			}
			f.Bytes = n
			jobs = append(jobs, transfer.Job{Disk: transfer.Disk{Path: f.SourcePath, SizeBytes: n}, Dest: r.spec.chainLocalPath(i, *f)})
			refs = append(refs, ref{i, k})
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	results, err := transfer.CopyAll(ctx, c, jobs, len(jobs), transfer.Options{
		ChunkSize: r.chunkSize(),
		Progress: func(p transfer.Progress) {
			for n, j := range jobs {
				if j.Dest == p.Dest {
					r.emit(Event{Kind: EventProgress, Disk: refs[n].disk, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Percent: p.Percent,
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
		if rec.Disks[i].onChain() {
			rec.Disks[i].Acquired = true
		}
	}
	return nil
}

// removeChainCopies deletes disk i's chain copies and flattened image
// (all derived paths; missing files are fine).
func (r *run) removeChainCopies(i int) error {
	var errs []error
	d := r.rec().Disks[i]
	for _, f := range d.Chain {
		p := r.spec.chainLocalPath(i, f)
		if f.Kind == ChainFileExtent {
			errs = append(errs, transfer.Remove(p))
			continue
		}
		errs = append(errs, removeIfExists(p), removeIfExists(filepath.Join(r.spec.stagingDir(), chainDescriptorName(i, f.Link))))
	}
	if d.onChain() {
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

// maxParallelFlattens bounds the chains flattened at once: each is bound
// by one core (reading, hashing, writing), and more would only share the
// same disk.
const maxParallelFlattens = 2

// flattenChains makes the staged raw copy of every disk that runs on a
// snapshot chain, up to maxParallelFlattens at once. The flattens run in
// their own goroutines; this one owns the record, records each as it ends
// and, when the images need no conversion, sends a flattened disk to its
// DataVolume while others still flatten (as copies do, pipeline.go). Every
// flatten runs to its end even when another fails, so its staged copy is
// complete for the next attempt; the first failure is returned.
func (r *run) flattenChains(ctx context.Context) error {
	var plans []*flattenPlan
	for i := range r.rec().Disks {
		f, err := r.planFlatten(i)
		if err != nil {
			for _, f := range plans {
				f.chain.Close()
			}
			return err
		}
		if f != nil {
			plans = append(plans, f)
		}
	}
	type ended struct {
		f   *flattenPlan
		res transfer.Result
		err error
	}
	done := make(chan ended, len(plans))
	slots := make(chan struct{}, maxParallelFlattens)
	for _, f := range plans {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			res, err := f.copy(ctx)
			done <- ended{f, res, err}
		}()
	}
	var first error
	for left := len(plans); left > 0; left-- {
		e := <-done
		if err := r.recordFlatten(ctx, e.f, e.res, e.err); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if first == nil && left > 1 && r.uploadsEachDisk() {
			r.uploadEarly(ctx, e.f.i, true)
		}
	}
	return first
}

// flattenPlan is one disk's flatten: its chain, checked and open, and
// where its guest-visible content goes.
type flattenPlan struct {
	i      int
	chain  *vmdk.Chain
	disk   transfer.Disk
	staged string
	chunk  int64
}

// copy runs the journaled copy of the chain's content into the staged
// file, then closes the chain. It reads nothing of the record, so it may
// run beside the goroutine that owns it.
func (f *flattenPlan) copy(ctx context.Context) (transfer.Result, error) {
	defer f.chain.Close()
	return transfer.Copy(ctx, chainContent{f.chain}, f.disk, f.staged, transfer.Options{ChunkSize: f.chunk})
}

// recordFlatten records the end of disk i's flatten (or its failure, as
// what to do next) and saves the record.
func (r *run) recordFlatten(ctx context.Context, f *flattenPlan, res transfer.Result, err error) error {
	i := f.i
	if isNoSpace(err) {
		return r.noSpace(fmt.Sprintf("flattening the snapshot chain of disk %d", i), err)
	}
	if err != nil {
		return fmt.Errorf("disk %d: flattening its snapshot chain: %w", i, err)
	}
	d := &r.rec().Disks[i]
	d.GuestSHA256, d.SourceSHA256, d.ZeroBytes = res.SHA256, res.SHA256, res.ZeroBytes
	r.emit(Event{Kind: EventProgress, Disk: i, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
		Message: fmt.Sprintf("disk %d: snapshot chain (%s) flattened (guest sha256 %s)", i, chainSummary(d.Chain), d.GuestSHA256)})
	return r.save(ctx)
}

// planFlatten prepares disk i's flatten, or returns nil when the disk runs
// on no chain or was flattened (or converted) already: the copied files
// are checked against their recorded SHA-256 (a file that fails goes back
// to Preparing) and the chain is rebuilt and opened. Its guest-visible
// content is then staged with the same journaled copy as any disk, so that
// the per-disk conversion that follows finds a complete staged copy. A
// crash anywhere redoes the flatten from the verified files.
func (r *run) planFlatten(i int) (*flattenPlan, error) {
	rec := r.rec()
	d := &rec.Disks[i]
	if !d.onChain() {
		return nil, nil
	}
	staged := r.spec.stagedPath(i)
	disk := transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}
	st, err := transfer.Inspect(disk, staged, r.chunkSize())
	if err != nil {
		return nil, err
	}
	if st.State == transfer.StateComplete && d.GuestSHA256 != "" && st.Result.SHA256 == d.GuestSHA256 && d.SourceSHA256 == d.GuestSHA256 {
		return nil, nil
	}
	if d.ArtifactSHA256 != "" && d.GuestSHA256 != "" && r.spec.artifactPath(i) != staged {
		if _, err := os.Stat(r.spec.artifactPath(i)); err == nil {
			// Converted already; the staged copy is not needed again.
			return nil, nil
		}
	}
	back := func(why string) error {
		d.Acquired = false
		return &backTo{phase: PhasePreparing, reason: fmt.Sprintf("the copied snapshot chain of disk %d: %s", i, why)}
	}
	links := map[int]*convert.ChainLink{}
	var order []int
	for _, f := range d.Chain {
		local := r.spec.chainLocalPath(i, f)
		if f.SHA256 == "" {
			return nil, back(f.SourcePath + " was not copied")
		}
		l := links[f.Link]
		if l == nil {
			l = &convert.ChainLink{DescriptorName: chainDescriptorName(i, f.Link)}
			links[f.Link] = l
			order = append(order, f.Link)
		}
		if f.Kind == ChainFileDescriptor {
			b, err := os.ReadFile(local)
			if err != nil {
				return nil, back(fmt.Sprintf("%s: %v", local, err))
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 {
				return nil, back(local + " no longer matches its recorded SHA-256")
			}
			l.Descriptor = string(b)
			continue
		}
		est, err := transfer.Inspect(transfer.Disk{Path: f.SourcePath, SizeBytes: f.Bytes}, local, r.chunkSize())
		if err != nil {
			return nil, err
		}
		if est.State != transfer.StateComplete || est.Result.SHA256 != f.SHA256 {
			return nil, back(fmt.Sprintf("the copy of %s is %s", f.SourcePath, est.State))
		}
		l.ExtentNames = append(l.ExtentNames, filepath.Base(local))
	}
	if len(order) > vmdk.MaxChainDepth {
		return nil, permanent("ChainTooDeep", fmt.Sprintf("disk %d runs on %d links, more than %d", i, len(order), vmdk.MaxChainDepth), "consolidate the snapshots on the source, then run apply again", nil)
	}
	var chain []convert.ChainLink
	for k := range order {
		l := links[k]
		if l == nil {
			return nil, back(fmt.Sprintf("link %d is missing from the recorded chain", k))
		}
		chain = append(chain, *l)
	}
	// The chain is flattened straight into the staged copy: the journaled
	// copy reads the guest-visible content through the provider's chain
	// reader (see convert.FlattenChain for why not qemu-img), hashes it
	// and leaves zeros as holes in one pass, and resumes after a crash.
	c, pc, err := convert.OpenPreparedChain(r.spec.stagingDir(), chain)
	if errors.Is(err, vmdk.ErrCIDMismatch) || errors.Is(err, vmdk.ErrParentMissing) {
		return nil, needsHuman("ChainInconsistent", fmt.Sprintf("disk %d: the copied snapshot chain cannot be read consistently: %v", i, err),
			"check the chain on the host (a parent written after its snapshot was taken, or a missing parent); consolidate the snapshots in the host client, then run apply again", err)
	}
	if err != nil {
		return nil, fmt.Errorf("disk %d: flattening its snapshot chain: %w", i, err)
	}
	if pc.CapacityBytes != d.SizeBytes {
		c.Close()
		return nil, permanent("ChainSizeMismatch", fmt.Sprintf("disk %d: the flattened chain holds %d bytes, the disk %d", i, pc.CapacityBytes, d.SizeBytes),
			"report this as a bug with the disk's descriptors", nil)
	}
	if err := convert.Remove(r.spec.flattenedPath(i)); err != nil { // left by an earlier version
		c.Close()
		return nil, err
	}
	return &flattenPlan{i: i, chain: c, disk: disk, staged: staged, chunk: r.chunkSize()}, nil
}

// chainContent reads ranges of a snapshot chain's guest-visible content,
// for flattening it with the journaled copy. A writer that takes zero runs
// as runs gets them without reading: what no link allocates over the
// base's holes, and what a delta zeroes (vmdk.Chain.ZeroRun); reads that
// turn out all zeros reach it as runs too.
type chainContent struct{ c *vmdk.Chain }

func (cc chainContent) ReadRange(ctx context.Context, _ string, offset, length int64, w io.Writer) (int64, error) {
	zw, zeroRuns := w.(interface{ WriteZeros(int64) error })
	var buf []byte
	var done int64
	for done < length {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if zeroRuns {
			z, err := cc.c.ZeroRun(offset+done, length-done)
			if err != nil {
				return done, err
			}
			if z > 0 {
				if err := zw.WriteZeros(z); err != nil {
					return done, err
				}
				done += z
				continue
			}
		}
		if buf == nil {
			buf = make([]byte, min(length, 1<<20))
		}
		p := buf[:min(int64(len(buf)), length-done)]
		if _, err := cc.c.ReadAt(p, offset+done); err != nil && !errors.Is(err, io.EOF) {
			return done, err
		}
		var err error
		if zeroRuns && allZero(p) {
			err = zw.WriteZeros(int64(len(p)))
		} else {
			_, err = w.Write(p)
		}
		if err != nil {
			return done, err
		}
		done += int64(len(p))
	}
	return done, nil
}

func allZero(p []byte) bool {
	for len(p) > 0 {
		k := min(len(p), len(zeroBuf))
		if !bytes.Equal(p[:k], zeroBuf[:k]) {
			return false
		}
		p = p[k:]
	}
	return true
}

var zeroBuf [64 << 10]byte

// localFile reads ranges of a file on this machine, for staging a local
// image with the journaled copy.
type localFile string

func (l localFile) ReadRange(_ context.Context, _ string, offset, length int64, w io.Writer) (int64, error) {
	f, err := os.Open(string(l))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(w, io.NewSectionReader(f, offset, length))
	if err == nil && n != length {
		err = fmt.Errorf("%s: read %d bytes at offset %d, expected %d", l, n, offset, length)
	}
	return n, err
}

// chainSummary describes a disk's recorded chain for messages.
func chainSummary(files []ChainFileEvidence) string {
	var formats []string
	for _, f := range files {
		if f.Kind == ChainFileDescriptor {
			formats = append(formats, f.Format)
		}
	}
	return strings.Join(formats, " over ")
}
