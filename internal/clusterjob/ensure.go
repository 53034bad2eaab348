package clusterjob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// NotAdoptableError says a Job stands under the name the runner wants and
// is not the one it would render. Foreign: it belongs to another
// migration (a person must move it); else it is the migration's own from
// another spec or changed since, and the runner records a new attempt
// rather than run or delete it.
type NotAdoptableError struct {
	Namespace, Name string
	Foreign         bool
	Err             error
}

func (e *NotAdoptableError) Error() string { return e.Err.Error() }
func (e *NotAdoptableError) Unwrap() error { return e.Err }

// FaultClass: a foreign Job needs a person; the migration's own
// mismatched Job is left for a new attempt.
func (e *NotAdoptableError) FaultClass() fault.Class {
	if e.Foreign {
		return fault.NeedsHuman
	}
	return fault.Transient
}

// EnsureCopy makes the copy Job want (from RenderCopy) exist and observes
// it: created when absent, adopted when the one found is adoptable
// (Adoptable), a *NotAdoptableError otherwise. A runner that died after
// creating the Job, or whose create's reply was lost, finds and adopts it
// here instead of starting a second copy. found, when not nil, is the Job
// of want's name the caller has just read: it is checked the same way
// instead of being created and read again. The outcome is read from the
// Job and the pods its controller made for it (by the Job's UID, so the
// pods of an earlier Job of the same name never count).
func EnsureCopy(ctx context.Context, kc *kube.Client, want, found *batchv1.Job) (Outcome, *batchv1.Job, error) {
	return ensureJob(ctx, kc, want, found, ObserveCopy)
}

// EnsureConvert is EnsureCopy for a conversion Job (from RenderConvert).
func EnsureConvert(ctx context.Context, kc *kube.Client, want, found *batchv1.Job) (Outcome, *batchv1.Job, error) {
	return ensureJob(ctx, kc, want, found, ObserveConvert)
}

func ensureJob(ctx context.Context, kc *kube.Client, want, found *batchv1.Job, read func(*batchv1.Job, []corev1.Pod) Outcome) (Outcome, *batchv1.Job, error) {
	owner := kube.LabelOwner(want.Labels[kube.LabelMigration])
	job := found
	var err error
	if job == nil {
		job, _, err = kube.EnsureOwned(ctx, kc, want.DeepCopy(), kc.CreateJob, owner)
	} else if who, ours := owner(job); !ours {
		err = &kube.NotOwnedError{Kind: "Job", Namespace: job.Namespace, Name: job.Name, Owner: who, Object: job}
	}
	var notOwned *kube.NotOwnedError
	if errors.As(err, &notOwned) {
		return Outcome{}, nil, &NotAdoptableError{Namespace: want.Namespace, Name: want.Name, Foreign: true, Err: err}
	}
	if err != nil {
		return Outcome{}, nil, err
	}
	if err := Adoptable(job, want); err != nil {
		return Outcome{}, nil, &NotAdoptableError{Namespace: want.Namespace, Name: want.Name, Err: err}
	}
	pods, err := kc.ListPods(ctx, job.Namespace, map[string]string{batchv1.ControllerUidLabel: string(job.UID)})
	if err != nil {
		return Outcome{}, job, err
	}
	return read(job, pods), job, nil
}

// EnsureSecret makes the migration's Secret (from RenderSecret) exist with
// want's credential: created when absent, its data replaced when the
// credential changed (a rotated password reaches the next pod), a
// *NotAdoptableError when the Secret there is not the migration's.
func EnsureSecret(ctx context.Context, kc *kube.Client, want *corev1.Secret) (*corev1.Secret, error) {
	s, created, err := kube.EnsureOwned(ctx, kc, want.DeepCopy(), kc.CreateSecret, kube.LabelOwner(want.Labels[kube.LabelMigration]))
	var notOwned *kube.NotOwnedError
	if errors.As(err, &notOwned) {
		return nil, &NotAdoptableError{Namespace: want.Namespace, Name: want.Name, Foreign: true, Err: err}
	}
	if err != nil || created || sameData(s.Data, want.Data) {
		return s, err
	}
	s = s.DeepCopy()
	s.Data = want.Data
	if err := kc.UpdateSecret(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// CheckResult checks a copy's result against what the runner knows of the
// copy before it believes it: every byte of the source, every chunk
// either copied or verified from the journal, zeros within the size, and
// the host key the runner pinned (when the worker connected at all).
func CheckResult(c Copy, r copyjob.Result) error {
	size := c.Source.SizeBytes
	chunk := c.ChunkSize
	if chunk <= 0 {
		chunk = transfer.DefaultChunkSize
	}
	chunks := transfer.NumChunks(size, chunk)
	for _, d := range c.Deltas {
		chunks += transfer.NumChunks(d.SizeBytes, chunk)
	}
	if err := checkDeltas(c, r); err != nil {
		return err
	}
	switch {
	case !r.OK:
		return fmt.Errorf("the copy did not succeed: %s", r.Error)
	case r.Digest != diskdigest.Name:
		return otherDigest(r.Digest)
	case r.Bytes != size:
		return fmt.Errorf("the copy reports %d bytes, the source disk has %d", r.Bytes, size)
	case r.ChunksCopied+r.ChunksSkipped != chunks:
		return fmt.Errorf("the copy reports %d chunks copied and %d verified, the disk has %d", r.ChunksCopied, r.ChunksSkipped, chunks)
	case r.ZeroBytes < 0 || r.ZeroBytes > size:
		return fmt.Errorf("the copy reports %d zero bytes of %d", r.ZeroBytes, size)
	case r.HostKeyFingerprint != "" && r.HostKeyFingerprint != c.Host.HostKeyFingerprint:
		return fmt.Errorf("the copy verified host key %s, not the pinned %s", r.HostKeyFingerprint, c.Host.HostKeyFingerprint)
	}
	return nil
}

// ErrOtherWorker marks a result from a worker of another version than the
// provider: retrying with the same image cannot help.
var ErrOtherWorker = errors.New("the worker image is of another version than the provider")

// otherDigest is the error of a worker whose checksums are not this
// provider's disk digest: a worker image of another version.
func otherDigest(got string) error {
	if got == "" {
		got = "plain SHA-256"
	}
	return fmt.Errorf("%w: its checksums are %s, not this provider's %s", ErrOtherWorker, got, diskdigest.Name)
}

// checkDeltas checks a flattened chain's evidence: the base's SHA-256 and
// one applied delta per delta of the spec, each of its size.
func checkDeltas(c Copy, r copyjob.Result) error {
	if !r.OK || len(c.Deltas) == 0 {
		return nil
	}
	if len(r.BaseSHA256) != 64 || len(r.Deltas) != len(c.Deltas) {
		return fmt.Errorf("the copy reports %d of the %d snapshot deltas applied (base digest %q)", len(r.Deltas), len(c.Deltas), r.BaseSHA256)
	}
	for k, d := range r.Deltas {
		if d.Bytes != c.Deltas[k].SizeBytes || len(d.SHA256) != 64 {
			return fmt.Errorf("the copy reports delta %d as %d bytes (digest %q), the host's file %s has %d", k, d.Bytes, d.SHA256, c.Deltas[k].Path, c.Deltas[k].SizeBytes)
		}
	}
	return nil
}

// JobActive says whether the Job namespace/name still runs: it exists and
// has no terminal condition (Complete, Failed, or FailureTarget, which
// precedes Failed). A Job not found counts as active until grace after
// since, the time its runner recorded taking a host slot for it, so that
// a slot taken just before its Job is created is not reclaimed from under
// it. Errors are returned, never guessed: the caller keeps the slot.
func JobActive(ctx context.Context, kc *kube.Client, namespace, name string, since time.Time, grace time.Duration, now time.Time) (bool, error) {
	job, err := kc.GetJob(ctx, namespace, name)
	if kube.IsNotFound(err) {
		return now.Before(since.Add(grace)), nil
	}
	if err != nil {
		return false, err
	}
	return !Finished(job), nil
}
