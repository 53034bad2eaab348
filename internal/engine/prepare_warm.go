package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// Warm migration copies most of a running VM before it is powered off:
//
//  1. Preparing takes a migration snapshot while the VM runs (disk only:
//     no memory, no quiescing). The VM now writes into a new delta, and
//     everything below it is read-only: those files are copied with the
//     journaled copy while the guest keeps working.
//  2. Each further precopy round (Spec.PrecopyRounds at most) takes one
//     more snapshot and copies the delta the previous round left behind,
//     which holds only what the guest wrote during the previous copy. Once
//     a round from the second on copied at most Spec.PrecopyStopBytes, the
//     precopy ends there: the guest writes little, and another round would
//     shorten the cutover little while adding a snapshot. The decision is
//     recorded (WarmEvidence.Stopped) with the round's copy, so a resumed
//     apply never takes it again nor takes another snapshot.
//  3. At cutover the source is powered off through the usual power-off
//     decision, and only the last delta is copied: the files copied before
//     are complete in their journals and are not read again. Converting
//     then flattens the chain as for a VM on snapshots.
//  4. Once the migration has Completed, and when it is destroyed before
//     (rollback or not), the migration's own snapshots are removed by their
//     recorded ids, oldest first, which consolidates each delta into its
//     parent; snapshots that were there before are never touched.
//
// Each snapshot is recorded as an intent (its deterministic name) before
// vim-cmd runs, then with its id once observed; SnapshotCreate finds a
// snapshot by name before taking it, so a create whose reply was lost, or a
// crash in between, never makes a second snapshot of a round. Rounds never
// start once the power-off decision exists.
//
// Files copied before cutover are written straight under the names the
// final chain gives them (Converting reads the chain top first, and every
// later snapshot adds one link on top), so the cutover's chain copy finds
// them complete. Those names assume every round is taken; a precopy that
// stops early moves the copied files down by the rounds not taken, link by
// link from the lowest, counting the links moved in the record
// (WarmStop.Renames, WarmStop.Renamed), before anything else happens.

// Migration modes.
const (
	ModeCold = "cold"
	ModeWarm = "warm"
)

// Modes lists the migration modes, for validators and documentation.
var Modes = []string{ModeCold, ModeWarm}

// Bounds of Spec.PrecopyRounds.
const (
	DefaultPrecopyRounds = 1
	// MaxPrecopyRounds keeps the migration's snapshots well under ESXi's
	// 32 per VM, beside those the VM has already.
	MaxPrecopyRounds = 8
	// MaxSnapshotsPerVM is ESXi's limit of snapshots in one VM's chain.
	MaxSnapshotsPerVM = 32
	// DefaultPrecopyStopBytes is the precopy_stop_bytes attribute's
	// default: a round that copied at most 64 MiB ends the precopy.
	DefaultPrecopyStopBytes int64 = 64 << 20
)

// FieldMode and FieldPrecopyRounds are the resource's attributes.
const (
	FieldMode             = "mode"
	FieldPrecopyRounds    = "precopy_rounds"
	FieldPrecopyStopBytes = "precopy_stop_bytes"
)

// warm reports a warm migration.
func (s Spec) warm() bool { return s.Mode == ModeWarm }

// validateWarm checks Mode and PrecopyRounds of a defaulted spec.
func (s Spec) validateWarm() error {
	var errs []error
	if !slices.Contains(Modes, s.Mode) {
		errs = append(errs, onField(FieldMode, fmt.Errorf("mode %q is not one of %s, %s", s.Mode, ModeCold, ModeWarm)))
	}
	if s.PrecopyRounds < 1 || s.PrecopyRounds > MaxPrecopyRounds {
		errs = append(errs, onField(FieldPrecopyRounds, fmt.Errorf("precopy_rounds %d is not between 1 and %d", s.PrecopyRounds, MaxPrecopyRounds)))
	}
	if s.Mode == ModeCold && s.PrecopyRounds != DefaultPrecopyRounds {
		errs = append(errs, onField(FieldPrecopyRounds, fmt.Errorf("precopy_rounds applies to mode %q only", ModeWarm)))
	}
	if s.PrecopyStopBytes < 0 {
		errs = append(errs, onField(FieldPrecopyStopBytes, fmt.Errorf("precopy_stop_bytes %d is negative; 0 takes every round", s.PrecopyStopBytes)))
	} else if s.Mode == ModeCold && s.PrecopyStopBytes != 0 && s.PrecopyStopBytes != DefaultPrecopyStopBytes {
		errs = append(errs, onField(FieldPrecopyStopBytes, fmt.Errorf("precopy_stop_bytes applies to mode %q only", ModeWarm)))
	}
	return errors.Join(errs...)
}

// warmSnapshotName is the name of round k's snapshot: derived from the
// destination, so that every process of this migration looks for the same
// one.
func (s Spec) warmSnapshotName(round int) string {
	dest := s.Namespace + "/" + s.Name
	if name := fmt.Sprintf("vmmigration %s round %d", dest, round); len(name) <= esxi.MaxSnapshotNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(dest))
	return fmt.Sprintf("vmmigration %s round %d", hex.EncodeToString(sum[:6]), round)
}

func (s Spec) warmSnapshotDescription() string {
	return fmt.Sprintf("Taken by the vmmigration provider for the warm migration to %s/%s; removed when it completes or is destroyed", s.Namespace, s.Name)
}

// warmPrecopy takes the precopy rounds that are not done yet while the
// source runs and returns the source as observed after them. Nothing is
// done once the power-off has been decided: the cutover has begun.
func (r *run) warmPrecopy(ctx context.Context, vm *esxi.VM) (*esxi.VM, error) {
	rec := r.rec()
	if rec.Warm == nil {
		stop := r.spec.PrecopyStopBytes
		rec.Warm = &record.WarmEvidence{Rounds: r.spec.PrecopyRounds, StopBytes: &stop}
		if err := r.save(ctx); err != nil {
			return nil, err
		}
	}
	w := rec.Warm
	if err := r.warmRenames(ctx); err != nil {
		return nil, err
	}
	if rec.PowerOff != nil {
		return vm, nil
	}
	c, err := r.esxiClient()
	if err != nil {
		return nil, err
	}
	if !r.inCluster() {
		if err := r.stagingReady(); err != nil {
			return nil, err
		}
	}
	last := w.Rounds
	if w.Stopped != nil {
		last = w.Stopped.Round
	}
	for k := 1; k <= last; k++ {
		if s := w.Snapshot(k); s != nil && s.Copied {
			continue
		}
		s, off, err := r.warmSnapshot(ctx, c, vm, k)
		if err != nil {
			return nil, err
		}
		if off {
			// Nothing changes on a VM that does not run: the cutover
			// copies what is left.
			return vm, r.save(ctx)
		}
		if vm, err = r.observeSource(ctx); err != nil {
			return nil, err
		}
		// Later rounds each add one link on top of this chain.
		var files int
		var bytes int64
		if r.inCluster() {
			files, bytes, err = r.copyFrozenInCluster(ctx, vm, k)
		} else {
			files, bytes, err = r.copyFrozenLinks(ctx, c, vm, w.Rounds-k)
		}
		if err != nil {
			return nil, fmt.Errorf("precopy round %d: %w", k, err)
		}
		s.Copied, s.CopiedFiles, s.CopiedBytes = true, files, bytes
		// Decided with the round's copy, in the same save: a resumed apply
		// finds the round copied and the decision taken.
		w.Stopped = warmStopAfter(w, k, bytes, vm, len(rec.Disks))
		if err := r.save(ctx); err != nil {
			return nil, err
		}
		r.report(ctx, Event{Kind: EventInfo, Disk: -1, Message: fmt.Sprintf("precopy round %d of %d: copied %d bytes in %d file(s) while the source runs", k, w.Rounds, bytes, files)})
		if w.Stopped != nil {
			r.report(ctx, Event{Kind: EventInfo, Disk: -1, Message: w.Stopped.Reason})
			if err := r.warmRenames(ctx); err != nil {
				return nil, err
			}
			break
		}
	}
	return vm, nil
}

// warmSnapshot is round k's snapshot of the running source: its intent
// recorded before it is taken, then taken and its id recorded. off is
// true, with no snapshot, when the source does not run.
func (r *run) warmSnapshot(ctx context.Context, c *esxi.Client, vm *esxi.VM, k int) (s *record.WarmSnapshot, off bool, err error) {
	w := r.rec().Warm
	s = w.Snapshot(k)
	if s == nil {
		if vm.PowerState != esxi.PoweredOn {
			if len(w.Snapshots) == 0 {
				w.SkippedReason = fmt.Sprintf("the source was %s when the precopy began: its disks are copied at cutover", vm.PowerState)
			}
			return nil, true, nil
		}
		if n := countSnapshots(vm.Snapshots); n+1 > MaxSnapshotsPerVM {
			return nil, false, needsHuman("TooManySnapshots", fmt.Sprintf("source VM %q has %d snapshots; one more would pass ESXi's limit of %d", vm.Name, n, MaxSnapshotsPerVM),
				"remove snapshots you no longer need in the host client, or use mode cold, then run apply again", nil)
		}
		w.Snapshots = append(w.Snapshots, record.WarmSnapshot{Round: k, Name: r.spec.warmSnapshotName(k), IntendedAt: r.now()})
		s = &w.Snapshots[len(w.Snapshots)-1]
		// Record the intent before acting on it.
		if err := r.save(ctx); err != nil {
			return nil, false, err
		}
	}
	if s.ID != 0 {
		return s, false, nil
	}
	r.report(ctx, Event{Kind: EventInfo, Disk: -1, Message: fmt.Sprintf("precopy round %d of %d: taking snapshot %q of the running source", k, w.Rounds, s.Name)})
	snap, err := c.SnapshotCreate(ctx, vm.VMID, s.Name, r.spec.warmSnapshotDescription())
	if err != nil {
		return nil, false, fmt.Errorf("precopy round %d: taking snapshot %q: %w", k, s.Name, err)
	}
	t := r.now()
	s.ID, s.CreatedAt = snap.ID, &t
	if err := r.save(ctx); err != nil {
		return nil, false, err
	}
	return s, false, nil
}

// warmStopAfter decides whether the precopy ends after round k, which copied
// bytes: from the second round on (the first copies the whole disks), when
// rounds remain and bytes is at most StopBytes. The decision carries the
// renames that give the copied files their links in a chain of k
// snapshots; vm is the source as observed for round k, whose first disks
// (as many as the record has) are renamed.
func warmStopAfter(w *record.WarmEvidence, k int, bytes int64, vm *esxi.VM, disks int) *record.WarmStop {
	if w.Stopped != nil {
		return w.Stopped
	}
	limit := w.StopLimit()
	if limit <= 0 || k < 2 || k >= w.Rounds || bytes > limit {
		return nil
	}
	st := &record.WarmStop{Round: k, Bytes: bytes, Limit: limit,
		Reason: fmt.Sprintf("precopy ends after round %d of %d: it copied %d bytes, at most precopy_stop_bytes (%d), so the guest writes little and another round would shorten the cutover little",
			k, w.Rounds, bytes, limit)}
	shift := w.Rounds - k
	for i, d := range vm.Disks {
		if i >= disks || d.Chain == nil {
			continue
		}
		for l := 1; l < len(d.Chain.Links); l++ {
			st.Renames = append(st.Renames, record.WarmRename{Disk: i, From: l + shift, To: l})
		}
	}
	return st
}

// warmRenames moves the copied chain files of a precopy that stopped early
// to their links, one recorded link at a time. Links are moved lowest
// first, to a lower link, so a link's target is free by the time it moves
// (its own files were moved earlier) and a link found without files was
// moved already: a crash anywhere leaves what the next run completes.
func (r *run) warmRenames(ctx context.Context) error {
	w := r.rec().Warm
	if w == nil || w.Stopped == nil || r.inCluster() {
		return nil // in cluster execution the claims hold no chain files
	}
	st := w.Stopped
	for st.Renamed < len(st.Renames) {
		m := st.Renames[st.Renamed]
		if err := moveChainLink(r.spec.stagingDir(), m); err != nil {
			return needsHuman("WorkDirUnusable", fmt.Sprintf("cannot move the precopied files of disk %d from link %d to link %d in %s", m.Disk, m.From, m.To, r.spec.stagingDir()),
				"make work_dir writable, then run apply again", err)
		}
		st.Renamed++
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	return nil
}

// moveChainLink renames the local copies of one link (its extents with
// their journals, and its descriptors) to another link's names. Files
// that are missing are skipped.
func moveChainLink(dir string, m record.WarmRename) error {
	from := fmt.Sprintf("disk-%d-link-%d", m.Disk, m.From)
	to := fmt.Sprintf("disk-%d-link-%d", m.Disk, m.To)
	names, err := filepath.Glob(filepath.Join(dir, from+"-extent-*"))
	if err != nil {
		return err
	}
	names = append(names, filepath.Join(dir, from+".source.vmdk"), filepath.Join(dir, from+".vmdk"))
	moved := false
	for _, p := range names {
		base := filepath.Base(p)
		err := os.Rename(p, filepath.Join(dir, to+strings.TrimPrefix(base, from)))
		switch {
		case err == nil:
			moved = true
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
	}
	if moved {
		return durable.SyncDir(dir)
	}
	return nil
}

// countSnapshots counts the nodes of a snapshot tree.
func countSnapshots(tree []esxi.Snapshot) int {
	return len(esxi.FindSnapshots(tree, func(esxi.Snapshot) bool { return true }))
}

// copyFrozenLinks copies, for every disk, the chain files below the delta
// the VM writes to now, under the local names they get in the final chain
// (shift more links on top). It returns how many extent files it read from
// the host and their bytes; files whose copy is complete are not read.
func (r *run) copyFrozenLinks(ctx context.Context, c *esxi.Client, vm *esxi.VM, shift int) (int, int64, error) {
	var jobs []transfer.Job
	var paths []string
	for i, d := range vm.Disks {
		if i >= len(r.rec().Disks) {
			break
		}
		for _, f := range chainPlan(d.Chain) {
			if f.Link == 0 {
				continue // the delta the VM writes to
			}
			f.Link += shift
			local := r.spec.chainLocalPath(i, f)
			if f.Kind == record.ChainFileDescriptor {
				r.rec().Warm.Freeze(i, f.SourcePath, f.CID)
				text, err := c.ReadDescriptor(ctx, f.SourcePath)
				if err != nil {
					return 0, 0, fmt.Errorf("disk %d: reading the snapshot descriptor %s: %w", i, f.SourcePath, err)
				}
				if err := durable.WriteFile(local, []byte(text)); err != nil {
					if isNoSpace(err) {
						return 0, 0, r.noSpace(fmt.Sprintf("copying the chain of disk %d", i), err)
					}
					return 0, 0, needsHuman("WorkDirUnusable", "cannot write "+local, "make work_dir writable, then run apply again", err)
				}
				continue
			}
			jobs = append(jobs, transfer.Job{Disk: transfer.Disk{Path: f.SourcePath}, Dest: local})
			paths = append(paths, f.SourcePath)
		}
	}
	if len(jobs) == 0 {
		return 0, 0, nil
	}
	sizes, err := c.FileSizes(ctx, paths...)
	if err != nil {
		return 0, 0, fmt.Errorf("sizing the snapshot chain's files: %w", err)
	}
	var total int64
	var todo []transfer.Job
	for _, j := range jobs {
		size := sizes[j.Disk.Path]
		if size <= 0 || size%512 != 0 {
			return 0, 0, permanent("ChainFileUnreadable", fmt.Sprintf("the snapshot chain's file %s is %d bytes, not whole 512-byte sectors: it is not a VMDK extent ESXi wrote", j.Disk.Path, size),
				"check the file on the host (vmkfstools -x check on its descriptor), then run apply again", nil)
		}
		j.Disk.SizeBytes = size
		if st, err := transfer.Inspect(j.Disk, j.Dest, r.chunkSize()); err == nil && st.State == transfer.StateComplete {
			continue
		}
		todo = append(todo, j)
		total += size
	}
	if len(todo) == 0 {
		return 0, 0, nil
	}
	jobs = todo
	_, err = transfer.CopyAll(ctx, c, jobs, len(jobs), transfer.Options{
		ChunkSize: r.chunkSize(),
		Progress: func(p transfer.Progress) {
			r.report(ctx, Event{Kind: EventProgress, Disk: -1, Transfer: Transfer{Kind: TransferCopy, File: p.Source}, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Percent: p.Percent,
				Message: fmt.Sprintf("precopy: snapshot chain file %s: copied %d of %d bytes (%.1f%%)", p.Source, p.BytesDone, p.BytesTotal, p.Percent)})
		},
	})
	if isNoSpace(err) {
		err = r.noSpace("copying the snapshot chains", err)
	}
	return len(jobs), total, err
}

// pendingExtents counts the extent files of the recorded chains whose copy
// is not complete, and their bytes on the host.
func (r *run) pendingExtents(ctx context.Context, c *esxi.Client) (int, int64, error) {
	rec := r.rec()
	var paths []string
	for _, d := range rec.Disks {
		for _, f := range d.Chain {
			if f.Kind == record.ChainFileExtent {
				paths = append(paths, f.SourcePath)
			}
		}
	}
	if len(paths) == 0 {
		return 0, 0, nil
	}
	sizes, err := c.FileSizes(ctx, paths...)
	if err != nil {
		return 0, 0, fmt.Errorf("sizing the snapshot chain's files: %w", err)
	}
	files, bytes := 0, int64(0)
	for i, d := range rec.Disks {
		for _, f := range d.Chain {
			if f.Kind != record.ChainFileExtent {
				continue
			}
			disk := transfer.Disk{Path: f.SourcePath, SizeBytes: sizes[f.SourcePath]}
			if st, err := transfer.Inspect(disk, r.spec.chainLocalPath(i, f), r.chunkSize()); err == nil && st.State == transfer.StateComplete {
				continue
			}
			files++
			bytes += disk.SizeBytes
		}
	}
	return files, bytes, nil
}

// cutoverSource observes the source at cutover, which must be off, and
// records when the cutover started; started is true for the run that
// recorded it.
func (r *run) cutoverSource(ctx context.Context) (vm *esxi.VM, started bool, err error) {
	vm, err = r.observeSource(ctx)
	if err != nil {
		return nil, false, err
	}
	if vm.PowerState != esxi.PoweredOff {
		return nil, false, transient("SourceNotOff", fmt.Sprintf("source VM %q is %s at cutover", vm.Name, vm.PowerState), nil)
	}
	if w := r.rec().Warm; w.CutoverStarted == nil {
		t := r.now()
		w.CutoverStarted, started = &t, true
	}
	return vm, started, nil
}

// warmCutover copies what is left once the source is off: the chain as
// observed now becomes each disk's recorded chain, whose files copied by
// the precopy are complete and not read again.
func (r *run) warmCutover(ctx context.Context) error {
	rec := r.rec()
	w := rec.Warm
	vm, _, err := r.cutoverSource(ctx)
	if err != nil {
		return err
	}
	for i := range rec.Disks {
		if i >= len(vm.Disks) {
			break
		}
		d := &rec.Disks[i]
		if plan := chainPlan(vm.Disks[i].Chain); !sameChain(plan, d.Chain) {
			// The precopied files are under these names already.
			d.Chain, d.Acquired, d.SourceSHA256, d.GuestSHA256, d.ZeroBytes = plan, false, "", "", 0
		}
	}
	if err := r.recheckFrozen(vm); err != nil {
		return err
	}
	c, err := r.esxiClient()
	if err != nil {
		return err
	}
	files, bytes, err := r.pendingExtents(ctx, c)
	if err != nil {
		return err
	}
	if w.CutoverCopied == nil {
		w.CutoverFiles, w.CutoverBytes = files, bytes
	}
	if err := r.save(ctx); err != nil {
		return err
	}
	r.report(ctx, Event{Kind: EventInfo, Disk: -1, Message: fmt.Sprintf("cutover: copying the last %d bytes in %d file(s) with the source off", bytes, files)})
	if err := r.copyDisks(ctx); err != nil {
		return err
	}
	if w.CutoverCopied == nil {
		t := r.now()
		w.CutoverCopied = &t
	}
	return r.save(ctx)
}

// stepPrepareWarm is Preparing for a warm migration: the precopy while
// the source runs, then the power-off decision, then the cutover copy; in
// cluster execution the copies are copy Jobs' (prepare_warm_cluster.go).
func (r *run) stepPrepareWarm(ctx context.Context) error {
	vm, err := r.prepareSource(ctx)
	if err != nil {
		return err
	}
	vm, err = r.warmPrecopy(ctx, vm)
	if err != nil {
		return err
	}
	if err := r.ensurePoweredOff(ctx, vm); err != nil {
		return err
	}
	if r.inCluster() {
		return r.warmCutoverCluster(ctx) // prepare_warm_cluster.go
	}
	return r.warmCutover(ctx)
}

// removeWarmSnapshots removes the snapshots the record says the migration
// took, oldest first: by recorded id, or for an intent whose id was never
// seen, by its name if the host has it. save is called after each
// removal.
func removeWarmSnapshots(ctx context.Context, c *esxi.Client, rec *record.Record, save func() error) error {
	w := rec.Warm
	if w == nil {
		return nil
	}
	for i := range w.Snapshots {
		s := &w.Snapshots[i]
		if s.Removed {
			continue
		}
		id := s.ID
		if id == 0 {
			found, err := c.SnapshotByName(ctx, rec.Identity.VMID, s.Name)
			if err != nil {
				return fmt.Errorf("looking for snapshot %q: %w", s.Name, err)
			}
			if found != nil {
				id = found.ID
			}
		}
		if id != 0 {
			if err := c.SnapshotRemove(ctx, rec.Identity.VMID, id); err != nil {
				return fmt.Errorf("removing the migration's snapshot %q (id %d): %w", s.Name, id, err)
			}
		}
		t := time.Now().UTC()
		s.Removed, s.RemovedAt = true, &t
		if save != nil {
			if err := save(); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgetWarmSnapshots removes a forgotten migration's snapshots from the
// source and says what it did. With strict (a rollback, which must leave
// the source as it was) a failure is an error; otherwise it is reported
// with what to remove by hand, so that an unreachable host does not keep
// the resource from being destroyed.
func (e *Engine) forgetWarmSnapshots(ctx context.Context, rec *record.Record, strict bool) ([]string, error) {
	if rec == nil || rec.Warm == nil || len(rec.Warm.Snapshots) == 0 {
		return nil, nil
	}
	label := fmt.Sprintf("source VM %q (vmid %d) on host %s", rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host)
	before := map[int]bool{}
	for _, s := range rec.Warm.Snapshots {
		before[s.Round] = s.Removed
	}
	c, err := e.deps.ESXi.Client(rec.Identity.Host)
	if err == nil {
		err = removeWarmSnapshots(ctx, c, rec, nil)
	}
	var out []string
	for _, s := range rec.Warm.Snapshots {
		switch {
		case s.Removed && !before[s.Round]:
			out = append(out, fmt.Sprintf("removed the migration's snapshot %q of %s", s.Name, label))
		case !s.Removed && err != nil && !strict:
			out = append(out, fmt.Sprintf("could not remove the migration's snapshot %q (id %d) of %s: remove it in the host client (%v)", s.Name, s.ID, label, err))
		}
	}
	if err != nil && strict {
		return out, err
	}
	return out, nil
}

// Pre-flight checks of a warm migration.
const (
	// CheckWarmSnapshots fails when the migration's snapshots would take
	// the VM past ESXi's limit of snapshots.
	CheckWarmSnapshots = "warm_snapshots"
	// CheckWarmDisks fails for disks a snapshot leaves out or cannot take:
	// independent disks (the guest keeps writing them through the
	// snapshot) and physical-mode RDMs.
	CheckWarmDisks = "warm_disks"
)

// warmChecks are the pre-flight checks of a warm migration (none for a
// cold one). The migration's own snapshots, from an earlier attempt, are
// not counted against it.
func (s Spec) warmChecks(vm *esxi.VM) []preflight.Check {
	if !s.warm() {
		return nil
	}
	own := map[string]bool{}
	for k := 1; k <= s.PrecopyRounds; k++ {
		own[s.warmSnapshotName(k)] = true
	}
	others := len(esxi.FindSnapshots(vm.Snapshots, func(sn esxi.Snapshot) bool { return !own[sn.Name] }))
	snaps := preflight.Check{ID: CheckWarmSnapshots, Severity: preflight.Blocker, Passed: true,
		Message: fmt.Sprintf("VM %q has %d snapshot(s); the warm migration adds %d and removes them when it completes (ESXi allows %d).", vm.Name, others, s.PrecopyRounds, MaxSnapshotsPerVM)}
	if others+s.PrecopyRounds > MaxSnapshotsPerVM {
		snaps.Passed = false
		snaps.Message = fmt.Sprintf("VM %q has %d snapshot(s): %d more for the warm migration would pass ESXi's limit of %d. Remove snapshots you no longer need, lower precopy_rounds, or use mode %q.",
			vm.Name, others, s.PrecopyRounds, MaxSnapshotsPerVM, ModeCold)
	}
	var bad []string
	for _, d := range vm.Disks {
		switch {
		case d.RDMPassthrough:
			bad = append(bad, d.Device+" is a physical-mode RDM, which a snapshot cannot take")
		case d.Independent:
			bad = append(bad, d.Device+" is independent ("+d.Mode+"): a snapshot leaves it out and the guest keeps writing it")
		}
	}
	disks := preflight.Check{ID: CheckWarmDisks, Severity: preflight.Blocker, Passed: len(bad) == 0,
		Message: fmt.Sprintf("Every disk of VM %q is taken by a snapshot.", vm.Name)}
	if len(bad) > 0 {
		disks.Message = fmt.Sprintf("VM %q cannot be copied while it runs: %s. Use mode %q.", vm.Name, strings.Join(bad, "; "), ModeCold)
	}
	return []preflight.Check{snaps, disks}
}

// recheckFrozen drops the copies of links whose descriptor's CID is not
// the one the precopy saw: their content changed, and a journal that
// matches by path and size would not notice.
func (r *run) recheckFrozen(vm *esxi.VM) error {
	w := r.rec().Warm
	seen := map[string]string{}
	for _, f := range w.Frozen {
		seen[fmt.Sprintf("%d %s", f.Disk, f.Descriptor)] = f.CID
	}
	var errs []error
	for i, d := range r.rec().Disks {
		if i >= len(vm.Disks) || vm.Disks[i].Chain == nil {
			continue
		}
		for k, l := range vm.Disks[i].Chain.Links {
			cid, ok := seen[fmt.Sprintf("%d %s", i, l.DescriptorPath)]
			if !ok || cid == l.CID {
				continue
			}
			for _, f := range d.Chain {
				if f.Link == k && f.Kind == record.ChainFileExtent {
					errs = append(errs, transfer.Remove(r.spec.chainLocalPath(i, f)))
				}
			}
		}
	}
	return errors.Join(errs...)
}
