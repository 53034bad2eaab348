package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// stepConvertCluster is Converting in cluster execution. The copy Jobs
// wrote each disk into its claim as the raw image the VM boots from.
// Without a guest conversion the image of every disk is the copy itself:
// recorded as such, nothing moves. With conversion "virt-v2v", one
// conversion Job per VM runs virt-v2v-in-place over all its claims
// (package convertjob: on overlays kept in the claims, committed into the
// images only once it succeeded, so that a failed or killed conversion
// leaves the copies intact).
//
//	observe  the record's copies (Preparing verified them); the
//	         conversion Job of the recorded attempt and its pods; whether
//	         the cluster offers KVM to pods (devices.kubevirt.io/kvm)
//	act      each disk's journal claim (where its overlay is kept) if
//	         gone since Preparing; the conversion Job,
//	         created or adopted by spec hash, once no pod of an earlier
//	         attempt can still write the claims
//	record   the attempt number before its Job is created; the Job's name
//	         and UID; each disk's converted SHA-256 and what virt-v2v saw
//	         and did, once checked; a failed attempt's successor
func (r *run) stepConvertCluster(ctx context.Context) error {
	rec := r.rec()
	for i := range rec.Disks {
		if d := &rec.Disks[i]; !d.Acquired || d.SourceSHA256 == "" {
			return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("disk %d has no verified copy in its claim", i)}
		}
	}
	if r.spec.Conversion == ConversionVirtV2V {
		return r.convertInCluster(ctx)
	}
	for i := range rec.Disks {
		d := &rec.Disks[i]
		d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = "raw", d.SourceSHA256, d.SizeBytes
	}
	now := r.now()
	stamp(&rec.Timestamps.Converted, now)
	rec.SetCondition(now, record.CondDiskConverted, true, "Copied",
		fmt.Sprintf("%d raw image(s) in their claims, as copied (conversion %q)", len(rec.Disks), r.spec.Conversion))
	return r.save(ctx)
}

// convertedInCluster reports whether the record holds a checked
// conversion of every disk.
func (r *run) convertedInCluster() bool {
	rec := r.rec()
	if rec.Conversion == nil {
		return false
	}
	for _, d := range rec.Disks {
		if d.ConvertedSHA256 == "" {
			return false
		}
	}
	return true
}

// convertInCluster has the VM's conversion Job convert the guest in its
// claims, observing it until it ends.
func (r *run) convertInCluster(ctx context.Context) error {
	rec := r.rec()
	if !r.convertedInCluster() {
		if r.e.deps.WorkerImage == "" {
			return needsHuman("NoWorkerImage", "cluster execution needs the provider's worker_image, which is not set",
				"set worker_image in the provider configuration (the image make image builds, pinned by digest), then run apply again", nil)
		}
		if rec.ConvertAttempt == 0 {
			// Recorded before the Job exists: a runner that dies after
			// creating it finds it under this number.
			rec.ConvertAttempt = 1
			if err := r.save(ctx); err != nil {
				return err
			}
		}
		// The overlays are kept in the disks' journal claims (made
		// at Preparing; made again if gone since).
		if err := r.ensureJournalClaims(ctx); err != nil {
			return err
		}
		// The Job's change ends the wait at once (wakeups.go).
		job := r.e.wake.follow(kube.WatchJobs, r.spec.Namespace)
		defer job.stop()
		cv := &clusterConvert{r: r, kvm: r.e.kvmOffered(ctx), slots: r.conversionSlots(), absent: absentJobs{}, waits: jobWaits{}, job: job}
		wait := r.pollerWaking(job)
		for {
			done, err := cv.step(ctx)
			if err != nil {
				return err
			}
			if done {
				break
			}
			if err := wait(ctx); err != nil {
				return err
			}
		}
	}
	for i := range rec.Disks {
		d := &rec.Disks[i]
		d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = "raw", d.ConvertedSHA256, d.SizeBytes
	}
	now := r.now()
	stamp(&rec.Timestamps.Converted, now)
	rec.SetCondition(now, record.CondDiskConverted, true, "Converted",
		fmt.Sprintf("%s converted in %d claim(s) by conversion Job %s: %s", rec.Conversion.OS, len(rec.Disks), rec.ConvertJob, rec.Conversion.Converted))
	return r.save(ctx)
}

// DefaultMaxConcurrentConversions is how many conversion Jobs run at once
// in a cluster unless the provider says: each runs a helper VM of about
// 1.5 GiB and keeps a core busy for minutes.
const DefaultMaxConcurrentConversions = 4

// conversionSlots are the cluster's conversion slots (coord's pseudo-host
// ConversionSlotsID): a conversion Job holds one while it runs.
func (r *run) conversionSlots() coord.HostSlots {
	kc := r.e.deps.Kube
	grace := r.e.deps.SlotGrace
	if grace <= 0 {
		grace = DefaultSlotGrace
	}
	limit := r.e.deps.MaxConcurrentConversions
	if limit <= 0 {
		limit = DefaultMaxConcurrentConversions
	}
	return coord.HostSlots{Kube: kc, Namespace: r.e.claimNamespace(), Limit: limit, Now: r.e.now, Board: r.e.slotBoard,
		Active: func(ctx context.Context, held coord.SlotHeld) (bool, error) {
			return clusterjob.JobActive(ctx, kc, held.Holder.Namespace, held.Holder.Job, held.Since, grace, r.e.now())
		}}
}

// kvmOffered reports whether any Node offers KubeVirt's KVM device to
// pods. Credentials that may not list Nodes read as no: the conversion
// then runs under TCG, slower but the same.
func (e *Engine) kvmOffered(ctx context.Context) bool {
	nodes, err := e.deps.Kube.ListNodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if q, ok := n.Status.Allocatable[clusterjob.ResourceKVM]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// clusterConvert is what one Converting knows while its Job runs.
type clusterConvert struct {
	r      *run
	kvm    bool
	slots  coord.HostSlots
	held   bool
	waits  jobWaits
	said   string
	absent absentJobs
	// job follows the changes of the Job of the recorded attempt.
	job *following
}

// convertOf is what the conversion Job of the recorded attempt is
// rendered from.
func (cv *clusterConvert) convertOf() clusterjob.Convert {
	r := cv.r
	rec := r.rec()
	c := clusterjob.Convert{Namespace: r.spec.Namespace, Migration: r.spec.Name, Base: coord.RecordName(r.spec.Name),
		Attempt: rec.ConvertAttempt, Image: r.e.deps.WorkerImage, KVM: cv.kvm, Owner: r.recordOwner()}
	if t := r.e.deps.ConversionStallTimeout; t > 0 {
		c.StallSeconds = int(max(t.Round(time.Second), time.Second) / time.Second)
	}
	c.Block = r.spec.block()
	for _, d := range rec.Disks {
		c.Claims = append(c.Claims, d.DataVolume)
		c.Sizes = append(c.Sizes, d.SizeBytes)
		c.IDs = append(c.IDs, d.DataVolumeUID)
		if r.journalClaims() {
			c.JournalClaims = append(c.JournalClaims, clusterjob.JournalClaimName(d.DataVolume))
		}
	}
	return c
}

// step observes the conversion Job and takes its next action; done once
// the conversion is recorded.
func (cv *clusterConvert) step(ctx context.Context) (bool, error) {
	r := cv.r
	rec := r.rec()
	c := cv.convertOf()
	want, err := clusterjob.RenderConvert(c)
	if err != nil {
		return false, permanent("ConversionJobInvalid", "the conversion Job cannot be rendered", "", err)
	}
	kc := r.e.deps.Kube
	cv.job.add(want.Name)
	holder := coord.SlotHolder{Namespace: want.Namespace, Job: want.Name}
	job, err := cv.absent.get(ctx, kc, want.Namespace, want.Name)
	switch {
	case err != nil:
		return false, err
	case job == nil:
		// No Job yet: none without one of the cluster's conversion
		// slots, nor while a pod of an earlier attempt can still write
		// the claims.
		if ok, err := cv.takeSlot(ctx, holder); err != nil || !ok {
			return false, err
		}
		if busy, err := cv.retireOthers(ctx); err != nil || busy {
			return false, err
		}
	case !clusterjob.Finished(job) && !cv.held:
		// Running (adopted after a restart): it holds its slot, taken
		// again if a restart lost it, even beyond the limit.
		if _, err := cv.takeSlot(ctx, holder); err != nil {
			return false, err
		}
	}
	out, job, err := clusterjob.EnsureConvert(ctx, kc, want, job)
	cv.absent.created(want.Namespace, want.Name)
	var na *clusterjob.NotAdoptableError
	if errors.As(err, &na) && !na.Foreign {
		cv.releaseSlot(ctx, holder)
		return false, cv.nextAttempt(ctx, "the Job "+want.Name+" there is not the one this configuration renders: "+na.Error())
	}
	if err != nil {
		return false, err
	}
	if string(job.UID) != rec.ConvertJobUID {
		rec.ConvertJob, rec.ConvertJobUID = job.Name, string(job.UID)
		if err := r.save(ctx); err != nil {
			return false, err
		}
		accel := "TCG (no node offers " + string(clusterjob.ResourceKVM) + ")"
		if cv.kvm {
			accel = "KVM"
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("conversion Job %s/%s (attempt %d, UID %s) converts the guest with virt-v2v-in-place in %d claim(s), helper VM on %s",
			job.Namespace, job.Name, rec.ConvertAttempt, job.UID, len(rec.Disks), accel)})
	}
	switch out.State {
	case clusterjob.Pending:
		return false, cv.pending(ctx, job, out)
	case clusterjob.Running:
		cv.waits.running(job)
		msg := fmt.Sprintf("conversion Job %s: pod %s converts the guest", job.Name, out.Pod)
		// Its stage, from the last lines of the worker's log (progress
		// only: the outcome is read from the Job).
		if log, err := kc.PodLogTail(ctx, r.spec.Namespace, out.Pod, clusterjob.ConvertContainer, progressLogLines, progressLogBytes); err == nil {
			if l, ok := convertjob.LastStage(log); ok {
				msg += " (" + l.Stage + ": " + l.Message + ")"
			}
		}
		cv.say(ctx, msg)
		return false, nil
	case clusterjob.Succeeded:
		cv.releaseSlot(ctx, holder)
		if err := clusterjob.CheckConversion(c, *out.Conversion); err != nil {
			if errors.Is(err, clusterjob.ErrOtherWorker) {
				return false, errors.Join(cv.nextAttempt(ctx, "its worker is of another version"), otherWorker("conversion Job "+job.Name, err))
			}
			return false, errors.Join(cv.nextAttempt(ctx, "its result was not accepted"),
				transient("ConversionResultRejected", fmt.Sprintf("conversion Job %s completed, but its result was not accepted: %v", job.Name, err), nil))
		}
		cv.record(*out.Conversion)
		if err := r.save(ctx); err != nil {
			return false, err
		}
		reused := ""
		if out.Conversion.Reused {
			reused = " (committed by an earlier attempt)"
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("conversion Job %s converted %s%s: %s", job.Name, rec.Conversion.OS, reused, rec.Conversion.Converted)})
		return true, nil
	}
	cv.releaseSlot(ctx, holder)
	return false, errors.Join(cv.nextAttempt(ctx, "it failed"), cv.failed(job, out))
}

// takeSlot holds one of the cluster's conversion slots for holder. It
// reports false, having said so once, while all are held by others.
func (cv *clusterConvert) takeSlot(ctx context.Context, holder coord.SlotHolder) (bool, error) {
	_, err := cv.slots.Acquire(ctx, coord.ConversionSlotsHost, coord.ConversionSlotsID, holder)
	var full *coord.SlotsFullError
	if errors.As(err, &full) {
		cv.say(ctx, "waiting for a conversion slot: "+full.Error())
		return false, nil
	}
	cv.held = err == nil
	return err == nil, err
}

// releaseSlot gives the slot of a finished Job back; one whose release
// fails is reclaimed by the next conversion that needs it.
func (cv *clusterConvert) releaseSlot(ctx context.Context, holder coord.SlotHolder) {
	cv.held = false
	_, _ = cv.slots.Release(ctx, coord.ConversionSlotsID, holder)
}

// record keeps a checked conversion's evidence: the converted images'
// SHA-256s and what virt-v2v saw and did.
func (cv *clusterConvert) record(res convertjob.Result) {
	rec := cv.r.rec()
	for i := range rec.Disks {
		rec.Disks[i].ConvertedSHA256 = res.Disks[i].SHA256
	}
	ev := res.Evidence
	rec.Conversion = conversionEvidenceOf(convert.V2VEvidence{
		Tool: ev.Tool, Version: ev.Version,
		OS: convert.InspectedOS{Type: ev.OS.Type, Distro: ev.OS.Distro, Version: ev.OS.Version, OSInfo: ev.OS.OSInfo,
			Arch: ev.OS.Arch, ProductName: ev.OS.ProductName, Firmware: ev.OS.Firmware},
		Converted: ev.Converted, Drivers: ev.Drivers, Warnings: ev.Warnings,
		Duration: time.Duration(ev.Seconds * float64(time.Second)),
	}, cv.r.now())
	rec.Conversion.Accelerator, rec.Conversion.Job = ev.Accelerator, rec.ConvertJob
}

// retireOthers makes sure, before the Job of the recorded attempt is
// created, that no pod of another conversion Job can still write the
// claims: such Jobs that run are deleted, and busy is true while any of
// their pods has not stopped.
func (cv *clusterConvert) retireOthers(ctx context.Context) (busy bool, err error) {
	r := cv.r
	kc := r.e.deps.Kube
	attempt := fmt.Sprint(r.rec().ConvertAttempt)
	sel := map[string]string{kube.LabelMigration: r.spec.Name, clusterjob.LabelComponent: clusterjob.ComponentConvert}
	pods, err := kc.ListPods(ctx, r.spec.Namespace, sel)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		busy = true
		cv.say(ctx, fmt.Sprintf("waiting for pod %s of another conversion Job (attempt %s) to stop before attempt %s starts", p.Name, p.Labels[clusterjob.LabelAttempt], attempt))
	}
	jobs, err := kc.ListJobs(ctx, r.spec.Namespace, sel)
	if err != nil {
		return busy, err
	}
	for j := range jobs {
		job := &jobs[j]
		if job.Labels[clusterjob.LabelAttempt] == attempt || clusterjob.Finished(job) || job.DeletionTimestamp != nil {
			continue
		}
		busy = true
		if err := kc.DeleteJob(ctx, job); err != nil {
			return busy, err
		}
		r.report(ctx, Event{Kind: EventInfo, Message: "deleted conversion Job " + job.Name + " of an earlier attempt, which still ran"})
	}
	return busy, nil
}

// nextAttempt records that the next conversion is a new Job, and why.
func (cv *clusterConvert) nextAttempt(ctx context.Context, why string) error {
	rec := cv.r.rec()
	old := rec.ConvertJob
	rec.ConvertAttempt++
	rec.ConvertJob, rec.ConvertJobUID = "", ""
	cv.said = ""
	if err := cv.r.save(ctx); err != nil {
		return err
	}
	cv.r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("conversion Job %s is not used again (%s); the next conversion is attempt %d", old, why, rec.ConvertAttempt)})
	return nil
}

// pending: the Job's pod has not started, or its worker ended and the
// Job is not marked yet; as a copy Job's (jobStalled), a wait longer than
// DataVolumeStallTimeout needs a person.
func (cv *clusterConvert) pending(ctx context.Context, job *batchv1.Job, out clusterjob.Outcome) error {
	r := cv.r
	why := out.Reason
	if why == "" {
		why = "its pod is not running yet"
	}
	cv.say(ctx, fmt.Sprintf("conversion Job %s is waiting: %s", job.Name, why))
	return r.jobStalled("conversion Job", "ConversionJob", job, out, cv.waits.waited(job, out, r.now()), why)
}

// say reports what the conversion waits for, once per change.
func (cv *clusterConvert) say(ctx context.Context, msg string) {
	if cv.said == msg {
		return
	}
	cv.said = msg
	cv.r.report(ctx, Event{Kind: EventInfo, Message: msg})
}

// failed is the error of a failed conversion Job, with local execution's
// reason for the same fault where the worker names one.
func (cv *clusterConvert) failed(job *batchv1.Job, out clusterjob.Outcome) error {
	msg := fmt.Sprintf("conversion Job %s/%s failed: %s", job.Namespace, job.Name, out.Reason)
	reason := "ConversionJobFailed"
	if out.Conversion != nil && out.Conversion.Reason != "" {
		reason = out.Conversion.Reason
	}
	switch out.Class {
	case fault.NeedsHuman:
		action := fmt.Sprintf("if the guest has no OS virt-v2v converts, install virtio drivers in it and set conversion = %q; otherwise fix what the worker reports, then run apply again (the copied disks are intact unless the message says otherwise)", ConversionNone)
		return needsHuman(reason, msg, action, nil)
	case fault.Permanent:
		return permanent(reason, msg, "", nil)
	}
	return transient(reason, msg, nil)
}
