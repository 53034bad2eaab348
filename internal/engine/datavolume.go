package engine

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// dvPhaseKind is what a DataVolume phase means to the engine.
type dvPhaseKind int

const (
	// dvPreparing: CDI is making the claim or its importer or upload pod.
	dvPreparing dvPhaseKind = iota
	// dvAwaitingConsumer: CDI waits for a pod to use the claim before it
	// binds it (StorageClass volumeBindingMode WaitForFirstConsumer). The
	// engine's DataVolumes ask for immediate binding, so this lasts only
	// where CDI does not honour that.
	dvAwaitingConsumer
	// dvUploadReady: the upload pod accepts the image.
	dvUploadReady
	// dvTransferring: data is moving (or the source of a kind the engine
	// never uses is being processed).
	dvTransferring
	// dvPaused: a multi-stage import waits for its next checkpoint, which
	// only DataVolumes with spec.checkpoints have; the engine's have none.
	dvPaused
	dvSucceeded
	dvFailed
)

// dataVolumePhases are all the phases of CDI's DataVolume API
// (kubevirt.io/containerized-data-importer-api v1.66.0 pkg/apis/core/
// v1beta1/types.go, the module go.mod requires; CDI v1.65's are the same),
// each with what it means here. A phase missing from it is from a newer
// CDI: the engine waits on it as on dvPreparing, bounded like every wait.
var dataVolumePhases = map[cdiv1beta1.DataVolumePhase]dvPhaseKind{
	cdiv1beta1.PhaseUnset:                        dvPreparing,
	cdiv1beta1.Pending:                           dvPreparing,
	cdiv1beta1.PVCBound:                          dvPreparing,
	cdiv1beta1.ImportScheduled:                   dvPreparing,
	cdiv1beta1.UploadScheduled:                   dvPreparing,
	cdiv1beta1.CloneScheduled:                    dvPreparing,
	cdiv1beta1.PrepClaimInProgress:               dvPreparing,
	cdiv1beta1.RebindInProgress:                  dvPreparing,
	cdiv1beta1.Unknown:                           dvPreparing,
	cdiv1beta1.WaitForFirstConsumer:              dvAwaitingConsumer,
	cdiv1beta1.PendingPopulation:                 dvAwaitingConsumer,
	cdiv1beta1.UploadReady:                       dvUploadReady,
	cdiv1beta1.ImportInProgress:                  dvTransferring,
	cdiv1beta1.CloneInProgress:                   dvTransferring,
	cdiv1beta1.SnapshotForSmartCloneInProgress:   dvTransferring,
	cdiv1beta1.CloneFromSnapshotSourceInProgress: dvTransferring,
	cdiv1beta1.SmartClonePVCInProgress:           dvTransferring,
	cdiv1beta1.CSICloneInProgress:                dvTransferring,
	cdiv1beta1.ExpansionInProgress:               dvTransferring,
	cdiv1beta1.NamespaceTransferInProgress:       dvTransferring,
	cdiv1beta1.Paused:                            dvPaused,
	cdiv1beta1.Succeeded:                         dvSucceeded,
	cdiv1beta1.Failed:                            dvFailed,
}

// dvKind returns what phase means to the engine.
func dvKind(phase cdiv1beta1.DataVolumePhase) dvPhaseKind {
	if k, ok := dataVolumePhases[phase]; ok {
		return k
	}
	return dvPreparing
}

// Bounds of the waits on a DataVolume (Spec.DataVolumeStallTimeout,
// Spec.ImporterRestarts).
const (
	// DefaultDataVolumeStallTimeout is how long a DataVolume may show no
	// change at all (phase, progress, restart count, Running condition)
	// before the engine stops waiting on it. Generous: CDI converts a
	// large upload without reporting progress.
	DefaultDataVolumeStallTimeout = 30 * time.Minute
	// DefaultImporterRestarts is how many times CDI may restart a disk's
	// importer (status.restartCount) before the engine stops: CDI itself
	// restarts it forever.
	DefaultImporterRestarts = 3
)

// dvSnapshot is what the engine tells about a DataVolume when it stops
// waiting on it.
func dvSnapshot(dv *cdiv1beta1.DataVolume) string {
	last := "no Running condition"
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1beta1.DataVolumeRunning {
			last = "Running=" + string(c.Status)
			if c.Reason != "" || c.Message != "" {
				last += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
			}
		}
	}
	phase := string(dv.Status.Phase)
	if phase == "" {
		phase = "without a phase"
	}
	return fmt.Sprintf("DataVolume %s/%s is %s, progress %q, %s, importer restarts %d",
		dv.Namespace, dv.Name, phase, dv.Status.Progress, last, dv.Status.RestartCount)
}

// dvFailure is the failure dv's Running condition reports, "" when it
// reports none.
func dvFailure(dv *cdiv1beta1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1beta1.DataVolumeRunning && c.Status == corev1.ConditionFalse && c.Message != "" {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// dvProgressKey is what changes when a DataVolume moves at all.
func dvProgressKey(dv *cdiv1beta1.DataVolume) string {
	reason, msg := dvRunningCondition(dv)
	return fmt.Sprintf("%s|%s|%d|%s|%s|%s", dv.UID, dv.Status.Phase, dv.Status.RestartCount, dv.Status.Progress, reason, msg)
}

// dvStall tells when a DataVolume last changed, as the engine observed it.
type dvStall struct {
	key   string
	since time.Time
}

// observe records dv's state at now and returns how long it has not
// changed.
func (s *dvStall) observe(dv *cdiv1beta1.DataVolume, now time.Time) time.Duration {
	k := dvProgressKey(dv)
	if k != s.key {
		s.key, s.since = k, now
	}
	return now.Sub(s.since)
}

// dvWhatToDo says what to look at for a DataVolume stuck in its phase.
func dvWhatToDo(dv *cdiv1beta1.DataVolume, storageClass string) string {
	switch dvKind(dv.Status.Phase) {
	case dvAwaitingConsumer:
		if _, ok := dv.Annotations[cdi.AnnImmediateBinding]; !ok {
			return fmt.Sprintf("StorageClass %q binds claims on first consumer and the DataVolume does not ask for immediate binding (annotation %s; it was made by another version or changed since): delete it, then run apply again",
				storageClass, cdi.AnnImmediateBinding)
		}
		return fmt.Sprintf("StorageClass %q binds claims on first consumer and CDI has not bound this one although the DataVolume asks for immediate binding (annotation %s): check that the annotation is there and that CDI honours it, or use a StorageClass with volumeBindingMode Immediate, then run apply again",
			storageClass, cdi.AnnImmediateBinding)
	case dvPreparing:
		return "look at its claim and pods (kubectl describe dv,pvc -n " + dv.Namespace + "): an unbound claim (provisioner, ResourceQuota) or a pod that cannot be scheduled keeps CDI waiting; fix that, then run apply again"
	case dvPaused:
		return "the DataVolume waits for a checkpoint the provider never sets: it was changed by someone else; delete it, then run apply again"
	}
	return "look at CDI's importer or upload pod for the DataVolume (kubectl describe dv -n " + dv.Namespace + "; kubectl logs), fix what it reports, then run apply again"
}
