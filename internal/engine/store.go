package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// RecordKey is the ConfigMap data key holding the record's JSON.
const RecordKey = "record.json"

// AnnotationReset on the record's ConfigMap, set to "true" by a human, lets
// the next Run leave the Failed state and re-enter the checkpoint that
// failed (with a fresh retry budget). The engine removes it when it does.
const AnnotationReset = "vmmigration.io/reset"

// ErrNoRecord matches (errors.Is) the error of Load when the migration has
// no record.
var ErrNoRecord = errors.New("no migration record")

// stored is a record with the ConfigMap it was read from.
type stored struct {
	rec Record
	cm  *corev1.ConfigMap
}

// LabelMigration marks the objects of a migration: its value is the
// migration's name (the destination VM's).
const LabelMigration = kube.LabelMigration

// IsOwnLabel reports whether a label key is one the engine sets on the
// objects it makes (not one a user configured).
func IsOwnLabel(key string) bool {
	return key == kube.LabelMigration || key == kube.LabelManagedBy
}

func ourLabels(name string) map[string]string {
	return map[string]string{kube.LabelMigration: name, kube.LabelManagedBy: kube.ManagedByValue}
}

// isOurs reports whether labels mark an object as migration name's.
func isOurs(labels map[string]string, name string) bool {
	return labels[kube.LabelMigration] == name
}

// Load reads the record of migration namespace/name. A missing record is
// an error matching ErrNoRecord.
func (e *Engine) Load(ctx context.Context, namespace, name string) (Record, error) {
	s, err := e.load(ctx, namespace, name)
	if err != nil {
		return Record{}, err
	}
	return s.rec, nil
}

func (e *Engine) load(ctx context.Context, namespace, name string) (*stored, error) {
	cm, err := e.deps.Kube.GetConfigMap(ctx, namespace, RecordName(name))
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, fmt.Errorf("migration %s/%s: %w", namespace, name, ErrNoRecord)
		}
		return nil, err
	}
	if !isOurs(cm.Labels, name) {
		return nil, &stopCause{class: fault.NeedsHuman, reason: "RecordNotOurs",
			msg:    fmt.Sprintf("ConfigMap %s/%s exists but is not a migration record of %q (label %s is %q)", namespace, cm.Name, name, kube.LabelMigration, cm.Labels[kube.LabelMigration]),
			action: "rename or remove that ConfigMap, or choose another destination name"}
	}
	var rec Record
	if err := json.Unmarshal([]byte(cm.Data[RecordKey]), &rec); err != nil {
		return nil, &stopCause{class: fault.NeedsHuman, reason: "RecordUnreadable",
			msg:    fmt.Sprintf("the migration record in ConfigMap %s/%s is not valid JSON: %v", namespace, cm.Name, err),
			action: "restore the record from a backup or delete the ConfigMap to start the migration over"}
	}
	return &stored{rec: rec, cm: cm}, nil
}

// recordConfigMap is the ConfigMap holding a new record.
func recordConfigMap(rec Record) (*corev1.ConfigMap, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: rec.Identity.Namespace, Name: RecordName(rec.Identity.Name), Labels: ourLabels(rec.Identity.Name)},
		Data:       map[string]string{RecordKey: string(b)},
	}, nil
}

// create writes a new record; AlreadyExists means another run created it
// first.
func (e *Engine) create(ctx context.Context, rec Record) (*stored, error) {
	cm, err := recordConfigMap(rec)
	if err != nil {
		return nil, err
	}
	if err := e.deps.Kube.CreateConfigMap(ctx, cm); err != nil {
		return nil, err
	}
	return &stored{rec: rec, cm: cm}, nil
}

// createPending writes the new record of a run that holds the lease. A
// create applied although its reply was lost is seen through: a record
// that is there, with the same identity and still Pending, is the one
// this run wrote. Any other record in the way gives the create's own
// error.
func (e *Engine) createPending(ctx context.Context, rec Record) (*stored, error) {
	cm, err := recordConfigMap(rec)
	if err != nil {
		return nil, err
	}
	kc := e.deps.Kube
	cm, created, err := kube.EnsureOwned(ctx, kc, cm, kc.CreateConfigMap, func(obj client.Object) (string, bool) {
		cm := obj.(*corev1.ConfigMap)
		owner := cm.Labels[kube.LabelMigration]
		var got Record
		if !isOurs(cm.Labels, rec.Identity.Name) || json.Unmarshal([]byte(cm.Data[RecordKey]), &got) != nil {
			return owner, false
		}
		return owner, got.Identity == rec.Identity && got.Phase == PhasePending
	})
	var notOurs *kube.NotOwnedError
	switch {
	case errors.As(err, &notOurs):
		return nil, notOurs.Create
	case err != nil:
		return nil, err
	case created:
		return &stored{rec: rec, cm: cm}, nil
	}
	var got Record
	if err := json.Unmarshal([]byte(cm.Data[RecordKey]), &got); err != nil {
		return nil, err
	}
	return &stored{rec: got, cm: cm}, nil
}

// save writes s.rec with optimistic concurrency, retrying transient API
// errors a few times. A conflict means someone else changed the record:
// it is not retried.
func (e *Engine) save(ctx context.Context, s *stored) error {
	b, err := json.Marshal(s.rec)
	if err != nil {
		return err
	}
	kc := e.deps.Kube
	p := retry.Policy{Attempts: 5, Initial: 200 * time.Millisecond, Max: 2 * time.Second}
	return retry.Do(ctx, p, func(err error) bool {
		return kube.Classify(err) == kube.Transient && !kube.IsConflict(err)
	}, func(ctx context.Context) error {
		cm := s.cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[RecordKey] = string(b)
		if err := kc.UpdateConfigMap(ctx, cm); err != nil {
			if kube.IsConflict(err) {
				// The conflict may be our own write, whose reply was lost
				// (an earlier attempt applied it, or this one did and the
				// answer went missing): look before calling it someone
				// else's.
				if cur, ok := e.storedAsWritten(ctx, cm); ok {
					s.cm = cur
					return nil
				}
				return &stopCause{class: fault.Interrupted, reason: "RecordConflict",
					msg: fmt.Sprintf("the migration record %s/%s was changed by someone else while this run held the lease", cm.Namespace, cm.Name)}
			}
			return err
		}
		s.cm = cm
		return nil
	})
}

// storedAsWritten re-reads the record's ConfigMap and reports whether it
// holds exactly what want says: the same record and the same reset
// annotation. Then a conflicting update was our own write, applied although
// its reply was lost, and cur is the ConfigMap to continue from.
func (e *Engine) storedAsWritten(ctx context.Context, want *corev1.ConfigMap) (*corev1.ConfigMap, bool) {
	cur, err := e.deps.Kube.GetConfigMap(ctx, want.Namespace, want.Name)
	if err != nil {
		return nil, false
	}
	if cur.UID != want.UID || cur.Data[RecordKey] != want.Data[RecordKey] ||
		cur.Annotations[AnnotationReset] != want.Annotations[AnnotationReset] || !isOurs(cur.Labels, want.Labels[kube.LabelMigration]) {
		return nil, false
	}
	return cur, true
}

// clearResetAnnotation removes AnnotationReset from the record's ConfigMap
// (as part of the next save).
func (s *stored) clearResetAnnotation() {
	if _, ok := s.cm.Annotations[AnnotationReset]; ok {
		s.cm = s.cm.DeepCopy()
		delete(s.cm.Annotations, AnnotationReset)
	}
}

// event records a Kubernetes Event on the record's ConfigMap. Events are
// best effort: failing to write one never stops a migration.
func (e *Engine) event(ctx context.Context, s *stored, warning bool, reason, message string) {
	if s == nil || s.cm.UID == "" {
		return
	}
	now := metav1.NewTime(e.now())
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	if len(message) > 1024 {
		message = message[:1021] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    s.cm.Namespace,
			GenerateName: s.cm.Name + ".",
			Labels:       ourLabels(s.rec.Identity.Name),
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "ConfigMap", APIVersion: "v1", Namespace: s.cm.Namespace, Name: s.cm.Name,
			UID: s.cm.UID, ResourceVersion: s.cm.ResourceVersion,
		},
		Reason: reason, Message: message, Type: typ,
		Source:         corev1.EventSource{Component: kube.ManagedByValue},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = e.deps.Kube.CreateEvent(ctx, ev)
}

// IsNotFound reports whether err says a migration has no record (Load on a
// migration that was never created or has been forgotten).
func IsNotFound(err error) bool { return errors.Is(err, ErrNoRecord) }
