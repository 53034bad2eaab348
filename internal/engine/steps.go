package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// step is one checkpoint: run observes, decides, acts and records evidence,
// and returns nil only once the checkpoint's goal has been observed.
type step struct {
	phase Phase
	run   func(r *run, ctx context.Context) error
}

// steps is the migration, in order.
var steps = []step{
	{PhasePending, (*run).stepPending},
	{PhaseDiscovering, (*run).stepDiscover},
	{PhaseValidated, (*run).stepValidate},
	{PhasePreparing, (*run).stepPrepare},
	{PhaseConverting, (*run).stepConvert},
	{PhaseImporting, (*run).stepImport},
	{PhaseCreatingVM, (*run).stepCreateVM},
	{PhaseStarting, (*run).stepStart},
	{PhaseValidating, (*run).stepValidateGuest},
	{PhaseCompleted, (*run).stepCompleteWarm},
}

func stepIndex(p Phase) int {
	return slices.IndexFunc(steps, func(s step) bool { return s.phase == p })
}

// Phases returns the checkpoints in order.
func Phases() []Phase {
	out := make([]Phase, len(steps))
	for i, s := range steps {
		out[i] = s.phase
	}
	return out
}

// stepPending: the record exists (Run created it); nothing else to do.
func (r *run) stepPending(context.Context) error {
	stamp(&r.rec().Timestamps.Created, r.now())
	return nil
}

// esxiClient returns the source host's client.
func (r *run) esxiClient() (*esxi.Client, error) { return r.e.hostClient(r.spec.Host) }

// observeSource reads the source VM now: by the recorded vmid (checking
// it is still the same .vmx), else the VM the spec names.
func (r *run) observeSource(ctx context.Context) (*esxi.VM, error) {
	vm, err := r.e.findSource(ctx, r.spec, r.rec().Identity, 0)
	if err != nil {
		return nil, err
	}
	r.src = vm
	return vm, nil
}

// stepDiscover records the source's identity and inventory and the
// deterministic names of everything the migration will create.
func (r *run) stepDiscover(ctx context.Context) error {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return err
	}
	r.recordInventory(vm)
	now := r.now()
	rec := r.rec()
	stamp(&rec.Timestamps.Discovered, now)
	rec.setCondition(now, CondSourceDiscovered, true, "Found",
		fmt.Sprintf("VM %q (vmid %d, %d disk(s), %d NIC(s)) on host %s", vm.Name, vm.VMID, len(vm.Disks), len(vm.NICs), r.spec.Host))
	return nil
}

// recordInventory writes the identity, the inventory snapshot and the
// per-disk plan. Disks already acquired keep their evidence.
func (r *run) recordInventory(vm *esxi.VM) {
	rec := r.rec()
	rec.Identity.VMID, rec.Identity.VMName, rec.Identity.VMXPath = vm.VMID, vm.Name, vm.VMXPath
	rec.Source = sourceInventoryOf(vm)
	rec.Disks = planDisks(r.spec, vm, rec.Disks)
}

// stepValidate runs the pre-flight checks on what the source and the
// cluster show now, through the same Preview judgement a plan makes.
func (r *run) stepValidate(ctx context.Context) error {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return err
	}
	// The source may have changed while a human fixed a blocker.
	r.recordInventory(vm)
	p, err := r.e.judge(ctx, r.spec, vm, r.rec().Disks, r.rec().Warm)
	if err != nil {
		return err
	}
	now := r.now()
	rec := r.rec()
	rec.Preflight = nil
	for _, c := range p.Checks.Checks {
		rec.Preflight = append(rec.Preflight, CheckResult{ID: c.ID, Severity: string(c.Severity), Passed: c.Passed, Message: c.Message, Time: now})
	}
	var blockers []string
	for _, c := range p.Blockers() {
		blockers = append(blockers, c.ID+": "+c.Message)
	}
	if len(blockers) > 0 {
		msg := "pre-flight checks failed: " + strings.Join(blockers, " ")
		rec.setCondition(now, CondValidated, false, "ChecksFailed", msg)
		return onField(FieldSource, needsHuman("PreflightFailed", msg, "fix what the checks report, then run apply again", nil))
	}
	// Claim the source before anything acts on it: of two migrations of
	// one VM, only the claim's holder goes on to Preparing.
	if err := r.claimSource(ctx, vm); err != nil {
		return err
	}
	stamp(&rec.Timestamps.Validated, now)
	rec.setCondition(now, CondValidated, true, "ChecksPassed", fmt.Sprintf("%d checks passed", len(p.Checks.Checks)))
	return nil
}

// stepPrepare makes sure the source is off (per policy, decided once) and
// every disk has been copied intact.
func (r *run) stepPrepare(ctx context.Context) error {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return err
	}
	// Records validated before claims existed, or a claim deleted by hand.
	if err := r.claimSource(ctx, vm); err != nil {
		return err
	}
	// The space check again, on what is staged now (a resumed copy needs
	// only the rest), before the source is touched.
	if c := r.spec.spaceCheck(r.rec().Disks, vm); !c.Passed {
		return needsHuman("WorkDirFull", c.Message, "free space on the file system of "+r.spec.WorkDir+", or set work_dir to a larger one, then run apply again", nil)
	}
	if r.spec.warm() {
		return r.stepPrepareWarm(ctx, vm)
	}
	if err := r.ensurePoweredOff(ctx, vm); err != nil {
		return err
	}
	return r.copyDisks(ctx)
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
	decide *PowerOff
}

// decidePowerOff is the power-off guard as a pure function of the
// recorded decision, the observed power state and the policy. The one
// irreversible act of a migration is decided once: a recorded decision is
// carried out, never re-made.
func decidePowerOff(prior *PowerOff, state esxi.PowerState, policy string, askedUser bool, now time.Time) powerDecision {
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
			action := PowerActionAlreadyOff
			if askedUser {
				action = PowerActionUser
			}
			return powerDecision{act: powerObservedOff, decide: &PowerOff{Policy: policy, Action: action, DecidedAt: now}}
		}
		switch policy {
		case PolicyManual:
			return powerDecision{act: powerAskUser}
		case PolicyHard:
			return powerDecision{act: powerHard, decide: &PowerOff{Policy: policy, Action: PowerActionHard, DecidedAt: now}}
		}
		return powerDecision{act: powerGraceful, decide: &PowerOff{Policy: policy, Action: PowerActionGraceful, DecidedAt: now}}
	}
	switch {
	case state == esxi.PoweredOff:
		return powerDecision{act: powerObservedOff}
	case prior.Action == PowerActionHard || prior.HardAfterGraceful:
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
	switch d.act {
	case powerNothing:
		return nil
	case powerOnAgain:
		if !po.SeenOnAgain {
			po.SeenOnAgain = true
			if err := r.save(ctx); err != nil {
				return err
			}
		}
		return needsHuman("SourcePoweredOnAgain",
			fmt.Sprintf("source VM %s was powered off at %s (%s) but is %s now: someone turned it back on, so its disks may have changed", label, po.DoneAt.Format(time.RFC3339), po.Action, state),
			"make sure the source should stay off and power it off yourself (the migration never powers a VM off twice), then run apply again; the disks will be copied again from the start", nil)
	case powerRecopy:
		for i := range rec.Disks {
			dk := &rec.Disks[i]
			if err := transfer.Remove(r.spec.stagedPath(i)); err != nil {
				return err
			}
			if err := r.removeChainCopies(i); err != nil {
				return err
			}
			dk.Acquired, dk.SourceSHA256, dk.ZeroBytes, dk.GuestSHA256 = false, "", 0, ""
		}
		po.SeenOnAgain = false
		po.Note = strings.TrimSpace(po.Note + " The source was found running again after the power-off; the staged copies were discarded and the disks copied again.")
		return r.save(ctx)
	case powerSuspended:
		return needsHuman("SourceSuspended", fmt.Sprintf("source VM %s is suspended: its memory state would be lost", label),
			"resume it and shut the guest down, then run apply again", nil)
	case powerAskUser:
		return onField(FieldPowerOffPolicy, needsHuman("PowerOffManual", fmt.Sprintf("source VM %s is %s and power_off_policy is %q", label, state, PolicyManual),
			fmt.Sprintf("power off %q yourself, then run apply again", vm.Name), nil))
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
		r.e.event(ctx, r.s, false, "PoweringOff", fmt.Sprintf("powering off the source VM %s (%s, policy %s)", label, po.Action, po.Policy))
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("powering off source VM %s (%s, policy %s)", label, po.Action, po.Policy)})
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
	if d.act == powerHard {
		if err := c.PowerOff(ctx, vm.VMID); err != nil {
			return err
		}
	} else {
		sctx, cancel := context.WithTimeout(ctx, r.spec.ShutdownTimeout)
		err := c.Shutdown(sctx, vm.VMID)
		cancel()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
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
			po.HardAfterGraceful, po.Action = true, PowerActionHard
			po.Note = strings.TrimSpace(po.Note + " " + why + "; powered off hard as graceful_then_hard allows.")
			if err := r.save(ctx); err != nil {
				return err
			}
			if err := c.PowerOff(ctx, vm.VMID); err != nil {
				return err
			}
		}
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
	rec.setCondition(now, CondSourcePoweredOff, true, po.Action, "the source VM is powered off ("+po.Action+")")
	return r.save(ctx)
}

func (r *run) chunkSize() int64 {
	if r.spec.CopyChunkSize > 0 {
		return r.spec.CopyChunkSize
	}
	return transfer.DefaultChunkSize
}

// copyDisks copies every disk into the work folder, resuming from the
// transfer journals.
func (r *run) copyDisks(ctx context.Context) error {
	rec := r.rec()
	c, err := r.esxiClient()
	if err != nil {
		return err
	}
	if err := r.localPathsUsable(); err != nil {
		return err
	}
	if err := os.MkdirAll(r.spec.stagingDir(), 0o700); err != nil {
		return needsHuman("WorkDirUnusable", "cannot create the work folder "+r.spec.stagingDir(), "make work_dir writable, then run apply again", err)
	}
	// Disks on snapshots: their chain files (see chain.go).
	if err := r.copyChains(ctx, c); err != nil {
		return err
	}
	var jobs []transfer.Job
	byDest := map[string]int{}
	for i, d := range rec.Disks {
		if d.onChain() {
			continue
		}
		jobs = append(jobs, transfer.Job{Disk: transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, Dest: r.spec.stagedPath(i)})
		byDest[r.spec.stagedPath(i)] = i
	}
	// Streams per disk, each on its own connection (the host's setting,
	// within its max_sessions).
	var sources []transfer.RangeReader
	streams := c.Config().StreamsPerDisk
	for _, s := range c.StreamClients(streams) {
		sources = append(sources, s)
	}
	watch := newCopyWatch(r.chunkSize())
	opts := transfer.Options{
		ChunkSize: r.chunkSize(),
		Streams:   streams,
		Sources:   sources,
		Progress: func(p transfer.Progress) {
			watch.progress(p)
			// From the copy's goroutines: the phase is given, not read
			// from the record the main goroutine saves.
			r.emit(Event{Kind: EventProgress, Phase: PhasePreparing, Disk: byDest[p.Dest], BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Percent: p.Percent,
				Message: fmt.Sprintf("disk %d: copied %d of %d bytes (%.1f%%)", byDest[p.Dest], p.BytesDone, p.BytesTotal, p.Percent)})
		},
	}
	// The copies run in their own goroutines; this one owns the record.
	// When disks need no conversion, each disk verified while others still
	// copy is recorded and sent to its DataVolume at once (pipeline.go).
	finished := make(chan transfer.JobResult, len(jobs))
	var results []transfer.JobResult
	go func() {
		results, err = transfer.CopyEach(ctx, c, jobs, len(jobs), opts, func(jr transfer.JobResult) { finished <- jr })
		close(finished)
	}()
	running := len(jobs)
	ended := map[string]bool{}
	var last *lastUpload
	lastTried, failed := false, false
	// Once one disk still copies and enough of it is verified to judge
	// it, it is sent as its copy is verified (stream.go), from then on.
	tryLast := func() {
		if lastTried || failed || running != 1 || len(jobs) < 2 || !r.pipelined() {
			return
		}
		for _, j := range jobs {
			if !ended[j.Dest] && watch.verifiedPrefix(j.Dest) >= j.Disk.SizeBytes/8 {
				lastTried = true
				last = r.startLastUpload(ctx, byDest[j.Dest], watch)
			}
		}
	}
	for open := true; open; {
		select {
		case <-watch.wake:
			tryLast()
		case jr, ok := <-finished:
			if !ok {
				open = false
				continue
			}
			running--
			ended[jr.Job.Dest] = true
			failed = failed || jr.Err != nil
			if jr.Err != nil || !r.pipelined() || running == 0 {
				continue
			}
			i := byDest[jr.Job.Dest]
			d := &rec.Disks[i]
			d.SourceSHA256, d.ZeroBytes, d.Acquired = jr.Result.SHA256, jr.Result.ZeroBytes, true
			if r.save(ctx) != nil {
				continue
			}
			tryLast() // before this disk's upload, so that the two overlap
			r.uploadEarly(ctx, i, false)
		}
	}
	var worst error
	worstRank := -1
	for _, jr := range results {
		i := byDest[jr.Job.Dest]
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
	if last != nil {
		var copyErr error
		for _, jr := range results {
			if jr.Job.Dest == last.dest {
				copyErr = jr.Err
			}
		}
		if copyErr == nil && err != nil {
			copyErr = err
		}
		r.finishLastUpload(ctx, last, copyErr)
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
	rec.setCondition(now, CondDiskAcquired, true, "Copied", fmt.Sprintf("%d disk(s) copied and checksummed", len(rec.Disks)))
	return nil
}

// backTo sends the migration back to an earlier checkpoint because what
// that checkpoint made is gone.
type backTo struct {
	phase  Phase
	reason string
}

func (b *backTo) Error() string { return b.reason }

// stepConvert makes the image to import for every disk.
func (r *run) stepConvert(ctx context.Context) error {
	rec := r.rec()
	if err := r.localPathsUsable(); err != nil {
		return err
	}
	if r.spec.Conversion == ConversionVirtV2V && rec.Conversion != nil && r.convertedIntact() {
		// Converted by an earlier run: the images CDI receives are ready.
		return r.converted()
	}
	if err := r.ensureStagingToken(ctx); err != nil {
		return err
	}
	if err := r.flattenChains(ctx); err != nil { // disks on snapshots, see chain.go
		return err
	}
	for i := range rec.Disks {
		if d := &rec.Disks[i]; d.Uploaded && d.ArtifactSHA256 != "" {
			continue // its image was made and sent while others were prepared
		}
		if err := r.prepareImage(ctx, i); err != nil {
			return err
		}
	}
	if err := r.convertGuest(ctx); err != nil {
		return err
	}
	return r.converted()
}

// prepareImage makes disk i's image to import from its verified staged
// copy (or its chain, flattened): the staged raw file itself, or qemu-img's
// conversion to the target format, checked and recorded.
func (r *run) prepareImage(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	art, staged := r.spec.artifactPath(i), r.spec.stagedPath(i)
	st, err := transfer.Inspect(transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, staged, r.chunkSize())
	if err != nil {
		return err
	}
	if st.State != transfer.StateComplete {
		if d.ArtifactSHA256 != "" && art != staged && r.artifactIntact(ctx, d, art) {
			return nil
		}
		return &backTo{phase: PhasePreparing, reason: fmt.Sprintf("the staged copy of disk %d (%s) is %s", i, staged, st.State)}
	}
	format := convert.Format(r.spec.TargetFormat)
	if art == staged {
		if _, err := r.e.tool.Check(ctx, art, convert.Raw, d.SizeBytes); err != nil {
			return err
		}
		d.ArtifactPath, d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = art, string(convert.Raw), d.SourceSHA256, d.SizeBytes
	} else {
		mkdir := func() error { return os.MkdirAll(filepath.Dir(art), 0o700) }
		if r.spec.Transport.Kind == TransportHTTP {
			mkdir = r.spec.makeHTTPFolder
		}
		if err := mkdir(); err != nil {
			return needsHuman("StagingDirUnusable", "cannot create "+filepath.Dir(art), "make the folder writable, then run apply again", err)
		}
		a, err := r.e.tool.Convert(ctx, staged, convert.Raw, art, format)
		if isNoSpace(err) {
			return r.noSpace(fmt.Sprintf("converting disk %d", i), err)
		}
		if err != nil {
			return err
		}
		if _, err := r.e.tool.Check(ctx, a.Path, format, d.SizeBytes); err != nil {
			_ = convert.Remove(art)
			return err
		}
		// Only the provider's user (and an HTTP server running as it)
		// reads the images.
		for _, p := range []string{art, art + convert.SidecarSuffix} {
			if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
				return needsHuman("StagingDirUnusable", "cannot restrict the permissions of "+p, "make the folder writable, then run apply again", err)
			}
		}
		d.ArtifactPath, d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = art, string(a.Format), a.SHA256, a.SizeBytes
	}
	if r.spec.Transport.Kind == TransportHTTP {
		d.ArtifactURL = r.spec.imageURL(i)
	}
	r.emit(Event{Kind: EventProgress, Disk: i, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
		Message: fmt.Sprintf("disk %d: %s image ready (sha256 %s)", i, d.ArtifactFormat, d.ArtifactSHA256)})
	return nil
}

// converted records that the images CDI receives are ready.
func (r *run) converted() error {
	rec := r.rec()
	now := r.now()
	stamp(&rec.Timestamps.Converted, now)
	rec.setCondition(now, CondDiskConverted, true, "Converted", fmt.Sprintf("%d %s image(s) ready", len(rec.Disks), r.spec.TargetFormat))
	return nil
}

// ensureStagingToken makes the http transport's random folder name once,
// recording it before any image is written there. A migration whose images
// were written before tokens existed keeps its folder.
func (r *run) ensureStagingToken(ctx context.Context) error {
	rec := r.rec()
	if r.spec.Transport.Kind != TransportHTTP || rec.StagingToken != "" {
		return nil
	}
	for _, d := range rec.Disks {
		if d.ArtifactPath != "" {
			return nil
		}
	}
	t, err := newStagingToken()
	if err != nil {
		return err
	}
	rec.StagingToken = t
	if err := r.save(ctx); err != nil {
		rec.StagingToken = ""
		return err
	}
	r.spec.stagingToken = t
	return nil
}

// artifactIntact reports whether a converted artifact still matches its
// recorded checksum (its sidecar, verified by Convert's skip path, is not
// usable without the source: check the size and format instead).
func (r *run) artifactIntact(ctx context.Context, d *DiskEvidence, art string) bool {
	fi, err := os.Stat(art)
	if err != nil || fi.Size() != d.ArtifactBytes {
		return false
	}
	_, err = r.e.tool.Check(ctx, art, convert.Format(d.ArtifactFormat), d.SizeBytes)
	return err == nil
}

// stepImport makes one Succeeded DataVolume per disk.
func (r *run) stepImport(ctx context.Context) error {
	rec := r.rec()
	// Every DataVolume is created first, so that CDI prepares their upload
	// pods together; every image is then sent, while CDI converts the ones
	// already sent; last, every import is waited for. Each pass observes
	// and is safe to re-enter, like the whole step.
	for _, stage := range []importStage{importCreated, importSent, importDone} {
		for i := range rec.Disks {
			if err := r.importDisk(ctx, i, stage); err != nil {
				return err
			}
		}
	}
	now := r.now()
	stamp(&rec.Timestamps.Imported, now)
	rec.setCondition(now, CondDiskImported, true, "Succeeded", fmt.Sprintf("%d DataVolume(s) Succeeded", len(rec.Disks)))
	return nil
}

// dvFailureIsPermanent reports whether a failed DataVolume's reason says
// the image itself was refused, which recreating it will not fix.
func dvFailureIsPermanent(reason, message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "unable to process data") || strings.Contains(m, "invalid format") ||
		strings.Contains(m, "exceeds") || strings.Contains(m, "larger than")
}

func dvRunningCondition(dv *cdiv1beta1.DataVolume) (string, string) {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1beta1.DataVolumeRunning {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

// importStage is how far importDisk takes a disk before it returns.
type importStage int

const (
	// importCreated: the disk's DataVolume exists and is ours.
	importCreated importStage = iota
	// importSent: its image has been sent (nothing to send with the http
	// transport: CDI fetches it).
	importSent
	// importDone: the DataVolume Succeeded.
	importDone
)

func (r *run) importDisk(ctx context.Context, i int, stage importStage) error {
	rec := r.rec()
	d := &rec.Disks[i]
	ns := r.spec.Namespace
	kc := r.e.deps.Kube
	lastProgress := ""
	wait := r.poller()
	for {
		dv, err := kc.GetDataVolume(ctx, ns, d.DataVolume)
		switch {
		case kube.IsNotFound(err):
			if d.Imported {
				d.Imported = false
			}
			if r.spec.Transport.Kind == TransportHTTP {
				// CDI fetches what the spec derives, never a URL read back
				// from the record; the image is removed once imported.
				d.ArtifactURL = r.spec.imageURL(i)
				if _, err := os.Stat(r.spec.imagePath(i)); err != nil {
					return &backTo{phase: PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, r.spec.imagePath(i))}
				}
			}
			dv = r.renderDataVolume(*d)
			if err := kc.CreateDataVolume(ctx, dv); err != nil {
				if kube.IsAlreadyExists(err) {
					continue // look at it: its labels say whether it is ours
				}
				if kube.Classify(err) == kube.Transient {
					// The create may have been applied although its reply
					// was lost: look before creating again.
					if _, gerr := kc.GetDataVolume(ctx, ns, d.DataVolume); gerr == nil {
						continue
					}
				}
				return err
			}
			d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = string(dv.UID), false, "", ""
			if err := r.save(ctx); err != nil {
				return err
			}
			r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: created DataVolume %s", i, d.DataVolume)})
			continue
		case err != nil:
			return err
		}
		if !isOurs(dv.Labels, r.spec.Name) {
			return needsHuman("DataVolumeNotOurs",
				fmt.Sprintf("DataVolume %s/%s exists and was not created by this migration (label %s=%q)", ns, d.DataVolume, kube.LabelMigration, dv.Labels[kube.LabelMigration]),
				"the provider never overwrites what it does not own: remove or rename that DataVolume, or choose another destination name, then run apply again", nil)
		}
		if string(dv.UID) != d.DataVolumeUID {
			// Ours, but not the one recorded (recreated, or created by a
			// run interrupted before it could record the UID).
			d.DataVolumeUID, d.Uploaded = string(dv.UID), false
		}
		if stage == importCreated {
			return nil
		}
		d.DataVolumePhase, d.Progress = string(dv.Status.Phase), string(dv.Status.Progress)
		switch dv.Status.Phase {
		case cdiv1beta1.Succeeded:
			d.Imported = true
			if r.spec.Transport.Kind == TransportHTTP {
				// Imported: the image need not stay where the HTTP server
				// serves it.
				if err := convert.Remove(r.spec.imagePath(i)); err != nil {
					return transient("CleanupFailed", fmt.Sprintf("cannot remove the served image of disk %d", i), err)
				}
			}
			r.emit(Event{Kind: EventProgress, Disk: i, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
				Message: fmt.Sprintf("disk %d: DataVolume %s Succeeded", i, d.DataVolume)})
			return r.save(ctx)
		case cdiv1beta1.Failed:
			reason, msg := dvRunningCondition(dv)
			if dvFailureIsPermanent(reason, msg) {
				return permanent("DataVolumeFailed", fmt.Sprintf("DataVolume %s/%s failed: %s: %s", ns, d.DataVolume, reason, msg),
					"check the image and the storage class", nil)
			}
			if err := kc.DeleteDataVolume(ctx, ns, d.DataVolume); err != nil {
				return err
			}
			if err := r.waitGone(ctx, d.DataVolume); err != nil {
				return err
			}
			d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = "", false, "", ""
			if err := r.save(ctx); err != nil {
				return err
			}
			return transient("DataVolumeFailed", fmt.Sprintf("DataVolume %s/%s failed (%s: %s); deleted it so that the next attempt recreates it", ns, d.DataVolume, reason, msg), nil)
		case cdiv1beta1.UploadReady:
			if dv.Spec.Source != nil && dv.Spec.Source.Upload != nil && !d.Uploaded {
				if err := r.upload(ctx, i); err != nil {
					return err
				}
				d.Uploaded = true
				if err := r.save(ctx); err != nil {
					return err
				}
				continue
			}
		}
		if stage == importSent && (d.Uploaded || dv.Spec.Source == nil || dv.Spec.Source.Upload == nil) {
			return nil
		}
		if d.Progress != lastProgress {
			lastProgress = d.Progress
			r.emit(Event{Kind: EventProgress, Disk: i, BytesTotal: d.SizeBytes, Percent: parsePercent(d.Progress),
				Message: fmt.Sprintf("disk %d: DataVolume %s %s %s", i, d.DataVolume, d.DataVolumePhase, d.Progress)})
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}

func parsePercent(p string) float64 {
	var f float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(p, "%"), "%g", &f); err != nil {
		return 0
	}
	return f
}

// waitGone waits until a deleted DataVolume has disappeared.
func (r *run) waitGone(ctx context.Context, name string) error {
	wait := r.poller()
	for {
		_, err := r.e.deps.Kube.GetDataVolume(ctx, r.spec.Namespace, name)
		if kube.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}

func (r *run) upload(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	art := r.spec.imagePath(i)
	if _, err := os.Stat(art); err != nil {
		return &backTo{phase: PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, art)}
	}
	send, err := r.uploadImage(ctx, i, art)
	if err != nil {
		return err
	}
	// The record says what is being sent before it leaves, and Uploaded
	// once it has arrived; an interrupted upload is sent again.
	d.UploadFormat, d.UploadBytes, d.UploadSHA256 = string(send.Format), send.SizeBytes, send.SHA256
	if err := r.save(ctx); err != nil {
		return err
	}
	size := send.SizeBytes
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: uploading %s (%s, %d bytes for a %d-byte disk) to DataVolume %s",
		i, send.Path, send.Format, size, d.SizeBytes, d.DataVolume)})
	err = r.e.deps.Uploader.Upload(ctx, UploadRequest{
		Namespace: r.spec.Namespace, DataVolume: d.DataVolume, Path: send.Path, Size: size,
		ProxyURL: r.spec.Transport.UploadProxyURL, CAPEM: r.spec.Transport.UploadProxyCAPEM, Insecure: r.spec.Transport.Insecure,
		Progress: r.uploadProgress(i, size, "", fmt.Sprintf("disk %d", i)),
	})
	if err != nil {
		return err
	}
	if send.Path != art {
		// Sent: the qcow2 copy has done its job.
		if err := convert.Remove(send.Path); err != nil {
			r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: cannot remove %s (removed with the staging folder): %v", i, send.Path, err)})
		}
	}
	return nil
}

// uploadProgress reports an upload of disk i as progress events, at most
// about once a second and at its end, under label (the transfer's name in
// throughput figures) and in phase ("": the record's).
func (r *run) uploadProgress(i int, size int64, phase Phase, label string) func(sent int64) {
	var last time.Time
	return func(sent int64) {
		if time.Since(last) < time.Second && sent < size {
			return
		}
		last = time.Now()
		pct := 0.0
		if size > 0 {
			pct = 100 * float64(sent) / float64(size)
		}
		r.emit(Event{Kind: EventProgress, Phase: phase, Disk: i, BytesDone: sent, BytesTotal: size, Percent: pct,
			Message: fmt.Sprintf("%s: uploaded %d of %d bytes (%.1f%%)", label, sent, size, pct)})
	}
}

// qcow2MinSaving: a raw image is sent as a qcow2 copy only when its holes
// are at least 1/qcow2MinSaving of it.
const qcow2MinSaving = 8

// uploadImage returns the file to send to CDI's upload proxy for disk i.
// A raw image is sent as a qcow2 copy (qemu-img convert detects zero runs
// and holes, so only data crosses the wire); CDI converts it back to raw
// in the claim, so the disk the guest sees, and its checksum, are the raw
// image's. The copy is made with convert.Tool.Convert: an interrupted
// upload finds it intact (its sidecar) and sends it again without
// converting. When the work folder has no room for it, or the image is
// nearly all data, the raw image is sent as it is.
func (r *run) uploadImage(ctx context.Context, i int, art string) (convert.Artifact, error) {
	fi, err := os.Stat(art)
	if err != nil {
		return convert.Artifact{}, &backTo{phase: PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, art)}
	}
	asIs := convert.Artifact{Path: art, Format: convert.Format(r.spec.TargetFormat), SizeBytes: fi.Size()}
	if d := r.rec().Disks[i]; art == r.spec.artifactPath(i) && d.ArtifactFormat != "" {
		asIs.Format, asIs.SHA256 = convert.Format(d.ArtifactFormat), d.ArtifactSHA256
	} else if d.ConvertedSHA256 != "" {
		asIs.SHA256 = d.ConvertedSHA256
	}
	if asIs.Format != convert.Raw {
		return asIs, nil
	}
	// The copy pays off by leaving zeros behind; for an image that is
	// nearly all data it would only add a local rewrite before the upload
	// and CDI's conversion after it.
	if data, err := convert.DataBytes(art); err == nil && data > fi.Size()-fi.Size()/qcow2MinSaving {
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: %d of its %d bytes hold data: uploading the raw image as it is, a qcow2 copy would save little", i, data, fi.Size())})
		return asIs, nil
	}
	q := r.spec.uploadPath(i)
	a, err := r.e.tool.Convert(ctx, art, convert.Raw, q, convert.QCOW2)
	switch {
	case isNoSpace(err):
		_ = convert.Remove(q)
		r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: no room in %s for the qcow2 copy that keeps zero runs off the wire; uploading the raw image", i, filepath.Dir(q))})
		return asIs, nil
	case err != nil:
		return convert.Artifact{}, err
	}
	_ = os.Chmod(q, 0o600)
	return a, nil
}

// stepCreateVM makes the VirtualMachine exist, ours, matching the render.
func (r *run) stepCreateVM(ctx context.Context) error {
	desired, err := r.renderVM()
	if err != nil {
		return needsHuman("RenderFailed", "cannot render the VirtualMachine: "+err.Error(), "fix network_map, then run apply again", nil)
	}
	kc := r.e.deps.Kube
	vm, err := kc.GetVirtualMachine(ctx, r.spec.Namespace, r.spec.Name)
	if kube.IsNotFound(err) {
		vm = desired
		err = kc.CreateVirtualMachine(ctx, vm)
		if err == nil {
			r.emit(Event{Kind: EventInfo, Message: "created VirtualMachine " + r.spec.Namespace + "/" + r.spec.Name})
		} else if kube.IsAlreadyExists(err) || kube.Classify(err) == kube.Transient {
			// The create may have been applied although its reply was
			// lost (a retry then meets AlreadyExists): look at what is
			// there; the labels say whether it is ours.
			got, gerr := kc.GetVirtualMachine(ctx, r.spec.Namespace, r.spec.Name)
			switch {
			case gerr == nil:
				vm, err = got, nil
			case !kube.IsNotFound(gerr):
				err = gerr
			}
			// Not there: the create's own error stands (a transient one
			// is retried).
		}
	}
	switch {
	case err != nil:
		return err
	case !isOurs(vm.Labels, r.spec.Name):
		return needsHuman("VMNotOurs",
			fmt.Sprintf("VirtualMachine %s/%s exists and was not created by this migration (label %s=%q)", r.spec.Namespace, r.spec.Name, kube.LabelMigration, vm.Labels[kube.LabelMigration]),
			"the provider never overwrites what it does not own: remove or rename that VirtualMachine, or choose another destination name, then run apply again", nil)
	default:
		if applyVM(vm, desired, true) {
			if err := kc.UpdateVirtualMachine(ctx, vm); err != nil {
				return err
			}
			r.emit(Event{Kind: EventInfo, Message: "updated VirtualMachine " + r.spec.Namespace + "/" + r.spec.Name + " to match the migration"})
		}
	}
	rec := r.rec()
	rec.VM = &VMEvidence{Name: vm.Name, UID: string(vm.UID), RunStrategy: runStrategyOf(vm)}
	now := r.now()
	stamp(&rec.Timestamps.VMCreated, now)
	rec.setCondition(now, CondVMCreated, true, "Created", "VirtualMachine "+vm.Name+" exists and matches the migration")
	return nil
}
