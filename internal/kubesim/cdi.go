package kubesim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Reasons and messages the sim's DataVolume controller writes, after CDI's.
const (
	// ReasonCompleted is the Running condition's reason once the transfer
	// pod has finished.
	ReasonCompleted = "Completed"
	// ReasonError is the Running condition's reason when the transfer pod
	// failed (the message says why).
	ReasonError = "Error"
	// ReasonTransferRunning is the Ready condition's reason while data moves.
	ReasonTransferRunning = "TransferRunning"
	// ReasonEvicted is the default reason of an injected transient failure.
	ReasonEvicted = "Evicted"
	// ReasonUnsupported says the sim does not implement the DataVolume's
	// source kind.
	ReasonUnsupported = "Unsupported"
)

// transfer is an upload or import in flight or finished, for one
// DataVolume (by UID).
type transfer struct {
	cancel   context.CancelFunc
	active   bool
	received int64
	total    int64
	result   *transferResult
}

type transferResult struct {
	ok      bool
	reason  string
	message string
}

// Received describes an image the sim received for a DataVolume and what
// it wrote to the claim. Like CDI, the sim converts a qcow2 arrival to raw
// with qemu-img, so the claim holds the disk as the guest sees it, and
// SHA256 is always the hash of that raw content, whatever format crossed
// the wire.
type Received struct {
	// Path is the claim's image file (raw).
	Path string
	// SHA256 is the hex SHA-256 of the claim's content: the guest-visible
	// disk.
	SHA256 string
	// Size is its length.
	Size int64
	// Format is the format of the claim's image (raw); VirtualSize is the
	// disk size qemu-img info reported for what arrived.
	Format      string
	VirtualSize int64
	// SentFormat is the format that arrived (raw or qcow2), SentBytes and
	// SentSHA256 the length and hex SHA-256 of the bytes as they arrived.
	SentFormat string
	SentBytes  int64
	SentSHA256 string

	// ClaimSize is the length of the claim's image file: at least Size
	// (CDI's upload server grows it to the claim's usable size).
	ClaimSize int64

	// claimHash, when set, computes SHA256 and Size of a converted image
	// the first time they are asked for: hashing the claim is the
	// simulator's own check, so it adds nothing to the import's time or
	// to the CPU a migration competes for (real CDI hashes nothing).
	claimHash *lazyHash
}

// lazyHash hashes a claim's image once, when first asked: its first prefix
// bytes when prefix is set and every byte after them is zero, else all of
// it.
type lazyHash struct {
	once   sync.Once
	path   string
	prefix int64
	sum    string
	n      int64
	total  int64
	err    error
}

func (l *lazyHash) get() (string, int64, error) {
	l.once.Do(func() { l.sum, l.n, l.total, l.err = hashPrefix(l.path, l.prefix) })
	return l.sum, l.n, l.err
}

// ReceivedImage returns what arrived, and passed validation, for the
// DataVolume namespace/name (the last time, if it was recreated).
//
// The claim of a converted image is hashed the first time it is asked
// for (before a simulated guest boots from it, since claimImage asks).
func (s *Sim) ReceivedImage(namespace, name string) (Received, bool) {
	s.mu.Lock()
	r, ok := s.received[namespace+"/"+name]
	s.mu.Unlock()
	if ok && r.claimHash != nil {
		sum, n, err := r.claimHash.get()
		if err != nil {
			s.mu.Lock()
			s.lastErr = fmt.Errorf("hashing the claim of %s/%s: %w", namespace, name, err)
			s.mu.Unlock()
		}
		r.SHA256, r.Size, r.ClaimSize, r.claimHash = sum, n, r.claimHash.total, nil
	}
	if r.ClaimSize == 0 {
		r.ClaimSize = r.Size
	}
	return r, ok
}

// ReceivedSHA256 returns the hex SHA-256 of the guest-visible (raw)
// content the claim of the DataVolume namespace/name holds, if an image
// arrived, passed validation and was written there.
func (s *Sim) ReceivedSHA256(namespace, name string) (string, bool) {
	r, ok := s.ReceivedImage(namespace, name)
	return r.SHA256, ok
}

// ReceivedPath returns where the image for the DataVolume namespace/name
// is (or will be) kept.
func (s *Sim) ReceivedPath(namespace, name string) string {
	return imagePath(s.dir, namespace, name)
}

func (s *Sim) reconcileDataVolumes(ctx context.Context) error {
	var list cdiv1.DataVolumeList
	if err := s.cl.List(ctx, &list); err != nil {
		return fmt.Errorf("listing DataVolumes: %w", err)
	}
	seen := map[types.UID]bool{}
	var errs []error
	for i := range list.Items {
		dv := &list.Items[i]
		if !s.watched(dv.Namespace) {
			continue
		}
		seen[dv.UID] = true
		if dv.DeletionTimestamp != nil {
			continue
		}
		before := dv.Status.DeepCopy()
		s.stepDataVolume(dv)
		if !equality.Semantic.DeepEqual(*before, dv.Status) {
			if err := s.cl.Status().Update(ctx, dv); err != nil {
				errs = append(errs, fmt.Errorf("DataVolume %s/%s: %w", dv.Namespace, dv.Name, err))
			}
		}
	}
	s.forgetTransfers(seen)
	if err := s.collectClaims(ctx, seen); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// forgetTransfers cancels and drops the transfers of DataVolumes that are
// gone.
func (s *Sim) forgetTransfers(seen map[types.UID]bool) {
	s.mu.Lock()
	var gone []types.UID
	for uid := range s.pods {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	for _, m := range []map[types.UID]*transfer{s.imports} {
		for uid, t := range m {
			if !seen[uid] {
				if t.cancel != nil {
					t.cancel()
				}
				delete(m, uid)
				gone = append(gone, uid)
			}
		}
	}
	s.mu.Unlock()
	for _, uid := range gone {
		s.stopUploadPod(uid)
		s.forget(uid)
	}
}

// stepDataVolume moves dv's status one step towards what CDI would show.
func (s *Sim) stepDataVolume(dv *cdiv1.DataVolume) {
	st := &dv.Status
	if st.Phase == cdiv1.Succeeded || st.Phase == cdiv1.Failed {
		return
	}
	st.ClaimName = dv.Name
	if _, _, err := capacity(dv, s.opts.FilesystemOverhead); err != nil {
		s.failDataVolume(dv, ReasonError, err.Error())
		return
	}
	src := dv.Spec.Source
	switch {
	case src != nil && src.Upload != nil:
		s.stepUpload(dv)
	case src != nil && src.HTTP != nil:
		s.stepImport(dv)
	case src != nil && src.Blank != nil:
		s.stepBlank(dv)
	default:
		st.Phase = cdiv1.Pending
		setDVCondition(st, cdiv1.DataVolumeBound, corev1.ConditionFalse, "PVC "+dv.Name+" Pending", "Pending")
		setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "")
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse,
			"kubesim implements the upload, http and blank sources only", ReasonUnsupported)
	}
}

// stepCommon handles the phases every source goes through before its
// transfer: Pending, then scheduled (where injected failures strike). It
// reports whether the DataVolume has reached scheduled for Step.
func (s *Sim) stepCommon(dv *cdiv1.DataVolume, scheduled cdiv1.DataVolumePhase) bool {
	st := &dv.Status
	switch st.Phase {
	case "", cdiv1.Pending, cdiv1.PendingPopulation, cdiv1.WaitForFirstConsumer:
		st.Phase = cdiv1.Pending
		setDVCondition(st, cdiv1.DataVolumeBound, corev1.ConditionFalse, "PVC "+dv.Name+" Pending", "Pending")
		setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "")
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "")
		if !s.ensureClaim(dv) {
			return false
		}
		waiting, err := s.waitingPhase(s.ctx, dv)
		if err != nil {
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
			return false
		}
		if waiting != "" {
			// The claim stays Pending, unbound, until a pod uses it.
			st.Phase = waiting
			return false
		}
		if !s.claimProvisioned(dv) || !s.ensurePrimeClaim(dv) {
			return false
		}
		if !s.due(dv.UID, string(cdiv1.Pending), s.opts.Step) {
			return false
		}
		st.Phase = scheduled
		setDVCondition(st, cdiv1.DataVolumeBound, corev1.ConditionTrue, "PVC "+dv.Name+" Bound", "Bound")
		if f, ok := s.takeDataVolumeFailure(); ok {
			s.failDataVolume(dv, f.reason, f.message)
		}
		return false
	case scheduled:
		return s.due(dv.UID, string(scheduled), s.opts.Step)
	}
	return true
}

func (s *Sim) stepBlank(dv *cdiv1.DataVolume) {
	if !s.stepCommon(dv, cdiv1.ImportScheduled) {
		return
	}
	s.finish(dv, &transferResult{ok: true})
}

func (s *Sim) stepImport(dv *cdiv1.DataVolume) {
	st := &dv.Status
	if !s.stepCommon(dv, cdiv1.ImportScheduled) {
		return
	}
	s.mu.Lock()
	t := s.imports[dv.UID]
	s.mu.Unlock()
	if st.Phase == cdiv1.ImportScheduled || t == nil {
		// A sim restarted mid-import starts it again, as a new importer
		// pod would.
		if !s.importerCAMounted(dv) {
			return
		}
		st.Phase = cdiv1.ImportInProgress
		if st.Progress == "" {
			st.Progress = "N/A"
		}
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "")
		setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", ReasonTransferRunning)
		s.startImport(dv, s.importerRoots(dv))
		return
	}
	s.mu.Lock()
	received, total, res, active := t.received, t.total, t.result, t.active
	s.mu.Unlock()
	switch {
	case res == nil:
		if total > 0 {
			st.Progress = cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", 100*float64(received)/float64(total)))
		}
	case res.ok:
		s.finish(dv, res)
	case !active:
		// The importer exited with an error. CDI never fails the
		// DataVolume for it: the importer pod has RestartPolicy OnFailure
		// (CDI v1.65.0 pkg/controller/import-controller.go makeImporterPodSpec),
		// so the pod stays Running while the kubelet restarts its
		// container with a growing back-off; the import controller copies
		// the container's restart count into status.restartCount and its
		// last termination into Running=False, reason Error, message the
		// termination message (pkg/controller/util.go
		// setAnnotationsFromPodWithPrefix, pkg/controller/datavolume/
		// conditions.go updateRunningCondition); the phase stays
		// ImportInProgress.
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, res.message, res.reason)
		if !s.due(dv.UID, fmt.Sprintf("restart-%d", st.RestartCount), s.restartBackoff(st.RestartCount)) {
			return
		}
		st.RestartCount++
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "")
		s.startImport(dv, s.importerRoots(dv))
	}
}

// restartBackoff is how long a failed importer container waits before its
// n+1st start: the kubelet's CrashLoopBackOff doubles from 10 s up to five
// minutes (k8s.io/kubernetes pkg/kubelet/kuberuntime); the sim doubles
// from Step, up to 16 Steps.
func (s *Sim) restartBackoff(n int32) time.Duration {
	return s.opts.Step << min(n, 4)
}

// finish writes the outcome of a transfer.
func (s *Sim) finish(dv *cdiv1.DataVolume, res *transferResult) {
	st := &dv.Status
	if !res.ok {
		s.failDataVolume(dv, res.reason, res.message)
		return
	}
	st.Phase = cdiv1.Succeeded
	st.Progress = "100.0%"
	s.deletePrimeClaim(dv)
	setDVCondition(st, cdiv1.DataVolumeBound, corev1.ConditionTrue, "PVC "+dv.Name+" Bound", "Bound")
	setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Import Complete", ReasonCompleted)
	if dv.Spec.Source.Upload != nil {
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Upload Complete", ReasonCompleted)
		s.deleteScratchClaim(dv)
	}
	setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionTrue, "", "")
}

func (s *Sim) failDataVolume(dv *cdiv1.DataVolume, reason, message string) {
	st := &dv.Status
	st.Phase = cdiv1.Failed
	setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, message, reason)
	setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "")
}

// setDVCondition sets a condition the way CDI's updateCondition does: the
// transition time changes with the status only.
func setDVCondition(st *cdiv1.DataVolumeStatus, t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, message, reason string) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime, c.LastHeartbeatTime = now, now
		} else if c.Message != message || c.Reason != reason {
			c.LastHeartbeatTime = now
		}
		c.Status, c.Message, c.Reason = status, message, reason
		return
	}
	st.Conditions = append(st.Conditions, cdiv1.DataVolumeCondition{
		Type: t, Status: status, Message: message, Reason: reason, LastTransitionTime: now, LastHeartbeatTime: now,
	})
}

// capacity returns the storage a DataVolume requests and how much of it an
// image may use.
func capacity(dv *cdiv1.DataVolume, overhead float64) (requested, available int64, err error) {
	switch {
	case dv.Spec.Storage != nil:
		q, ok := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
		if !ok {
			return 0, 0, fmt.Errorf("DataVolume %s/%s: spec.storage.resources.requests.storage is missing (kubesim has no StorageProfile to size it from)", dv.Namespace, dv.Name)
		}
		// CDI inflates spec.storage claims by the filesystem overhead, so
		// the whole request is available to the image.
		return q.Value(), q.Value(), nil
	case dv.Spec.PVC != nil:
		q, ok := dv.Spec.PVC.Resources.Requests[corev1.ResourceStorage]
		if !ok {
			return 0, 0, fmt.Errorf("DataVolume %s/%s: spec.pvc.resources.requests.storage is missing", dv.Namespace, dv.Name)
		}
		avail := q.Value()
		if dv.Spec.PVC.VolumeMode == nil || *dv.Spec.PVC.VolumeMode != corev1.PersistentVolumeBlock {
			avail = int64(float64(avail) * (1 - overhead))
		}
		return q.Value(), avail, nil
	}
	return 0, 0, fmt.Errorf("DataVolume %s/%s has neither spec.storage nor spec.pvc", dv.Namespace, dv.Name)
}

func isLoopbackHost(host string) bool {
	h := strings.ToLower(host)
	return h == "localhost" || h == "127.0.0.1" || h == "::1" || strings.HasPrefix(h, "127.")
}
