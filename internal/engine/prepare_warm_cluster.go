package engine

import (
	"context"
	"fmt"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// Preparing of a warm migration in cluster execution: the precopy rounds
// and the cutover of prepare_warm.go, with the copies made by copy Jobs
// straight into the claims (chain_cluster.go). Each round's snapshot
// freezes the delta the guest wrote into during the previous round; the
// round's Job of each disk is told the chain's base and every frozen
// delta, and the worker's state in the claim makes it copy the base only
// once and apply only the deltas not yet applied. At cutover, with the
// source off, the last Job applies only the last delta: the downtime is
// that delta's copy, not the disk's.
//
//	observe  the source (power state, chain); each disk's claim and the
//	         Job of its recorded attempt (as cold cluster execution)
//	act      per round: the snapshot (prepare_warm.go), then per disk a
//	         Job for the base and the frozen deltas; at cutover, after the
//	         power-off, a Job for the whole chain
//	record   the chain as it grew, each frozen file's size before its Job,
//	         a new attempt per round and at cutover (recorded before the
//	         Job is created), the round copied; at cutover the disks'
//	         checked results as a cold migration records them

// warmScratchShare is the room a warm migration's copies get for the
// deltas (in the disk's journal claim), as a share of the disk's size: the
// deltas the rounds and the cutover apply are copied there first, one at
// a time, and their size is not known when the claim is made. At least
// warmScratchMin.
const (
	warmScratchShare = 10 // percent
	warmScratchMin   = 64 << 20
)

// warmScratch is the room disk d's copy gets in a warm migration.
func warmScratch(d record.DiskEvidence) int64 {
	return roundUpMiB(max(d.SizeBytes/100*warmScratchShare, warmScratchMin, scratchBytes(d)))
}

// copyFrozenInCluster is precopy round k in cluster execution: the
// recorded chains follow the source's (a new link on top since the last
// round), and each disk's Job copies the base and applies the frozen
// deltas into its claim. It returns the files and bytes the round added
// to the claims: at the first round the base and any delta frozen before
// the migration, after it the delta the round's snapshot froze.
func (r *run) copyFrozenInCluster(ctx context.Context, vm *esxi.VM, k int) (int, int64, error) {
	rec := r.rec()
	changed := false
	for i := range rec.Disks {
		changed = r.chainChanged(ctx, vm, i) || changed
	}
	if changed {
		if err := r.save(ctx); err != nil {
			return 0, 0, err
		}
	}
	if err := r.runCopyJobs(ctx, true); err != nil {
		return 0, 0, err
	}
	files, bytes := 0, int64(0)
	for i := range rec.Disks {
		ext := r.chainExtents(i) // base, deltas oldest first, the top last
		if len(ext) < 2 {
			continue
		}
		frozen := ext[:len(ext)-1]
		if k > 1 {
			frozen = frozen[len(frozen)-1:]
		}
		for _, f := range frozen {
			files++
			if f.Format == string(vmdk.Flat) {
				bytes += rec.Disks[i].SizeBytes
			} else {
				bytes += f.Bytes
			}
		}
	}
	return files, bytes, nil
}

// warmCutoverCluster applies what is left once the source is off: every
// disk's last delta, by a Job of a new attempt.
func (r *run) warmCutoverCluster(ctx context.Context) error {
	rec := r.rec()
	w := rec.Warm
	vm, started, err := r.cutoverSource(ctx)
	if err != nil {
		return err
	}
	for i := range rec.Disks {
		r.chainChanged(ctx, vm, i)
	}
	if started {
		// The precopy's Jobs ran without the top delta: the cutover's are
		// new ones, whatever the chain did.
		for i := range rec.Disks {
			if d := &rec.Disks[i]; d.CopyAttempt > 0 && !d.Acquired {
				d.CopyAttempt++
				d.CopyJob, d.CopyJobUID = "", ""
			}
		}
	}
	if err := r.sizeClusterChains(ctx, false); err != nil {
		return err
	}
	if w.CutoverCopied == nil {
		w.CutoverFiles, w.CutoverBytes = 0, 0
		for i := range rec.Disks {
			if ext := r.chainExtents(i); len(ext) > 1 && !rec.Disks[i].Acquired {
				w.CutoverFiles++
				w.CutoverBytes += ext[len(ext)-1].Bytes
			}
		}
	}
	if err := r.save(ctx); err != nil {
		return err
	}
	r.report(ctx, Event{Kind: EventInfo, Disk: -1, Message: fmt.Sprintf("cutover: copy Jobs apply the last %d bytes in %d file(s) with the source off", w.CutoverBytes, w.CutoverFiles)})
	if err := r.copyInCluster(ctx); err != nil {
		return err
	}
	if w.CutoverCopied == nil {
		t := r.now()
		w.CutoverCopied = &t
	}
	return r.save(ctx)
}
