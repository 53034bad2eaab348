package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// stepPrepareCold is Preparing for a cold migration: it makes sure the
// source is off (per policy, decided once), then that every disk has been
// copied intact.
func (r *run) stepPrepareCold(ctx context.Context) error {
	vm, err := r.prepareSource(ctx)
	if err != nil {
		return err
	}
	if err := r.ensurePoweredOff(ctx, vm); err != nil {
		return err
	}
	return r.copyDisks(ctx)
}

// prepareSource is what Preparing observes first in every mode: the
// source as it is now, claimed by this migration, with room for its
// copies in work_dir.
func (r *run) prepareSource(ctx context.Context) (*esxi.VM, error) {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return nil, err
	}
	// Records validated before claims existed, or a claim deleted by hand.
	if err := r.claimSource(ctx, vm); err != nil {
		return nil, err
	}
	// The space check again, on what is staged now (a resumed copy needs
	// only the rest), before the source is touched. Cluster execution
	// stages nothing here.
	if c := r.spec.spaceCheck(r.rec().Disks, vm); !r.inCluster() && !c.Passed {
		return nil, needsHuman("WorkDirFull", c.Message, "free space on the file system of "+r.spec.WorkDir+", or set work_dir to a larger one, then run apply again", nil)
	}
	return vm, nil
}

// powerAct is what the power-off guard does next.
type powerAct int

const (
	// powerNothing: the source was powered off earlier and is still off.
	powerNothing powerAct = iota
	// powerRecopy: it was powered off earlier, ran again in between, and
	// is off now: the staged copies may predate changes, start them over.
	powerRecopy
	// powerOnAgain: it was powered off earlier and runs now: stop for a
	// human (the migration never powers a VM off twice).
	powerOnAgain
	// powerSuspended: a suspended VM would lose its memory state.
	powerSuspended
	// powerAskUser: policy manual and the VM runs: a human powers it off.
	powerAskUser
	// powerObservedOff: it is off: record that and go on.
	powerObservedOff
	// powerGraceful and powerHard: act on the recorded decision.
	powerGraceful
	powerHard
)

// powerDecision is the guard's verdict. decide, when not nil, is a new
// decision that must be recorded before acting on it.
type powerDecision struct {
	act    powerAct
	decide *record.PowerOff
}

// decidePowerOff is the power-off guard as a pure function of the
// recorded decision, the observed power state and the policy. The one
// irreversible act of a migration is decided once: a recorded decision is
// carried out, never re-made.
func decidePowerOff(prior *record.PowerOff, state esxi.PowerState, policy string, askedUser bool, now time.Time) powerDecision {
	if prior != nil && prior.Done {
		switch {
		case state != esxi.PoweredOff:
			return powerDecision{act: powerOnAgain}
		case prior.SeenOnAgain:
			return powerDecision{act: powerRecopy}
		}
		return powerDecision{act: powerNothing}
	}
	if state == esxi.Suspended {
		return powerDecision{act: powerSuspended}
	}
	if prior == nil {
		if state == esxi.PoweredOff {
			action := record.PowerActionAlreadyOff
			if askedUser {
				action = record.PowerActionUser
			}
			return powerDecision{act: powerObservedOff, decide: &record.PowerOff{Policy: policy, Action: action, DecidedAt: now}}
		}
		switch policy {
		case PolicyManual:
			return powerDecision{act: powerAskUser}
		case PolicyHard:
			return powerDecision{act: powerHard, decide: &record.PowerOff{Policy: policy, Action: record.PowerActionHard, DecidedAt: now}}
		}
		return powerDecision{act: powerGraceful, decide: &record.PowerOff{Policy: policy, Action: record.PowerActionGraceful, DecidedAt: now}}
	}
	switch {
	case state == esxi.PoweredOff:
		return powerDecision{act: powerObservedOff}
	case prior.Action == record.PowerActionHard || prior.HardAfterGraceful:
		return powerDecision{act: powerHard}
	}
	return powerDecision{act: powerGraceful}
}

// ensurePoweredOff applies the power-off guard (decidePowerOff).
func (r *run) ensurePoweredOff(ctx context.Context, vm *esxi.VM) error {
	rec := r.rec()
	state := vm.PowerState
	label := fmt.Sprintf("%q (vmid %d) on host %s", vm.Name, vm.VMID, r.spec.Host)
	now := r.now()
	d := decidePowerOff(rec.PowerOff, state, r.spec.PowerOffPolicy, r.askedUserToPowerOff(), now)
	po := rec.PowerOff
	if done, err := r.powerHandled(ctx, d.act, vm, label); done {
		return err
	}
	if d.decide != nil {
		rec.PowerOff, po = d.decide, d.decide
		if d.act == powerObservedOff {
			return r.powerOffDone(ctx, now)
		}
		// Record the decision before acting on it.
		if err := r.save(ctx); err != nil {
			return err
		}
		what := fmt.Sprintf("source VM %s (%s, policy %s)", label, po.Action, po.Policy)
		r.report(ctx, Event{Kind: EventInfo, Reason: "PoweringOff", Message: "powering off " + what, recorded: "powering off the " + what})
	}
	if d.act == powerObservedOff {
		po.Note = strings.TrimSpace(po.Note + " Observed off when the run resumed.")
		return r.powerOffDone(ctx, now)
	}
	c, err := r.esxiClient()
	if err != nil {
		return err
	}
	if d.decide == nil {
		// Carrying out a decision an earlier attempt recorded: its command
		// may have run although its reply was lost. Look again before
		// sending it again, and give a graceful shutdown the rest of its
		// time to finish.
		wait := time.Duration(0)
		if d.act == powerGraceful {
			wait = min(max(po.DecidedAt.Add(r.spec.ShutdownTimeout).Sub(r.now()), 0), r.spec.ShutdownTimeout)
		}
		off, err := r.waitOff(ctx, c, vm.VMID, wait)
		if err != nil {
			return err
		}
		if off {
			po.Note = strings.TrimSpace(po.Note + " Observed off before the power command was sent again.")
			return r.powerOffDone(ctx, r.now())
		}
	}
	if err := r.powerCommand(ctx, c, d.act, vm, label); err != nil {
		return err
	}
	st, err := c.PowerState(ctx, vm.VMID)
	if err != nil {
		return err
	}
	if st != esxi.PoweredOff {
		return transient("PowerOffNotObserved", fmt.Sprintf("source VM %s is still %s after %s power-off", label, st, po.Action), nil)
	}
	return r.powerOffDone(ctx, r.now())
}

// powerHandled carries out the guard's verdicts that send no power
// command: nothing to do, a stop for a human, or staged copies discarded.
// done is false when the verdict is to power off.
func (r *run) powerHandled(ctx context.Context, act powerAct, vm *esxi.VM, label string) (done bool, err error) {
	rec := r.rec()
	po := rec.PowerOff
	state := vm.PowerState
	switch act {
	case powerNothing:
		return true, nil
	case powerOnAgain:
		if !po.SeenOnAgain {
			po.SeenOnAgain = true
			if err := r.save(ctx); err != nil {
				return true, err
			}
		}
		return true, needsHuman("SourcePoweredOnAgain",
			fmt.Sprintf("source VM %s was powered off at %s (%s) but is %s now: someone turned it back on, so its disks may have changed", label, po.DoneAt.Format(time.RFC3339), po.Action, state),
			"make sure the source should stay off and power it off yourself (the migration never powers a VM off twice), then run apply again; the disks will be copied again from the start", nil)
	case powerRecopy:
		for i := range rec.Disks {
			if err := r.discardCopy(ctx, i); err != nil {
				return true, err
			}
		}
		po.SeenOnAgain = false
		po.Note = strings.TrimSpace(po.Note + " The source was found running again after the power-off; the staged copies were discarded and the disks copied again.")
		return true, r.save(ctx)
	case powerSuspended:
		return true, needsHuman("SourceSuspended", fmt.Sprintf("source VM %s is suspended: its memory state would be lost", label),
			"resume it and shut the guest down, then run apply again", nil)
	case powerAskUser:
		return true, onField(FieldPowerOffPolicy, needsHuman("PowerOffManual", fmt.Sprintf("source VM %s is %s and power_off_policy is %q", label, state, PolicyManual),
			fmt.Sprintf("power off %q yourself, then run apply again", vm.Name), nil))
	}
	return false, nil
}

// powerCommand sends the recorded power-off: hard, or a graceful shutdown
// that may turn hard as the policy allows (recorded before it is sent).
func (r *run) powerCommand(ctx context.Context, c *esxi.Client, act powerAct, vm *esxi.VM, label string) error {
	po := r.rec().PowerOff
	if act == powerHard {
		return c.PowerOff(ctx, vm.VMID)
	}
	sctx, cancel := context.WithTimeout(ctx, r.spec.ShutdownTimeout)
	err := c.Shutdown(sctx, vm.VMID)
	cancel()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		return nil
	}
	why := fmt.Sprintf("the guest did not shut down within %s", r.spec.ShutdownTimeout)
	if errors.Is(err, esxi.ErrToolsUnavailable) {
		why = "VMware Tools is not running in the guest, so it cannot be asked to shut down"
	} else if !errors.Is(err, context.DeadlineExceeded) && esxi.Classify(err) == esxi.Transient {
		return err
	}
	if po.Policy != PolicyGracefulThenHard {
		return onField(FieldPowerOffPolicy, needsHuman("ShutdownFailed", fmt.Sprintf("source VM %s: %s (%v)", label, why, err),
			fmt.Sprintf("shut %q down yourself (or choose power_off_policy %s), then run apply again", vm.Name, PolicyGracefulThenHard), nil))
	}
	po.HardAfterGraceful, po.Action = true, record.PowerActionHard
	po.Note = strings.TrimSpace(po.Note + " " + why + "; powered off hard as graceful_then_hard allows.")
	if err := r.save(ctx); err != nil {
		return err
	}
	return c.PowerOff(ctx, vm.VMID)
}

// waitOff reads the source's power state until it is off or wait has
// passed (at least once).
func (r *run) waitOff(ctx context.Context, c *esxi.Client, vmid int, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	sleep := r.poller()
	for {
		st, err := c.PowerState(ctx, vmid)
		if err != nil {
			return false, err
		}
		if st == esxi.PoweredOff {
			return true, nil
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		if err := sleep(ctx); err != nil {
			return false, err
		}
	}
}

// askedUserToPowerOff reports whether this migration stopped earlier to
// ask a human to power the source off.
func (r *run) askedUserToPowerOff() bool {
	for _, e := range r.rec().Errors {
		if e.Reason == "PowerOffManual" || e.Reason == "ShutdownFailed" {
			return true
		}
		if e.Reason == "PreflightFailed" && strings.Contains(e.Message, preflight.CheckPowerPolicy) {
			return true
		}
	}
	return false
}

func (r *run) powerOffDone(ctx context.Context, now time.Time) error {
	rec := r.rec()
	po := rec.PowerOff
	po.Done = true
	t := now
	po.DoneAt = &t
	stamp(&rec.Timestamps.SourcePoweredOff, now)
	rec.SetCondition(now, record.CondSourcePoweredOff, true, po.Action, "the source VM is powered off ("+po.Action+")")
	return r.save(ctx)
}

// discardCopy throws disk i's copy away, so that it is copied again from
// the start: the staged files, or in cluster execution its DataVolume,
// whose claim holds the copy and its journal (the next Preparing makes a
// new one, and a new copy Job fills it).
func (r *run) discardCopy(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	if r.inCluster() {
		if err := r.deleteDataVolume(ctx, i); err != nil {
			return err
		}
		r.claimReplaced(ctx, i)
	} else {
		if err := transfer.Remove(r.spec.stagedPath(i)); err != nil {
			return err
		}
		if err := r.removeChainCopies(i); err != nil {
			return err
		}
	}
	d.Acquired, d.SourceSHA256, d.ZeroBytes, d.GuestSHA256 = false, "", 0, ""
	return nil
}
