package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Preparing in cluster execution: the same power-off guard as a cold
// migration, then every disk copied by a Job of its own straight into its
// DataVolume's claim. No disk byte passes through the runner: it decides,
// observes the Jobs through the API server and records what they did,
// after checking it.
//
//	observe  the source (power state, claim); each disk's DataVolume and
//	         claim; each disk's copy Job of the recorded attempt, its pods
//	         and the last lines of their logs; older attempts' pods
//	act      claims first (blank DataVolumes, bound at once, waited for
//	         until Succeeded so that CDI has finished with them; each
//	         disk's journal claim beside them); the
//	         migration's Secret; then per disk, within a host slot held in
//	         the cluster, the copy Job of the recorded attempt, created or
//	         adopted by spec hash, once no older attempt's pod can still
//	         write the claim
//	record   the attempt number before its Job is created; the Job's name
//	         and UID; the checked result (SHA-256, zero bytes) and
//	         Acquired; a failed attempt's successor
//
// A runner killed while the Jobs run leaves them running; the next apply
// adopts each (same name, same spec hash) and goes on observing it. A Job
// that failed is never run again: its successor is a new Job under the
// next attempt number, which resumes from the journal the worker keeps in
// the claim beside the disk.

// DefaultSlotGrace is how long a host slot taken for a copy Job whose Job
// does not exist yet is left to its holder before another runner may take
// it (the runner creates the Job right after the slot).
const DefaultSlotGrace = 2 * time.Minute

// progressLogLines is how many of a running worker's last log lines are
// read for its progress; progressLogBytes bounds what is read.
const (
	progressLogLines = 4
	progressLogBytes = 16 << 10
)

// stepPrepareCluster is Preparing in cluster execution.
func (r *run) stepPrepareCluster(ctx context.Context) error {
	vm, err := r.prepareSource(ctx)
	if err != nil {
		return err
	}
	if err := r.ensurePoweredOff(ctx, vm); err != nil {
		return err
	}
	changed := false
	for i := range r.rec().Disks {
		changed = r.chainChanged(ctx, vm, i) || changed
	}
	if changed {
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	return r.copyInCluster(ctx)
}

// copyInCluster makes every disk's claim, then has a copy Job per disk
// fill it, until every disk is Acquired.
func (r *run) copyInCluster(ctx context.Context) error {
	if err := r.runCopyJobs(ctx, false); err != nil {
		return err
	}
	rec := r.rec()
	now := r.now()
	stamp(&rec.Timestamps.Acquired, now)
	rec.SetCondition(now, record.CondDiskAcquired, true, "Copied",
		fmt.Sprintf("%d disk(s) copied into their DataVolumes' claims by copy Jobs and checksummed", len(rec.Disks)))
	return nil
}

// runCopyJobs makes every disk's claim, then has a copy Job per disk fill
// it: until every disk is Acquired, or with precopy (a warm migration's
// round, the source running) until each disk's Job has applied the
// frozen part of its chain.
func (r *run) runCopyJobs(ctx context.Context, precopy bool) error {
	cc, err := r.newClusterCopy(ctx)
	if err != nil {
		return err
	}
	cc.precopy = precopy
	rec := r.rec()
	// Each disk's journal claim has room for its largest snapshot delta.
	if err := r.sizeClusterChains(ctx, precopy); err != nil {
		return err
	}
	// Claims first: every DataVolume created, then each waited for until
	// CDI has made its claim (blank) and is done with it.
	for _, stage := range []importStage{importCreated, importDone} {
		for i := range rec.Disks {
			if err := r.importDisk(ctx, i, stage); err != nil {
				return err
			}
		}
	}
	if err := r.ensureJournalClaims(ctx); err != nil {
		return err
	}
	// A Job's change (started, ended, marked) ends the wait at once.
	cc.jobs = r.e.wake.follow(kube.WatchJobs, r.spec.Namespace)
	defer cc.jobs.stop()
	wait := r.pollerWaking(cc.jobs)
	for {
		left := 0
		for i := range rec.Disks {
			done, err := cc.step(ctx, i)
			if err != nil {
				return err
			}
			if !done {
				left++
			}
		}
		if left == 0 {
			break
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// clusterCopy is what one Preparing knows while its copy Jobs run.
type clusterCopy struct {
	r          *run
	host       copyjob.Host
	streams    int
	privateKey bool
	owner      *metav1.OwnerReference
	hostID     string
	slots      coord.HostSlots
	// waits times the Jobs' waits; said is the last wait reported per
	// disk.
	waits     jobWaits
	said      map[int]string
	lastBytes map[int]int64
	// held are the slots this run holds for its Jobs.
	held map[coord.SlotHolder]bool
	// precopy: the Jobs apply the frozen part of each chain while the
	// source runs; precopied are the disks whose Job did.
	precopy   bool
	precopied map[int]bool
	absent    absentJobs
	// jobs follows the changes of the disks' Jobs.
	jobs *following
}

// absentJobs are the Jobs a wait found not there yet. A Job of the
// migration's recorded attempt is created by the run that holds the
// migration's Lease and by no one else, so one found absent stays absent
// until this run creates it: a disk waiting for a slot is not read again
// on every poll. (Should one appear anyway, the create finds and adopts
// it.)
type absentJobs map[string]bool

// get reads the Job, or returns nil for one absent.
func (a absentJobs) get(ctx context.Context, kc *kube.Client, namespace, name string) (*batchv1.Job, error) {
	key := namespace + "/" + name
	if a[key] {
		return nil, nil
	}
	job, err := kc.GetJob(ctx, namespace, name)
	if kube.IsNotFound(err) {
		a[key] = true
		return nil, nil
	}
	return job, err
}

// created forgets the Job: it may exist now.
func (a absentJobs) created(namespace, name string) { delete(a, namespace+"/"+name) }

func (r *run) newClusterCopy(ctx context.Context) (*clusterCopy, error) {
	if r.e.deps.WorkerImage == "" {
		return nil, needsHuman("NoWorkerImage", "cluster execution needs the provider's worker_image, which is not set",
			"set worker_image in the provider configuration (the image make image builds, pinned by digest), then run apply again", nil)
	}
	c, err := r.esxiClient()
	if err != nil {
		return nil, err
	}
	cfg := c.Config()
	fp := cfg.HostKeyFingerprint
	if fp == "" {
		// Verified by this run's connection (known_hosts, or the lab
		// setting that verifies nothing): the Jobs pin the key seen.
		fp = c.HostKeyFingerprint()
	}
	if fp == "" {
		return nil, transient("HostKeyUnknown", "the host key of ESXi host "+r.spec.Host+" is not known yet, so the copy Jobs cannot pin it", nil)
	}
	password, key := c.Credential()
	cc := &clusterCopy{r: r, streams: max(cfg.StreamsPerDisk, 1), privateKey: key != "",
		host: copyjob.Host{Name: r.spec.Host, Address: cfg.Address, Port: cfg.Port, User: cfg.User,
			HostKeyFingerprint: fp, MaxSessions: cfg.MaxSessions},
		owner:  r.recordOwner(),
		hostID: r.e.hostIdentity(r.spec.Host),
		waits:  jobWaits{}, said: map[int]string{}, lastBytes: map[int]int64{}, held: map[coord.SlotHolder]bool{},
		precopied: map[int]bool{}, absent: absentJobs{},
	}
	kc := r.e.deps.Kube
	grace := r.e.deps.SlotGrace
	if grace <= 0 {
		grace = DefaultSlotGrace
	}
	cc.slots = coord.HostSlots{Kube: kc, Namespace: r.e.claimNamespace(), Limit: r.e.limiter.limit(r.spec.Host), Now: r.e.now, Board: r.e.slotBoard,
		Active: func(ctx context.Context, held coord.SlotHeld) (bool, error) {
			return clusterjob.JobActive(ctx, kc, held.Holder.Namespace, held.Holder.Job, held.Since, grace, r.e.now())
		}}
	if err := r.ensureWorkerSecret(ctx, clusterjob.Credential{Password: password, PrivateKeyPEM: key}); err != nil {
		return nil, err
	}
	return cc, nil
}

// recordOwner is the owner reference that makes the record's ConfigMap
// own what cluster execution creates (its Secret and Jobs), so that they
// go with the record.
func (r *run) recordOwner() *metav1.OwnerReference {
	cm := r.s.ConfigMap
	if cm == nil || cm.UID == "" {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
}

// workerSecretName is the migration's Secret: the ESXi credential its
// Jobs mount.
func workerSecretName(name string) string { return clusterjob.SecretName(coord.RecordName(name)) }

// ensureWorkerSecret makes the migration's Secret hold the host's
// credential as configured now (a rotated password reaches the next
// Job).
func (r *run) ensureWorkerSecret(ctx context.Context, cred clusterjob.Credential) error {
	s, err := clusterjob.RenderSecret(r.spec.Namespace, workerSecretName(r.spec.Name), r.spec.Name, cred, r.recordOwner())
	if err != nil {
		return needsHuman("NoCredential", "ESXi host "+r.spec.Host+" has no password or private key for the copy Jobs to log in with",
			"set password or private_key in the provider's esxi_host block, then run apply again", err)
	}
	_, err = clusterjob.EnsureSecret(ctx, r.e.deps.Kube, s)
	return err
}

// copyOf is what disk i's copy Job of the recorded attempt is rendered
// from.
func (cc *clusterCopy) copyOf(i int) clusterjob.Copy {
	r := cc.r
	d := r.rec().Disks[i]
	src := copyjob.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}
	var deltas []copyjob.Delta
	r.chainCopy(i, &src, &deltas, cc.precopy)
	c := clusterjob.Copy{Namespace: r.spec.Namespace, Migration: r.spec.Name, Disk: i, Attempt: d.CopyAttempt,
		Image: r.e.deps.WorkerImage, Claim: d.DataVolume, Secret: workerSecretName(r.spec.Name), PrivateKey: cc.privateKey,
		Host: cc.host, Source: src, Deltas: deltas, OnSnapshots: len(r.chainExtents(i)) > 1,
		ChunkSize: r.chunkSize(), Streams: cc.streams, Owner: cc.owner}
	c.Block = r.spec.block()
	if r.journalClaims() {
		c.JournalClaim, c.ClaimID = clusterjob.JournalClaimName(d.DataVolume), d.DataVolumeUID
	}
	return c
}

// clusterRoom is the room disk d's copy needs beside the disk: the copy
// of its largest snapshot delta, or in a warm migration warmScratch.
func (r *run) clusterRoom(d record.DiskEvidence) int64 {
	return clusterRoom(d, r.spec.warm() || r.rec().Warm != nil)
}

func clusterRoom(d record.DiskEvidence, warm bool) int64 {
	if warm {
		return warmScratch(d)
	}
	return scratchBytes(d)
}

// journalClaimSize is what disk d's journal claim asks for: its journal,
// the room its chain needs (warm: a warm migration's) and, with
// conversion "virt-v2v", its overlay. Plans count it against the
// namespace's storage quota (destination) and Preparing makes the claim
// with it (ensureJournalClaims).
func (s Spec) journalClaimSize(d record.DiskEvidence, warm bool) int64 {
	room := clusterRoom(d, warm)
	if s.Conversion == ConversionVirtV2V {
		room += clusterjob.OverlayRoom(d.SizeBytes)
	}
	return clusterjob.JournalClaimSize(d.SizeBytes, s.chunkSize(), room)
}

// ensureJournalClaims makes, where the migration keeps them
// (journalClaims), each disk's journal claim (clusterjob's journal.go),
// sized for its journal, the room its chain needs and, with conversion
// "virt-v2v", its overlay. One found is
// the migration's only if it carries the migration's label; one too
// small (a chain that grew) is asked to grow.
// A claim that waits for its first consumer binds when the copy pod is
// scheduled: nothing waits for it here.
func (r *run) ensureJournalClaims(ctx context.Context) error {
	if !r.journalClaims() {
		return nil
	}
	kc := r.e.deps.Kube
	rec := r.rec()
	for i := range rec.Disks {
		d := &rec.Disks[i]
		want := clusterjob.RenderJournalClaim(clusterjob.JournalClaim{Namespace: r.spec.Namespace, Migration: r.spec.Name,
			Claim: d.DataVolume, Disk: i, StorageClass: r.spec.StorageClass,
			Size: r.spec.journalClaimSize(*d, r.spec.warm() || rec.Warm != nil), Owner: r.recordOwner()})
		got, err := kc.GetPersistentVolumeClaim(ctx, want.Namespace, want.Name)
		switch {
		case kube.IsNotFound(err):
			if err := kc.CreatePersistentVolumeClaim(ctx, want); err != nil && !kube.IsAlreadyExists(err) {
				return err
			}
			r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: journal claim %s/%s keeps the copy's journal and side files beside the claim of DataVolume %s",
				i, want.Namespace, want.Name, d.DataVolume)})
			continue
		case err != nil:
			return err
		case !kube.OfMigration(got.Labels, r.spec.Name):
			return needsHuman("JournalClaimTaken", fmt.Sprintf("disk %d: the claim %s/%s, where the copy keeps its journal, exists and is not this migration's", i, got.Namespace, got.Name),
				"delete or rename that claim, then run apply again", nil)
		case got.DeletionTimestamp != nil:
			return transient("JournalClaimDeleting", fmt.Sprintf("disk %d: journal claim %s/%s is being deleted; it is made again once it is gone", i, got.Namespace, got.Name), nil)
		}
		need := want.Spec.Resources.Requests[corev1.ResourceStorage]
		if have := got.Spec.Resources.Requests[corev1.ResourceStorage]; have.Cmp(need) < 0 {
			got.Spec.Resources.Requests[corev1.ResourceStorage] = need
			err := kc.UpdatePersistentVolumeClaim(ctx, got)
			if kube.IsConflict(err) {
				return transient("JournalClaimChanged", fmt.Sprintf("disk %d: journal claim %s/%s changed while it was asked to grow; it is read again", i, got.Namespace, got.Name), err)
			}
			if err != nil {
				return needsHuman("JournalClaimTooSmall", fmt.Sprintf("disk %d: journal claim %s/%s asks for %s and the copy needs %s, and it cannot grow: %v", i, got.Namespace, got.Name, have.String(), need.String(), err),
					"delete the journal claim (the copy is then made again from the start) or let its StorageClass expand claims, then run apply again", nil)
			}
		}
	}
	return nil
}

// step observes disk i's copy and takes its next action; done once the
// disk is Acquired.
func (cc *clusterCopy) step(ctx context.Context, i int) (bool, error) {
	r := cc.r
	d := &r.rec().Disks[i]
	if d.Acquired || cc.precopied[i] || cc.precopy && !d.OnChain() {
		// A disk on no snapshot has nothing frozen to precopy (a warm
		// migration's snapshot takes every disk it copies).
		return true, nil
	}
	if d.CopyAttempt == 0 {
		// Recorded before the Job exists: a runner that dies after
		// creating it finds it under this number.
		d.CopyAttempt = 1
		if err := r.save(ctx); err != nil {
			return false, err
		}
	}
	c := cc.copyOf(i)
	want, err := clusterjob.RenderCopy(c)
	if err != nil {
		return false, permanent("CopyJobInvalid", fmt.Sprintf("disk %d: the copy Job cannot be rendered", i), "", err)
	}
	cc.jobs.add(want.Name)
	holder := coord.SlotHolder{Namespace: want.Namespace, Job: want.Name}
	kc := r.e.deps.Kube
	job, err := cc.absent.get(ctx, kc, want.Namespace, want.Name)
	switch {
	case err != nil:
		return false, err
	case job == nil:
		// No Job yet: none without a slot of the host, and none may
		// start while a pod of an earlier Job can still write the claim.
		if ok, err := cc.takeSlot(ctx, i, holder); err != nil || !ok {
			return false, err
		}
		if busy, err := cc.retireOthers(ctx, i, d.CopyAttempt); err != nil || busy {
			return false, err
		}
	case !clusterjob.Finished(job) && !cc.held[holder]:
		// Running (adopted after a restart): it holds its slot, taken
		// again here if a restart lost it; a full host does not stop a
		// Job that runs already.
		if _, err := cc.takeSlot(ctx, i, holder); err != nil {
			return false, err
		}
	}
	out, job, err := clusterjob.EnsureCopy(ctx, kc, want, job)
	cc.absent.created(want.Namespace, want.Name)
	var na *clusterjob.NotAdoptableError
	if errors.As(err, &na) && !na.Foreign {
		// The migration's own Job from another spec (a new image, host
		// key or chunk size): never run or trusted; the next attempt
		// replaces it.
		cc.releaseSlot(ctx, holder)
		return false, cc.nextAttempt(ctx, i, "the Job "+want.Name+" there is not the one this configuration renders: "+na.Error())
	}
	if err != nil {
		return false, err
	}
	if string(job.UID) != d.CopyJobUID {
		d.CopyJob, d.CopyJobUID = job.Name, string(job.UID)
		if err := r.save(ctx); err != nil {
			return false, err
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: copy Job %s/%s (attempt %d, UID %s) copies the disk into the claim of DataVolume %s",
			i, job.Namespace, job.Name, d.CopyAttempt, job.UID, d.DataVolume)})
	}
	switch out.State {
	case clusterjob.Pending:
		return false, cc.pending(ctx, i, job, out)
	case clusterjob.Running:
		cc.waits.running(job)
		cc.progress(ctx, i, out)
		return false, nil
	case clusterjob.Succeeded:
		cc.releaseSlot(ctx, holder)
		if err := clusterjob.CheckResult(c, *out.Result); err != nil {
			if errors.Is(err, clusterjob.ErrOtherWorker) {
				return false, errors.Join(cc.nextAttempt(ctx, i, "its worker is of another version"),
					otherWorker(fmt.Sprintf("disk %d: copy Job %s", i, job.Name), err))
			}
			return false, errors.Join(cc.nextAttempt(ctx, i, "its result was not accepted"),
				transient("CopyResultRejected", fmt.Sprintf("disk %d: copy Job %s completed, but its result was not accepted: %v", i, job.Name, err), nil))
		}
		if cc.precopy {
			cc.precopied[i] = true
			r.report(ctx, Event{Kind: EventInfo, Disk: i, Message: fmt.Sprintf("disk %d: precopy Job %s applied %d snapshot delta(s) over the base in the claim while the source runs (%d chunks copied, %d verified from the claim)%s",
				i, job.Name, len(out.Result.Deltas), out.Result.ChunksCopied, out.Result.ChunksSkipped, podTiming(out.Result))})
			return true, nil
		}
		d.SourceSHA256, d.ZeroBytes, d.Acquired = out.Result.SHA256, out.Result.ZeroBytes, true
		r.recordChainCopy(i, *out.Result)
		if err := r.save(ctx); err != nil {
			return false, err
		}
		r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferCopy}, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
			Message: fmt.Sprintf("disk %d: copy Job %s copied %d bytes (%d chunks, %d verified from its journal), digest %s%s",
				i, job.Name, out.Result.Bytes, out.Result.ChunksCopied, out.Result.ChunksSkipped, out.Result.SHA256, podTiming(out.Result))})
		return true, nil
	}
	cc.releaseSlot(ctx, holder)
	return false, errors.Join(cc.nextAttempt(ctx, i, "it failed"), cc.jobFailed(i, job, out))
}

// takeSlot holds a slot of the source host for the copy Job holder. It
// reports false, having said so once, while the host's slots are all
// held by others.
func (cc *clusterCopy) takeSlot(ctx context.Context, i int, holder coord.SlotHolder) (bool, error) {
	_, err := cc.slots.Acquire(ctx, cc.r.spec.Host, cc.hostID, holder)
	var full *coord.SlotsFullError
	if errors.As(err, &full) {
		cc.say(ctx, i, "disk "+strconv.Itoa(i)+": waiting for a copy slot of ESXi host "+cc.r.spec.Host+": "+full.Error())
		return false, nil
	}
	if err == nil {
		cc.held[holder] = true
	}
	return err == nil, err
}

// releaseSlot gives the slot of a finished Job back. A release that fails
// leaves the slot to be reclaimed: its Job has finished.
func (cc *clusterCopy) releaseSlot(ctx context.Context, holder coord.SlotHolder) {
	delete(cc.held, holder)
	_, _ = cc.slots.Release(ctx, cc.hostID, holder)
}

// retireOthers makes sure, before disk i's Job of attempt is created, that
// no pod of another Job of the disk can still write its claim: Jobs of
// other attempts that run are deleted, and busy is true while any pod of
// the disk has not stopped (also one of a deleted Job of this attempt,
// which the garbage collector is still removing).
func (cc *clusterCopy) retireOthers(ctx context.Context, i, attempt int) (busy bool, err error) {
	r := cc.r
	kc := r.e.deps.Kube
	sel := map[string]string{kube.LabelMigration: r.spec.Name, clusterjob.LabelComponent: clusterjob.ComponentCopy, clusterjob.LabelDisk: strconv.Itoa(i)}
	pods, err := kc.ListPods(ctx, r.spec.Namespace, sel)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		busy = true
		cc.say(ctx, i, fmt.Sprintf("disk %d: waiting for pod %s of another copy Job (attempt %s) to stop before attempt %d starts", i, p.Name, p.Labels[clusterjob.LabelAttempt], attempt))
	}
	jobs, err := kc.ListJobs(ctx, r.spec.Namespace, sel)
	if err != nil {
		return busy, err
	}
	for j := range jobs {
		job := &jobs[j]
		if job.Labels[clusterjob.LabelAttempt] == strconv.Itoa(attempt) || clusterjob.Finished(job) || job.DeletionTimestamp != nil {
			continue
		}
		busy = true
		if err := kc.DeleteJob(ctx, job); err != nil {
			return busy, err
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: deleted copy Job %s of an earlier attempt, which still ran", i, job.Name)})
	}
	return busy, nil
}

// nextAttempt records that disk i's next copy is a new Job, and why.
func (cc *clusterCopy) nextAttempt(ctx context.Context, i int, why string) error {
	d := &cc.r.rec().Disks[i]
	old := d.CopyJob
	d.CopyAttempt++
	d.CopyJob, d.CopyJobUID = "", ""
	delete(cc.said, i)
	if err := cc.r.save(ctx); err != nil {
		return err
	}
	cc.r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: copy Job %s is not used again (%s); the next copy is attempt %d, which resumes from the journal in the claim", i, old, why, d.CopyAttempt)})
	return nil
}

// pending: the Job's pod has not started, or its worker ended and the
// Job controller has not marked the Job yet. A wait longer than
// DataVolumeStallTimeout needs a person; the Job is left for the next run
// to adopt once that is fixed.
func (cc *clusterCopy) pending(ctx context.Context, i int, job *batchv1.Job, out clusterjob.Outcome) error {
	r := cc.r
	why := out.Reason
	if why == "" {
		why = "its pod is not running yet"
	}
	cc.say(ctx, i, fmt.Sprintf("disk %d: copy Job %s is waiting: %s", i, job.Name, why))
	return r.jobStalled(fmt.Sprintf("disk %d: copy Job", i), "CopyJob", job, out, cc.waits.waited(job, out, r.now()), why)
}

// jobWaits times how long each Job has been waiting, by UID and by what
// it waits for: its pod to start, or, its worker ended, the Job
// controller to mark it. Each wait starts when first seen, and a Job seen
// running starts its waits afresh: the time it ran is not a wait.
type jobWaits map[string]time.Time

func (w jobWaits) waited(job *batchv1.Job, out clusterjob.Outcome, now time.Time) time.Duration {
	key := string(job.UID)
	if out.Ended {
		key += "/ended"
	}
	since, ok := w[key]
	if !ok {
		since = now
		w[key] = since
	}
	return now.Sub(since)
}

// running starts the Job's waits afresh.
func (w jobWaits) running(job *batchv1.Job) {
	delete(w, string(job.UID))
	delete(w, string(job.UID)+"/ended")
}

// jobStalled is the stop for a Job (what, such as "copy Job") that has
// waited for waited, once that reaches DataVolumeStallTimeout: a pod that
// never started (an image that cannot be pulled, a pod that cannot be
// scheduled), or a finished worker whose Job the Job controller never
// marks. reason prefixes the stop's reason.
func (r *run) jobStalled(what, reason string, job *batchv1.Job, out clusterjob.Outcome, waited time.Duration, why string) error {
	if waited < r.spec.DataVolumeStallTimeout {
		return nil
	}
	if out.Ended {
		return needsHuman(reason+"NotMarked", fmt.Sprintf("%s %s/%s has not been marked finished in %s: %s", what, job.Namespace, job.Name, waited.Round(time.Second), why),
			"check that kube-controller-manager runs (its Job controller marks Jobs complete or failed), then run apply again; the Job is adopted as it is", nil)
	}
	return needsHuman(reason+"NotStarted", fmt.Sprintf("%s %s/%s has not started in %s: %s", what, job.Namespace, job.Name, waited.Round(time.Second), why),
		fmt.Sprintf("make the worker image %s pullable and the pod schedulable (kubectl describe pod -n %s -l job-name=%s), then run apply again; the Job is adopted as it is",
			r.e.deps.WorkerImage, job.Namespace, job.Name), nil)
}

// progress reports a running copy's progress from the last lines of its
// worker's log.
func (cc *clusterCopy) progress(ctx context.Context, i int, out clusterjob.Outcome) {
	r := cc.r
	if out.Pod == "" {
		return
	}
	log, err := r.e.deps.Kube.PodLogTail(ctx, r.spec.Namespace, out.Pod, clusterjob.CopyContainer, progressLogLines, progressLogBytes)
	if err != nil {
		return // progress only: the outcome is read from the Job
	}
	l, ok := copyjob.LastProgress(log)
	if !ok || l.BytesDone == cc.lastBytes[i] {
		return
	}
	cc.lastBytes[i] = l.BytesDone
	r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferCopy}, BytesDone: l.BytesDone, BytesTotal: l.BytesTotal, Percent: l.Percent,
		Message: fmt.Sprintf("disk %d: copy Job pod %s copied %d of %d bytes (%.1f%%)", i, out.Pod, l.BytesDone, l.BytesTotal, l.Percent)})
}

// say reports what disk i waits for, once per change.
func (cc *clusterCopy) say(ctx context.Context, i int, msg string) {
	if cc.said[i] == msg {
		return
	}
	cc.said[i] = msg
	cc.r.report(ctx, Event{Kind: EventInfo, Message: msg})
}

// jobFailed is the error of a failed copy Job, of the class its outcome
// says. A Job whose pod was deleted or lost, or killed, is retried like a
// transient failure: its journal keeps what landed.
func (cc *clusterCopy) jobFailed(i int, job *batchv1.Job, out clusterjob.Outcome) error {
	msg := fmt.Sprintf("disk %d: copy Job %s/%s failed: %s", i, job.Namespace, job.Name, out.Reason)
	switch out.Class {
	case fault.NeedsHuman:
		return needsHuman("CopyJobFailed", msg, "fix what the worker reports (credentials, host key, storage), then run apply again", nil)
	case fault.Permanent:
		return permanent("CopyJobFailed", msg, "", nil)
	case fault.Interrupted:
		return transient("CopyJobInterrupted", msg, nil)
	}
	return transient("CopyJobFailed", msg, nil)
}

// claimReplaced forgets the copy of disk i, whose DataVolume (and so its
// claim) was replaced: the new claim holds nothing, and the next copy is
// a new Job, since the Job of the recorded attempt wrote the old claim.
func (r *run) claimReplaced(ctx context.Context, i int) {
	d := &r.rec().Disks[i]
	wasAcquired := d.Acquired
	d.Acquired, d.SourceSHA256, d.ZeroBytes, d.Imported, d.GuestSHA256 = false, "", 0, false, ""
	// The chain's files are sized again for the new claim.
	for k := range d.Chain {
		d.Chain[k].Bytes, d.Chain[k].SHA256 = 0, ""
	}
	if d.CopyAttempt > 0 {
		d.CopyAttempt++
		d.CopyJob, d.CopyJobUID = "", ""
	}
	if wasAcquired {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: DataVolume %s was replaced since its copy: the disk is copied again into the new claim", i, d.DataVolume)})
	}
	// A conversion in the claims converted the old one: the guest is
	// converted again, by a new Job, once the disk is copied again.
	if rec := r.rec(); rec.ConvertAttempt > 0 {
		rec.Conversion = nil
		for j := range rec.Disks {
			rec.Disks[j].ConvertedSHA256 = ""
		}
		rec.ConvertAttempt++
		rec.ConvertJob, rec.ConvertJobUID = "", ""
	}
}

// podTiming is where a copy Job's pod says its time went, for a message:
// " (in its pod: copy 1.2 s, apply 0.3 s)", or "".
func podTiming(r *copyjob.Result) string {
	if r.Timing == nil {
		return ""
	}
	return " (in its pod: " + r.Timing.String() + ")"
}
