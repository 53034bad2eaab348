package engine

import (
	"context"
	"fmt"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// A disk on snapshots in cluster execution is flattened by its copy Job,
// in its claim (copyjob's chain.go): the base's flat extent is copied into
// the disk, then each delta file is copied into the disk's journal claim,
// its grains applied in place and the copy removed. The journal claim
// therefore needs room for the largest delta file (ensureJournalClaims).
// Migrations recorded before journal claims keep that room beside
// disk.img: their DataVolume asks for that much more storage and says so
// in AnnotationScratchBytes.
//
//	observe  the chain as the source holds it after the power-off (the
//	         top delta grows while the VM runs): every extent file's size,
//	         in one call, before the claim is made
//	act      the copy Job is told the base and the deltas, oldest first
//	record   each extent's size before the claim and the Job exist (so
//	         that a resumed run renders the same Job); once the Job
//	         succeeded, each extent's SHA-256 and the guest-visible one
//	         (GuestSHA256, also SourceSHA256), as local execution records
//	         them when it flattens

// AnnotationScratchBytes on a DataVolume is the storage it asks for beyond
// the disk: room for a snapshot delta's copy while the chain is flattened
// in its claim. The disk itself is the request minus it.
const AnnotationScratchBytes = "vmmigration.io/scratch-bytes"

// clusterChainProblem says why cluster execution cannot flatten ch, or ""
// when it can: one extent per link, a flat base, vmfsSparse or seSparse
// deltas, and no more than a copy Job applies.
func clusterChainProblem(ch *esxi.DiskChain) string {
	links := ch.Links // top first, base last
	if len(links) == 0 {
		return ""
	}
	if n := len(links) - 1; n > copyjob.MaxDeltas {
		return fmt.Sprintf("it runs on %d snapshot deltas and a copy Job applies at most %d", n, copyjob.MaxDeltas)
	}
	for k, l := range links {
		if len(l.ExtentPaths) != 1 {
			return fmt.Sprintf("its snapshot chain's link %s has %d extent files, and cluster execution flattens links of one", l.DescriptorPath, len(l.ExtentPaths))
		}
		f := vmdk.Format(l.CreateType)
		base := k == len(links)-1
		if base && f != vmdk.Flat || !base && f != vmdk.VMFSSparse && f != vmdk.SESparse {
			return fmt.Sprintf("its snapshot chain's link %s is of type %q, which cluster execution does not flatten", l.DescriptorPath, l.CreateType)
		}
	}
	return ""
}

// chainExtents are disk i's extent entries, base first, deltas oldest
// first after it; nil for a disk on no snapshot.
func (r *run) chainExtents(i int) []*record.ChainFileEvidence {
	d := &r.rec().Disks[i]
	var out []*record.ChainFileEvidence
	for k := len(d.Chain) - 1; k >= 0; k-- {
		if d.Chain[k].Kind == record.ChainFileExtent {
			out = append(out, &d.Chain[k])
		}
	}
	return out
}

// sizeClusterChains records the size of every extent file of the chains
// not yet sized, in one call to the host. Sizes recorded earlier are kept:
// the Job of the recorded attempt was rendered from them.
//
// With frozenOnly (a precopy round) the delta the running source writes to
// (link 0) is left unsized: it is sized once the source is off.
func (r *run) sizeClusterChains(ctx context.Context, frozenOnly bool) error {
	rec := r.rec()
	var paths []string
	for i := range rec.Disks {
		if rec.Disks[i].Acquired {
			continue
		}
		for _, f := range r.chainExtents(i) {
			if f.Bytes == 0 && (!frozenOnly || f.Link > 0) {
				paths = append(paths, f.SourcePath)
			}
		}
	}
	if len(paths) == 0 {
		return nil
	}
	c, err := r.esxiClient()
	if err != nil {
		return err
	}
	sizes, err := c.FileSizes(ctx, paths...)
	if err != nil {
		return fmt.Errorf("sizing the snapshot chains' files: %w", err)
	}
	for i := range rec.Disks {
		for _, f := range r.chainExtents(i) {
			if f.Bytes != 0 || rec.Disks[i].Acquired || frozenOnly && f.Link == 0 {
				continue
			}
			n := sizes[f.SourcePath]
			if n <= 0 || n%512 != 0 {
				return permanent("ChainFileUnreadable", fmt.Sprintf("disk %d: the snapshot chain's file %s is %d bytes, not whole 512-byte sectors: it is not a VMDK extent ESXi wrote", i, f.SourcePath, n),
					"check the file on the host (vmkfstools -x check on its descriptor); consolidate the snapshots in the host client if the chain is damaged, then run apply again", nil)
			}
			f.Bytes = n
		}
	}
	return r.save(ctx)
}

// scratchBytes is the room disk d's copy needs for its chain's deltas:
// its largest delta file, whole MiB.
func scratchBytes(d record.DiskEvidence) int64 {
	var most int64
	for _, f := range d.Chain {
		if f.Kind == record.ChainFileExtent && f.Format != string(vmdk.Flat) {
			most = max(most, f.Bytes)
		}
	}
	return roundUpMiB(most)
}

// chainCopy fills c with disk i's base and deltas; with frozenOnly
// without the delta the running source writes to.
func (r *run) chainCopy(i int, src *copyjob.Disk, deltas *[]copyjob.Delta, frozenOnly bool) {
	ext := r.chainExtents(i)
	if len(ext) == 0 {
		return
	}
	if frozenOnly && ext[len(ext)-1].Link == 0 {
		ext = ext[:len(ext)-1]
	}
	src.Path = ext[0].SourcePath
	for _, f := range ext[1:] {
		*deltas = append(*deltas, copyjob.Delta{Path: f.SourcePath, Format: f.Format, SizeBytes: f.Bytes})
	}
}

// recordChainCopy records a flattened chain's evidence from its checked
// result.
func (r *run) recordChainCopy(i int, res copyjob.Result) {
	ext := r.chainExtents(i)
	if len(ext) == 0 {
		return
	}
	ext[0].SHA256 = res.BaseSHA256
	for k, d := range res.Deltas {
		ext[k+1].SHA256 = d.SHA256
	}
	r.rec().Disks[i].GuestSHA256 = res.SHA256
}

// chainChanged starts disk i over when the chain the source holds now is
// not the recorded one (a snapshot taken or removed since): its claim is
// flattened again, by a new Job, from the new chain.
func (r *run) chainChanged(ctx context.Context, vm *esxi.VM, i int) bool {
	d := &r.rec().Disks[i]
	if vm == nil || i >= len(vm.Disks) {
		return false
	}
	plan := chainPlan(vm.Disks[i].Chain)
	if sameChain(plan, d.Chain) {
		return false
	}
	was := len(d.Chain)
	d.Chain, d.Acquired, d.SourceSHA256, d.GuestSHA256, d.ZeroBytes = plan, false, "", "", 0
	if d.CopyAttempt > 0 {
		d.CopyAttempt++
		d.CopyJob, d.CopyJobUID = "", ""
	}
	if r.rec().Warm != nil && len(plan) > was {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: the precopy's snapshot added a link to the chain (%d files now): copy Job attempt %d applies what it froze", i, len(plan), d.CopyAttempt)})
	} else {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: the source's snapshot chain changed (%d files recorded, %d now): the disk is flattened again from the new chain", i, was, len(plan))})
	}
	return true
}
