package convertjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// Run converts the guest on the spec's disks and returns the outcome: a
// failure is a Result too, with its class and reason. A line per stage
// and, last, the result line are printed to out.
//
// Run may be stopped at any instant and run again: with no state recorded
// the images are untouched and any overlays left are made again; a state
// "committing" commits the kept overlays again; a state "done" is the
// answer (Reused), the images neither converted nor hashed again.
// Stopping ctx kills virt-v2v or qemu-img and gives an Interrupted result.
func Run(ctx context.Context, s Spec, out io.Writer) Result {
	p := newPrinter(out)
	res := run(ctx, s, p)
	p.result(res)
	return res
}

// job is one run of a conversion.
type job struct {
	spec  Spec
	out   *printer
	state State
}

// steps moves the conversion on from each recorded phase to the next;
// each step ends by recording the phase it reached.
var steps = map[string]func(*job, context.Context) error{
	"":              (*job).convert, // to PhaseCommitting
	PhaseCommitting: (*job).commit,  // to PhaseDone
}

func run(ctx context.Context, s Spec, p *printer) Result {
	if err := s.Validate(); err != nil {
		return SpecFailed(err)
	}
	if err := checkDisks(s); err != nil {
		return failure(ctx, err)
	}
	st, err := readState(s.StatePath())
	if err != nil {
		return failure(ctx, err)
	}
	if st.Phase != "" && !slices.Equal(st.IDs, s.IDs()) {
		// Recorded for claims since replaced: what it says of the
		// images is not theirs. The conversion starts over.
		p.stage(StageOverlays, len(s.Disks), fmt.Sprintf("the state in %s was recorded for other claims (%v, now %v): converting again", s.StatePath(), st.IDs, s.IDs()))
		if err := os.Remove(s.StatePath()); err != nil && !os.IsNotExist(err) {
			return failure(ctx, err)
		}
		st = State{}
	}
	j := &job{spec: s, out: p, state: st}
	reused := st.Phase == PhaseDone
	for j.state.Phase != PhaseDone {
		step, ok := steps[j.state.Phase]
		if !ok {
			return failure(ctx, badState(s.StatePath(), fmt.Errorf("unknown phase %q", j.state.Phase)))
		}
		if err := step(j, ctx); err != nil {
			return failure(ctx, err)
		}
	}
	return j.answer(ctx, reused)
}

// checkDisks checks that each disk is a regular file (not a link) of the
// size the spec says.
func checkDisks(s Spec) error {
	var errs []error
	for i, d := range s.Disks {
		if d.device() {
			if err := checkDevice(d); err != nil {
				errs = append(errs, fmt.Errorf("disks[%d]: %w", i, err))
			}
			continue
		}
		fi, err := os.Lstat(d.Path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("disks[%d]: %w", i, err))
		case !fi.Mode().IsRegular():
			errs = append(errs, fmt.Errorf("disks[%d]: %s is not a regular file (%s)", i, d.Path, fi.Mode().Type()))
		case fi.Size() != d.SizeBytes:
			errs = append(errs, fmt.Errorf("disks[%d]: %s has %d bytes, the spec says %d", i, d.Path, fi.Size(), d.SizeBytes))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &fault.Error{Class: fault.Permanent, Reason: ReasonBadDisk,
			Message: "a disk is not the raw image the conversion was given", Err: err,
			Action: "check that the copy Jobs completed into these claims"}
	}
	return nil
}

// maxStateBytes bounds what is read of StateFile (its evidence is bounded).
const maxStateBytes = 1 << 20

// readState reads StateFile: the zero State when there is none.
func readState(p string) (State, error) {
	fi, err := os.Lstat(p)
	switch {
	case os.IsNotExist(err):
		return State{}, nil
	case err != nil:
		return State{}, badState(p, err)
	case !fi.Mode().IsRegular():
		return State{}, badState(p, fmt.Errorf("not a regular file (%s)", fi.Mode().Type()))
	}
	f, err := os.Open(p)
	if err != nil {
		return State{}, badState(p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return State{}, badState(p, err)
	}
	if len(b) > maxStateBytes {
		return State{}, badState(p, fmt.Errorf("larger than %d bytes", maxStateBytes))
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, badState(p, err)
	}
	if st.Phase != PhaseCommitting && st.Phase != PhaseDone {
		return State{}, badState(p, fmt.Errorf("unknown phase %q", st.Phase))
	}
	return st, nil
}

// badState is the failure of a state that cannot be trusted: the images
// may be partly committed, so only a new copy makes them known again.
func badState(p string, err error) error {
	return &fault.Error{Class: fault.NeedsHuman, Reason: ReasonBadState,
		Message: fmt.Sprintf("the conversion's state %s cannot be read", p), Err: err,
		Action: "the images may be partly converted and must be copied again: delete the DataVolumes' claims and run again"}
}

// writeState records st durably (a temporary file beside it, synced and
// renamed, the folder synced).
func (j *job) writeState(st State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(j.spec.StatePath(), b); err != nil {
		return fmt.Errorf("record the conversion's state: %w", err)
	}
	j.state = st
	return nil
}

// convert makes an overlay of each image, converts the guest on the
// overlays and records PhaseCommitting once they are synced. On failure
// the overlays are removed: the images were not written.
func (j *job) convert(ctx context.Context) error {
	disks := j.spec.Disks
	j.out.stage(StageOverlays, len(disks), "making a qcow2 overlay of each image")
	if err := j.removeOverlays(); err != nil {
		return err
	}
	v2vDisks := make([]convert.V2VDisk, len(disks))
	for i, d := range disks {
		v2vDisks[i] = convert.V2VDisk{Path: d.Overlay(), Format: convert.QCOW2}
		if err := createOverlay(ctx, d); err != nil {
			_ = j.removeOverlays()
			return err
		}
	}
	j.out.stage(StageConverting, len(disks), "virt-v2v-in-place converts the guest on the overlays")
	v := &convert.V2V{StallTimeout: time.Duration(j.spec.StallSeconds) * time.Second, TempDir: os.TempDir()}
	ev, err := v.Convert(ctx, v2vDisks, convert.V2VOptions{})
	if err == nil {
		err = j.syncOverlays()
	}
	if err != nil {
		_ = j.removeOverlays()
		return err
	}
	// From here on the overlays are what the images become: they are
	// kept until the images are committed, hashed and recorded.
	return j.writeState(State{Phase: PhaseCommitting, IDs: j.spec.IDs(), Evidence: evidenceOf(ev)})
}

// commit commits every overlay into its image, syncs and hashes the
// images, records PhaseDone and removes the overlays. Each overlay is
// left intact by its commit, so a commit cut short is simply made again.
func (j *job) commit(ctx context.Context) error {
	disks := j.spec.Disks
	var lost []string
	for _, d := range disks {
		if fi, err := os.Lstat(d.Overlay()); err != nil || !fi.Mode().IsRegular() {
			lost = append(lost, d.Overlay())
		}
	}
	if len(lost) > 0 {
		return &fault.Error{Class: fault.NeedsHuman, Reason: ReasonOverlaysLost,
			Message: fmt.Sprintf("the conversion was being committed into the images, but its overlay(s) %s are gone: the images may be partly converted",
				strings.Join(lost, ", ")),
			Action: "the disks must be copied again: delete the DataVolumes' claims and run again"}
	}
	j.out.stage(StageCommitting, len(disks), "committing the converted overlays into the images")
	for i, d := range disks {
		if err := commitOverlay(ctx, d); err != nil {
			return err
		}
		if err := fsyncPath(d.Path); err != nil {
			return err
		}
		if afterCommit != nil {
			if err := afterCommit(i); err != nil {
				return err
			}
		}
	}
	j.out.stage(StageHashing, len(disks), "hashing the converted images")
	checked := make([]Checked, len(disks))
	for i, d := range disks {
		c, err := hashImage(ctx, d)
		if err != nil {
			return err
		}
		checked[i] = c
	}
	if err := j.writeState(State{Phase: PhaseDone, IDs: j.spec.IDs(), Evidence: j.state.Evidence, Disks: checked}); err != nil {
		return err
	}
	return j.removeOverlays()
}

// afterCommit, when set (by tests), is called after each image's commit;
// an error stops the conversion there as a crash would.
var afterCommit func(disk int) error

// answer is the result of a conversion whose state is done. Overlays a
// run stopped before it removed them are removed.
func (j *job) answer(ctx context.Context, reused bool) Result {
	st := j.state
	if len(st.Disks) != len(j.spec.Disks) {
		return failure(ctx, badState(j.spec.StatePath(), fmt.Errorf("it records %d image(s), the spec has %d disk(s)", len(st.Disks), len(j.spec.Disks))))
	}
	for i, d := range st.Disks {
		if err := d.check(); err != nil || d.Bytes != j.spec.Disks[i].SizeBytes {
			return failure(ctx, badState(j.spec.StatePath(), fmt.Errorf("image %d recorded as %+v, the spec says %d bytes", i, d, j.spec.Disks[i].SizeBytes)))
		}
	}
	if reused {
		_ = j.removeOverlays() // a run stopped between recording done and removing them
	}
	ev := st.Evidence
	return Result{OK: true, Digest: diskdigest.Name, Disks: st.Disks, Evidence: &ev, Reused: reused}
}

// removeOverlays removes every disk's overlay, if any, and syncs the
// folders it removed one from.
func (j *job) removeOverlays() error {
	for _, d := range j.spec.Disks {
		err := os.Remove(d.Overlay())
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("remove the overlay: %w", err)
		}
		if err := durable.SyncDir(d.dir()); err != nil {
			return err
		}
	}
	return nil
}

// syncOverlays makes the converted overlays and their names durable.
func (j *job) syncOverlays() error {
	for _, d := range j.spec.Disks {
		if err := fsyncPath(d.Overlay()); err != nil {
			return err
		}
		if err := durable.SyncDir(d.dir()); err != nil {
			return err
		}
	}
	return nil
}

// Bounds of the evidence kept of what virt-v2v printed, as local
// execution keeps it in its record.
const (
	maxEvidenceMessages     = 10
	maxEvidenceMessageBytes = 300
)

// evidenceOf is the bounded evidence of a conversion.
func evidenceOf(ev convert.V2VEvidence) Evidence {
	bound := func(in []string) []string {
		var out []string
		for _, m := range in {
			if len(out) == maxEvidenceMessages {
				break
			}
			out = append(out, truncate(m, maxEvidenceMessageBytes))
		}
		return out
	}
	o := ev.OS
	return Evidence{
		Tool: ev.Tool, Version: truncate(ev.Version, 64), Accelerator: ev.Accel.Name,
		OS: GuestOS{Type: truncate(o.Type, 64), Distro: truncate(o.Distro, 64), Version: truncate(o.Version, 64),
			OSInfo: truncate(o.OSInfo, 64), Arch: truncate(o.Arch, 64), ProductName: truncate(o.ProductName, 200), Firmware: o.Firmware},
		Converted: truncate(ev.Converted, maxEvidenceMessageBytes),
		Drivers:   bound(ev.Drivers), Warnings: bound(ev.Warnings),
		Seconds: ev.Duration.Seconds(),
	}
}
