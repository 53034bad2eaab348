package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// checkpoint is one step of an itinerary: run observes, decides, acts and
// records evidence, and returns nil only once the checkpoint's goal has
// been observed.
type checkpoint struct {
	phase record.Phase
	run   func(r *run, ctx context.Context) error
}

// coldItinerary is a cold migration: the source is powered off before its
// disks are copied.
var coldItinerary = []checkpoint{
	{record.PhasePending, (*run).stepPending},
	{record.PhaseDiscovering, (*run).stepDiscover},
	{record.PhaseValidated, (*run).stepValidate},
	{record.PhasePreparing, (*run).stepPrepareCold},
	{record.PhaseConverting, (*run).stepConvert},
	{record.PhaseImporting, (*run).stepImport},
	{record.PhaseCreatingVM, (*run).stepCreateVM},
	{record.PhaseStarting, (*run).stepStart},
	{record.PhaseValidating, (*run).stepValidateGuest},
	{record.PhaseCompleted, (*run).stepComplete},
}

// warmItinerary is a warm migration: the same checkpoints, but Preparing
// copies while the source runs and powers it off only for the last delta,
// and Completed also removes the migration's snapshots.
var warmItinerary = []checkpoint{
	{record.PhasePending, (*run).stepPending},
	{record.PhaseDiscovering, (*run).stepDiscover},
	{record.PhaseValidated, (*run).stepValidate},
	{record.PhasePreparing, (*run).stepPrepareWarm},
	{record.PhaseConverting, (*run).stepConvert},
	{record.PhaseImporting, (*run).stepImport},
	{record.PhaseCreatingVM, (*run).stepCreateVM},
	{record.PhaseStarting, (*run).stepStart},
	{record.PhaseValidating, (*run).stepValidateGuest},
	{record.PhaseCompleted, (*run).stepCompleteWarm},
}

// clusterItinerary is a cold migration in cluster execution
// (execution.go): the same power-off, then Jobs copy every disk into its
// DataVolume's claim, which Converting and Importing then take as they
// are, and Completed removes the Jobs and their Secret.
var clusterItinerary = []checkpoint{
	{record.PhasePending, (*run).stepPending},
	{record.PhaseDiscovering, (*run).stepDiscover},
	{record.PhaseValidated, (*run).stepValidate},
	{record.PhasePreparing, (*run).stepPrepareCluster},
	{record.PhaseConverting, (*run).stepConvertCluster},
	{record.PhaseImporting, (*run).stepImportCluster},
	{record.PhaseCreatingVM, (*run).stepCreateVM},
	{record.PhaseStarting, (*run).stepStart},
	{record.PhaseValidating, (*run).stepValidateGuest},
	{record.PhaseCompleted, (*run).stepCompleteCluster},
}

// warmClusterItinerary is a warm migration in cluster execution: the
// precopy rounds and the cutover run copy Jobs (prepare_warm_cluster.go),
// and Completed removes both the Jobs and the migration's snapshots.
var warmClusterItinerary = []checkpoint{
	{record.PhasePending, (*run).stepPending},
	{record.PhaseDiscovering, (*run).stepDiscover},
	{record.PhaseValidated, (*run).stepValidate},
	{record.PhasePreparing, (*run).stepPrepareWarm},
	{record.PhaseConverting, (*run).stepConvertCluster},
	{record.PhaseImporting, (*run).stepImportCluster},
	{record.PhaseCreatingVM, (*run).stepCreateVM},
	{record.PhaseStarting, (*run).stepStart},
	{record.PhaseValidating, (*run).stepValidateGuest},
	{record.PhaseCompleted, (*run).stepCompleteWarmCluster},
}

// itinerary is the route a migration takes: in the cluster when its
// record says so (fixed at Validated) or, before that, when it was asked
// for; else warm when it was asked for, or when the record holds warm
// evidence (a migration never changes mode or execution mid-flight, and
// a warm one's snapshots must be removed at the end). Every itinerary
// passes the same phases in the same order, so a stored record's phase
// means the same point on any of them.
func itinerary(spec Spec, rec *record.Record) []checkpoint {
	exec := spec.Execution
	if rec != nil && rec.Execution != "" {
		exec = rec.Execution
	}
	warm := spec.warm() || (rec != nil && rec.Warm != nil)
	if exec == ExecutionCluster && warm {
		return warmClusterItinerary
	}
	if exec == ExecutionCluster {
		return clusterItinerary
	}
	if warm {
		return warmItinerary
	}
	return coldItinerary
}

func checkpointIndex(route []checkpoint, p record.Phase) int {
	return slices.IndexFunc(route, func(c checkpoint) bool { return c.phase == p })
}

// Phases returns the checkpoints in order.
func Phases() []record.Phase {
	out := make([]record.Phase, len(coldItinerary))
	for i, c := range coldItinerary {
		out[i] = c.phase
	}
	return out
}

// stepPending: the record exists (Run created it); nothing else to do.
func (r *run) stepPending(context.Context) error {
	stamp(&r.rec().Timestamps.Created, r.now())
	return nil
}

// run is one Run's working state.
type run struct {
	e    *Engine
	spec Spec
	s    *coord.Stored
	// src is the source VM as observed during this Run (nil until a step
	// reads it).
	src     *esxi.VM
	slot    bool
	slotMu  sync.Mutex
	release func()
	rates   rateTracker
	// progressTo is what the run's progress Events are about: a copy of
	// the record's identity and ConfigMap taken when the run opened it, so
	// that transfer goroutines never read the record a save replaces.
	progressTo *coord.Stored
}

// firstPoll is how soon a wait loop first looks again. What the engine
// waits for is often a moment away (a DataVolume's next phase, a VMI's
// start), and every poll interval spent waiting for it is downtime; the
// interval then doubles up to Deps.PollInterval, so a long wait costs the
// API server and the host no more than before.
const firstPoll = 200 * time.Millisecond

// poller returns the sleep of one wait loop.
func (r *run) poller() func(context.Context) error { return r.pollerWaking(nil) }

// setStored makes s the run's record.
func (r *run) setStored(s *coord.Stored) {
	r.s = s
	if s.ConfigMap != nil {
		r.progressTo = &coord.Stored{Record: record.Record{Identity: s.Record.Identity}, ConfigMap: s.ConfigMap.DeepCopy()}
	}
}

func (r *run) rec() *record.Record { return &r.s.Record }

func (r *run) now() time.Time { return r.e.now() }

func (r *run) save(ctx context.Context) error { return r.e.store().Save(ctx, r.s) }

// report tells the run's watchers about ev: the progress callback (the
// provider's log) always and, when ev.Reason is set, the Kubernetes Events
// of the record's ConfigMap, as a warning for retries and stops. A progress
// event gets its transfer's throughput and, every progressEventInterval
// and at the transfer's end, the reason "Progress". Progress comes from the
// copies' and uploads' goroutines, so it is recorded against progressTo;
// other reports with a reason come from the run's own goroutine.
func (r *run) report(ctx context.Context, ev Event) {
	ev.Namespace, ev.Name = r.spec.Namespace, r.spec.Name
	if ev.Phase == "" {
		ev.Phase = r.rec().Phase
	}
	if ev.Kind != EventProgress {
		ev.Disk = -1
	}
	if ev.Time.IsZero() {
		ev.Time = r.e.now()
	}
	if due := r.rates.observe(&ev); ev.BytesPerSecond > 0 {
		ev.Message += " at " + ev.RateText()
		if due && r.progressTo != nil {
			ev.Reason = "Progress"
		}
	}
	if ev.Reason != "" {
		on := r.s
		if ev.Kind == EventProgress {
			on = r.progressTo
		}
		msg := ev.recorded
		if msg == "" {
			msg = ev.Message
		}
		r.e.store().Event(ctx, on, ev.Kind == EventRetry || ev.Kind == EventStop, ev.Reason, msg)
	}
	r.e.emit(ev)
}

// Run drives the migration described by spec to Completed, or to a stop:
// it returns the record and, unless Completed, a *StopError (or a
// *coord.LeaseHeldError when another run holds the migration). Run is idempotent
// and re-entrant: call it again after any interruption and it continues
// from what it observes.
func (e *Engine) Run(ctx context.Context, spec Spec) (record.Record, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return record.Record{}, &StopError{Phase: record.PhasePending, State: record.PhaseFailed, Reason: "InvalidSpec",
			Message: err.Error(), Action: "fix the configuration and run apply again", Err: err}
	}
	l, runCtx, err := e.acquireLeaseWaiting(ctx, spec.Namespace, spec.Name)
	if err != nil {
		return record.Record{}, err
	}
	defer l.Release()
	r := &run{e: e, spec: spec}
	defer r.releaseSlot()

	if err := r.open(runCtx); err != nil {
		var se *StopError
		if errors.As(err, &se) {
			return r.recordOrEmpty(), err
		}
		return r.recordOrEmpty(), &StopError{Phase: record.PhasePending, State: StateInterrupted, Reason: "RecordUnavailable",
			Message: "cannot read or create the migration record " + spec.Namespace + "/" + coord.RecordName(spec.Name) + ": " + err.Error(),
			Action:  "check access to the destination cluster, then run apply again", Err: err}
	}
	if err := checkRecordPaths(r.spec, r.rec()); err != nil {
		_, stop := r.failed(runCtx, r.rec().Phase, err)
		return *r.rec(), stop
	}
	if err := r.upgradeDigest(runCtx); err != nil {
		_, stop := r.interrupted(runCtx, r.rec().Phase, err)
		return *r.rec(), stop
	}
	if r.rec().ConversionMode == "" {
		// Saved with the next checkpoint, for imports to read back.
		r.rec().ConversionMode = r.spec.Conversion
	}
	if ex := r.rec().Execution; ex != "" && ex != r.spec.Execution {
		r.report(runCtx, Event{Kind: EventInfo, Message: fmt.Sprintf("the migration keeps execution %q, recorded when it was validated, although the configuration now says %q: it never switches mid-flight", ex, r.spec.Execution)})
	}
	return r.loop(runCtx)
}

func (r *run) recordOrEmpty() record.Record {
	if r.s == nil {
		return record.Record{}
	}
	return r.s.Record
}

// open loads (or creates) the record and turns a stop state into the
// checkpoint to work on.
func (r *run) open(ctx context.Context) error {
	s, err := r.e.store().Load(ctx, r.spec.Namespace, r.spec.Name)
	switch {
	case errors.Is(err, coord.ErrNoRecord):
		now := r.now()
		rec := record.Record{
			Version: record.RecordVersion,
			Identity: record.Identity{Host: r.spec.Host, VMID: r.spec.VMID, VMName: r.spec.VMName,
				Namespace: r.spec.Namespace, Name: r.spec.Name},
			Phase:      record.PhasePending,
			DiskDigest: record.DigestTree1MiB,
		}
		stamp(&rec.Timestamps.Created, now)
		// The create may have been applied although its reply was lost:
		// while this run holds the lease, a record of the same identity
		// that appeared is ours.
		if s, err = r.e.store().CreatePending(ctx, rec); err != nil {
			return err
		}
		r.setStored(s)
		r.e.store().Event(ctx, s, false, "Created", "migration of "+r.sourceLabel()+" to "+r.spec.Namespace+"/"+r.spec.Name+" created")
		return nil
	case err != nil:
		var fe *fault.Error
		if errors.As(err, &fe) {
			return &StopError{Phase: record.PhasePending, State: record.PhaseManualInterventionRequired, Reason: fe.Reason, Message: fe.Message, Action: fe.Action, Err: err}
		}
		return err
	}
	r.setStored(s)
	rec := r.rec()
	if msg := r.identityConflict(); msg != "" {
		if rec.Source == nil && rec.PowerOff == nil && len(rec.Disks) == 0 && rec.VM == nil {
			// Nothing was discovered or touched yet (for example the first
			// vm_name did not exist): the corrected source simply starts over.
			now := r.now()
			rec.AddError(record.ErrorEntry{Time: now, Phase: record.PhaseDiscovering, Class: record.ClassReentered,
				Attempt: rec.Attempts, Reason: "SourceChanged", Message: msg + "; nothing had been discovered yet, so the migration starts over with the new source"})
			rec.Identity.Host, rec.Identity.VMName, rec.Identity.VMID, rec.Identity.VMXPath = r.spec.Host, r.spec.VMName, r.spec.VMID, ""
			rec.Phase, rec.RetryPhase, rec.Attempts = record.PhaseDiscovering, "", 0
			rec.Reason, rec.Message, rec.Action = "", "", ""
			if err := r.save(ctx); err != nil {
				return err
			}
		} else {
			phase := rec.Phase
			if rec.RetryPhase != "" {
				phase = rec.RetryPhase
			}
			return &StopError{Phase: phase, State: record.PhaseFailed, Reason: "IdentityChanged", Message: msg,
				Action: "the source of a migration cannot change once it has been read: restore the previous values, or start over by deleting the record (kubectl delete configmap -n " +
					r.spec.Namespace + " " + coord.RecordName(r.spec.Name) + ") after dealing with what it created"}
		}
	}
	now := r.now()
	switch rec.Phase {
	case record.PhaseFailed:
		if s.ConfigMap.Annotations[coord.AnnotationReset] != "true" {
			return r.stopError(rec.RetryPhase, record.PhaseFailed, rec.Reason, rec.Message, rec.Action, nil)
		}
		s.ClearResetAnnotation()
		r.reenter(now, "reset by annotation "+coord.AnnotationReset+": re-entering "+string(rec.RetryPhase)+" with a fresh retry budget")
	case record.PhaseManualInterventionRequired:
		r.reenter(now, "run again after manual intervention ("+rec.Reason+"): re-observing and re-entering "+string(rec.RetryPhase))
	case record.PhaseRetryable:
		rec.Phase, rec.RetryPhase = rec.RetryPhase, ""
	default:
		return nil
	}
	if err := r.save(ctx); err != nil {
		return err
	}
	r.e.store().Event(ctx, s, false, "Resumed", "re-entering phase "+string(rec.Phase))
	return nil
}

func (r *run) reenter(now time.Time, msg string) {
	rec := r.rec()
	phase := rec.RetryPhase
	if phase == "" {
		phase = record.PhasePending
	}
	rec.AddError(record.ErrorEntry{Time: now, Phase: phase, Class: record.ClassReentered, Attempt: rec.Attempts, Reason: rec.Reason, Message: msg})
	rec.Phase, rec.RetryPhase, rec.Attempts = phase, "", 0
	rec.Reason, rec.Message, rec.Action = "", "", ""
}

// identityConflict reports a spec that names another source or host than
// the record.
func (r *run) identityConflict() string {
	id := r.rec().Identity
	switch {
	case id.Host != r.spec.Host:
		return fmt.Sprintf("this migration reads host %q but the configuration now says %q", id.Host, r.spec.Host)
	case r.spec.VMID != 0 && id.VMID != 0 && r.spec.VMID != id.VMID:
		return fmt.Sprintf("this migration moves vmid %d but the configuration now says %d", id.VMID, r.spec.VMID)
	case r.spec.VMID == 0 && r.spec.VMName != "" && id.VMName != "" && r.spec.VMName != id.VMName:
		return fmt.Sprintf("this migration moves VM %q but the configuration now says %q", id.VMName, r.spec.VMName)
	}
	return ""
}

func (r *run) sourceLabel() string {
	id := r.rec().Identity
	name := r.spec.VMName
	if id.VMName != "" {
		name = id.VMName
	}
	if name == "" {
		return fmt.Sprintf("vmid %d on %s", r.spec.VMID, r.spec.Host)
	}
	return fmt.Sprintf("VM %q on %s", name, r.spec.Host)
}

// loop runs the migration's itinerary from the record's phase.
func (r *run) loop(ctx context.Context) (record.Record, error) {
	for {
		rec := r.rec()
		route := itinerary(r.spec, rec)
		idx := checkpointIndex(route, rec.Phase)
		if idx < 0 {
			return *rec, r.stopError(rec.Phase, record.PhaseFailed, "UnknownPhase",
				fmt.Sprintf("the record is in phase %q, which this version of the provider does not know", rec.Phase),
				"upgrade the provider, or forget this migration and start over", nil)
		}
		st := route[idx]
		if st.phase == record.PhaseCompleted {
			if c, ok := rec.Condition(record.CondReady); ok && c.Status {
				return *rec, nil
			}
		}
		// A cancelled apply starts no new checkpoint.
		if err := ctx.Err(); err != nil {
			return r.interrupted(ctx, st.phase, err)
		}
		if err := r.hostSlot(ctx, st.phase); err != nil {
			return r.interrupted(ctx, st.phase, err)
		}
		err := st.run(r, ctx)
		if err == nil {
			err = r.advance(ctx, route, idx)
			if err == nil {
				if st.phase == record.PhaseCompleted {
					return *r.rec(), nil
				}
				continue
			}
		}
		if done, stop := r.failed(ctx, st.phase, err); done {
			return *r.rec(), stop
		}
	}
}

// advance records the step's success and moves to the next checkpoint in
// one write.
func (r *run) advance(ctx context.Context, route []checkpoint, idx int) error {
	rec := r.rec()
	st := route[idx]
	now := r.now()
	rec.Attempts = 0
	rec.Reason, rec.Message, rec.Action, rec.RetryPhase = "", "", "", ""
	if st.phase == record.PhaseCompleted {
		stamp(&rec.Timestamps.Completed, now)
		rec.SetCondition(now, record.CondReady, true, "Completed", "the migration is complete")
		if err := r.save(ctx); err != nil {
			return err
		}
		r.report(ctx, Event{Kind: EventPhase, Phase: record.PhaseCompleted, Reason: "Completed", Message: "migration completed"})
		return nil
	}
	next := route[idx+1].phase
	rec.Phase = next
	if err := r.save(ctx); err != nil {
		rec.Phase = st.phase
		return err
	}
	if next == record.PhaseConverting {
		r.releaseSlot()
	}
	r.report(ctx, Event{Kind: EventPhase, Phase: next, Reason: "Phase" + string(next), Message: string(st.phase) + " done; entering " + string(next),
		recorded: string(st.phase) + " done; now " + string(next)})
	return nil
}

// failed handles a step's error: retry within the budget, or stop. done
// is false when the loop should run the phase again.
func (r *run) failed(ctx context.Context, phase record.Phase, err error) (bool, error) {
	if ctx.Err() != nil {
		_, stop := r.interrupted(ctx, phase, err)
		return true, stop
	}
	class, reason := classify(err)
	rec := r.rec()
	now := r.now()
	var back *backTo
	if errors.As(err, &back) {
		// What an earlier checkpoint made is gone: believe what the
		// systems show and go back, within the retry budget.
		// Counted in the history, since going back resets Attempts.
		n := 1
		for _, h := range rec.Errors {
			if h.Reason == "Reobserved" && h.Phase == phase {
				n++
			}
		}
		rec.AddError(record.ErrorEntry{Time: now, Phase: phase, Class: record.ClassTransient, Attempt: n, Reason: "Reobserved",
			Message: back.reason + "; going back to " + string(back.phase)})
		if n >= r.spec.Retry.Attempts {
			return true, r.stop(ctx, phase, record.PhaseFailed, "RetriesExhausted", fmt.Sprintf("%s went back to %s %d times; the last problem: %s", phase, back.phase, n, back.reason), "", err)
		}
		rec.Phase = back.phase
		if serr := r.save(ctx); serr != nil {
			_, stop := r.interrupted(ctx, phase, serr)
			return true, stop
		}
		r.report(ctx, Event{Kind: EventRetry, Phase: phase, Attempt: n, Message: back.reason + "; going back to " + string(back.phase)})
		return false, nil
	}
	switch class {
	case fault.Interrupted:
		_, stop := r.interrupted(ctx, phase, err)
		return true, stop
	case fault.Transient:
		rec.Attempts++
		rec.AddError(record.ErrorEntry{Time: now, Phase: phase, Class: record.ClassTransient, Attempt: rec.Attempts, Reason: reason, Message: err.Error()})
		if rec.Attempts >= r.spec.Retry.Attempts {
			msg := fmt.Sprintf("%s did not succeed after %d attempts; the last error: %v", phase, rec.Attempts, err)
			if exhaustedNeedsHuman(phase) {
				return true, r.stop(ctx, phase, record.PhaseManualInterventionRequired, "RetriesExhausted", msg, exhaustedAction(phase, err), err)
			}
			return true, r.stop(ctx, phase, record.PhaseFailed, "RetriesExhausted", msg, "", err)
		}
		backoff := retry.Policy{Attempts: r.spec.Retry.Attempts, Initial: r.spec.Retry.Initial, Max: r.spec.Retry.Max}.Backoff(rec.Attempts)
		rec.Phase, rec.RetryPhase = record.PhaseRetryable, phase
		rec.Reason, rec.Message = reason, record.TruncateMessage(err.Error(), record.MaxStopMessageBytes)
		if serr := r.save(ctx); serr != nil {
			_, stop := r.interrupted(ctx, phase, serr)
			return true, stop
		}
		r.report(ctx, Event{Kind: EventRetry, Phase: phase, Reason: "Retrying", Attempt: rec.Attempts, Backoff: backoff,
			Message: fmt.Sprintf("%s attempt %d of %d failed, retrying in %s: %v", phase, rec.Attempts, r.spec.Retry.Attempts, backoff, err)})
		if serr := retry.Sleep(ctx, backoff); serr != nil {
			_, stop := r.interrupted(ctx, phase, serr)
			return true, stop
		}
		rec.Phase, rec.RetryPhase = phase, ""
		if serr := r.save(ctx); serr != nil {
			_, stop := r.interrupted(ctx, phase, serr)
			return true, stop
		}
		return false, nil
	case fault.NeedsHuman:
		rec.AddError(record.ErrorEntry{Time: now, Phase: phase, Class: record.ClassNeedsHuman, Attempt: rec.Attempts + 1, Reason: reason, Message: err.Error()})
		return true, r.stop(ctx, phase, record.PhaseManualInterventionRequired, reason, err.Error(), actionOf(err), err)
	default:
		rec.AddError(record.ErrorEntry{Time: now, Phase: phase, Class: record.ClassPermanent, Attempt: rec.Attempts + 1, Reason: reason, Message: err.Error()})
		return true, r.stop(ctx, phase, record.PhaseFailed, reason, err.Error(), actionOf(err), err)
	}
}

// exhaustedNeedsHuman lists the checkpoints where a human can usually fix
// what retries could not (capacity, an application that does not come up):
// they stop in ManualInterventionRequired rather than Failed.
func exhaustedNeedsHuman(p record.Phase) bool {
	return p == record.PhaseStarting || p == record.PhaseValidating
}

func exhaustedAction(p record.Phase, err error) string {
	if a := actionOf(err); a != "" {
		return a
	}
	if p == record.PhaseStarting {
		return "make room for the VM in the cluster (CPU, memory, nodes), then run apply again"
	}
	return "fix the cause, then run apply again"
}

// stop writes a stop state and returns its StopError.
func (r *run) stop(ctx context.Context, phase, state record.Phase, reason, msg, action string, err error) error {
	rec := r.rec()
	if state == record.PhaseFailed {
		msg += ". " + r.failCleanup(ctx)
		reset := "then add the annotation " + coord.AnnotationReset + `="true"` + " to ConfigMap " + r.spec.Namespace + "/" + coord.RecordName(r.spec.Name) +
			" and run apply again to retry " + string(phase) + ", or delete the resource to forget the migration"
		if action == "" {
			action = "fix the cause, " + reset
		} else {
			action += "; " + reset
		}
	}
	if state == record.PhaseManualInterventionRequired && action == "" {
		action = "fix the cause, then run apply again to continue from " + string(phase)
	}
	rec.Phase, rec.RetryPhase = state, phase
	rec.Reason, rec.Message, rec.Action = reason, record.TruncateMessage(msg, record.MaxStopMessageBytes), record.TruncateMessage(action, record.MaxStopMessageBytes)
	serr := r.save(context.WithoutCancel(ctx))
	se := r.stopError(phase, state, reason, msg, action, err)
	if serr != nil {
		se.Message += " (the record could not be updated: " + serr.Error() + ")"
	}
	r.report(ctx, Event{Kind: EventStop, Phase: phase, Reason: string(state), Message: se.Error(), recorded: msg})
	return se
}

func (r *run) stopError(phase, state record.Phase, reason, msg, action string, err error) *StopError {
	return &StopError{Phase: phase, State: state, Reason: reason, Message: msg, Action: action, Field: FieldOf(err), Err: err}
}

// interrupted records an interruption (context cancelled or timed out,
// lease lost, the record unwritable) and keeps the checkpoint.
func (r *run) interrupted(ctx context.Context, phase record.Phase, err error) (record.Record, error) {
	rec := r.rec()
	cause := err
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		cause = c
	}
	msg := "the run was interrupted: " + cause.Error()
	if rec.Phase == record.PhaseRetryable {
		phase = rec.RetryPhase
	}
	rec.AddError(record.ErrorEntry{Time: r.now(), Phase: phase, Class: record.ClassInterrupted, Attempt: rec.Attempts, Reason: "Interrupted", Message: msg})
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = r.save(sctx)
	se := r.stopError(phase, StateInterrupted, "Interrupted", msg, "run apply again to continue from "+string(phase), err)
	r.report(ctx, Event{Kind: EventStop, Phase: phase, Message: se.Error()})
	return *rec, se
}

// failCleanup removes what a Failed migration leaves that cannot be
// reused and describes what it did and what it kept. It never touches the
// source.
func (r *run) failCleanup(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	rec := r.rec()
	var cleaned, kept []string
	for i := range rec.Disks {
		d := &rec.Disks[i]
		if d.DataVolumeUID == "" || d.Imported {
			continue
		}
		dv, err := r.e.deps.Kube.GetDataVolume(ctx, r.spec.Namespace, d.DataVolume)
		if err != nil || !kube.OfMigration(dv.Labels, r.spec.Name) {
			continue
		}
		if string(dv.Status.Phase) == "Succeeded" {
			continue
		}
		if err := r.e.deps.Kube.DeleteDataVolume(ctx, r.spec.Namespace, d.DataVolume); err == nil {
			cleaned = append(cleaned, "deleted the incomplete DataVolume "+d.DataVolume)
			d.DataVolumeUID, d.DataVolumePhase, d.Uploaded = "", "", false
		}
	}
	switch {
	case len(rec.Disks) == 0:
	case r.inCluster():
		kept = append(kept, "the DataVolumes' claims with what the copy Jobs wrote and their journals (a reset resumes from them; deleting the resource with delete_policy delete_destination removes them)")
	default:
		kept = append(kept, "the staged copies under "+r.spec.stagingDir()+" (a reset resumes from them; deleting the resource removes them)")
	}
	var b strings.Builder
	if len(cleaned) == 0 {
		b.WriteString("Nothing was cleaned up")
	} else {
		b.WriteString("Cleaned up: " + strings.Join(cleaned, "; "))
	}
	if len(kept) > 0 {
		b.WriteString("; kept " + strings.Join(kept, "; "))
	}
	b.WriteString(". The source VM's disks were never modified")
	if po := rec.PowerOff; po != nil && po.Done && po.Action != record.PowerActionAlreadyOff && po.DoneAt != nil {
		fmt.Fprintf(&b, "; the source VM was powered off by this migration at %s and stays off: power it on again if you abandon the migration", po.DoneAt.Format(time.RFC3339))
	}
	return b.String()
}

// hostSlot holds a slot of the source host's limiter while the run is in
// the host-reading phases.
func (r *run) hostSlot(ctx context.Context, p record.Phase) error {
	if p != record.PhaseDiscovering && p != record.PhaseValidated && p != record.PhasePreparing {
		r.releaseSlot()
		return nil
	}
	r.slotMu.Lock()
	held := r.slot
	r.slotMu.Unlock()
	if held {
		return nil
	}
	if !r.e.limiter.tryAcquire(r.spec.Host) {
		r.report(ctx, Event{Kind: EventInfo, Phase: p, Message: "waiting for a free migration slot on host " + r.spec.Host})
		if err := r.e.limiter.acquire(ctx, r.spec.Host); err != nil {
			return err
		}
	}
	r.slotMu.Lock()
	r.slot = true
	r.slotMu.Unlock()
	return nil
}

func (r *run) releaseSlot() {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	if r.slot {
		r.e.limiter.release(r.spec.Host)
		r.slot = false
	}
}
