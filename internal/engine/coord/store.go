package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
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

// RecordName is the name of the ConfigMap holding a migration's record and
// of its Lease.
func RecordName(name string) string { return "vmmigration-" + name }

// Stored is a record with the ConfigMap it was read from.
type Stored struct {
	Record    record.Record
	ConfigMap *corev1.ConfigMap
}

// ClearResetAnnotation removes AnnotationReset from the record's ConfigMap
// (as part of the next save).
func (s *Stored) ClearResetAnnotation() {
	if _, ok := s.ConfigMap.Annotations[AnnotationReset]; ok {
		s.ConfigMap = s.ConfigMap.DeepCopy()
		delete(s.ConfigMap.Annotations, AnnotationReset)
	}
}

// Store reads and writes the records of migrations in the destination
// cluster.
type Store struct {
	Kube *kube.Client
	// Now tells the time of the Events the store publishes.
	Now func() time.Time
}

// Load reads the record of migration namespace/name. A missing record is
// an error matching ErrNoRecord; a ConfigMap of that name that is not the
// migration's readable record is a *fault.Error that needs a human.
func (st Store) Load(ctx context.Context, namespace, name string) (*Stored, error) {
	cm, err := st.Kube.GetConfigMap(ctx, namespace, RecordName(name))
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, fmt.Errorf("migration %s/%s: %w", namespace, name, ErrNoRecord)
		}
		return nil, err
	}
	if !kube.OfMigration(cm.Labels, name) {
		return nil, &fault.Error{Class: fault.NeedsHuman, Reason: "RecordNotOurs",
			Message: fmt.Sprintf("ConfigMap %s/%s exists but is not a migration record of %q (label %s is %q)", namespace, cm.Name, name, kube.LabelMigration, cm.Labels[kube.LabelMigration]),
			Action:  "rename or remove that ConfigMap, or choose another destination name"}
	}
	var rec record.Record
	if err := json.Unmarshal([]byte(cm.Data[RecordKey]), &rec); err != nil {
		return nil, &fault.Error{Class: fault.NeedsHuman, Reason: "RecordUnreadable",
			Message: fmt.Sprintf("the migration record in ConfigMap %s/%s is not valid JSON: %v", namespace, cm.Name, err),
			Action:  "restore the record from a backup or delete the ConfigMap to start the migration over"}
	}
	return &Stored{Record: rec, ConfigMap: cm}, nil
}

// recordConfigMap is the ConfigMap holding a new record.
func recordConfigMap(rec record.Record) (*corev1.ConfigMap, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: rec.Identity.Namespace, Name: RecordName(rec.Identity.Name), Labels: kube.MigrationLabels(rec.Identity.Name)},
		Data:       map[string]string{RecordKey: string(b)},
	}, nil
}

// Create writes a new record; AlreadyExists means another run created it
// first.
func (st Store) Create(ctx context.Context, rec record.Record) (*Stored, error) {
	cm, err := recordConfigMap(rec)
	if err != nil {
		return nil, err
	}
	if err := st.Kube.CreateConfigMap(ctx, cm); err != nil {
		return nil, err
	}
	return &Stored{Record: rec, ConfigMap: cm}, nil
}

// CreatePending writes the new record of a run that holds the lease. A
// create applied although its reply was lost is seen through: a record
// that is there, with the same identity and still Pending, is the one
// this run wrote. Any other record in the way gives the create's own
// error.
func (st Store) CreatePending(ctx context.Context, rec record.Record) (*Stored, error) {
	cm, err := recordConfigMap(rec)
	if err != nil {
		return nil, err
	}
	kc := st.Kube
	cm, created, err := kube.EnsureOwned(ctx, kc, cm, kc.CreateConfigMap, func(obj client.Object) (string, bool) {
		cm := obj.(*corev1.ConfigMap)
		owner := cm.Labels[kube.LabelMigration]
		var got record.Record
		if !kube.OfMigration(cm.Labels, rec.Identity.Name) || json.Unmarshal([]byte(cm.Data[RecordKey]), &got) != nil {
			return owner, false
		}
		return owner, got.Identity == rec.Identity && got.Phase == record.PhasePending
	})
	var notOurs *kube.NotOwnedError
	switch {
	case errors.As(err, &notOurs):
		return nil, notOurs.Create
	case err != nil:
		return nil, err
	case created:
		return &Stored{Record: rec, ConfigMap: cm}, nil
	}
	var got record.Record
	if err := json.Unmarshal([]byte(cm.Data[RecordKey]), &got); err != nil {
		return nil, err
	}
	return &Stored{Record: got, ConfigMap: cm}, nil
}

// Save writes s.Record with optimistic concurrency, retrying transient API
// errors a few times. A conflict means someone else changed the record:
// it is not retried, and is an Interrupted *fault.Error.
func (st Store) Save(ctx context.Context, s *Stored) error {
	b, err := json.Marshal(s.Record)
	if err != nil {
		return err
	}
	kc := st.Kube
	p := retry.Policy{Attempts: 5, Initial: 200 * time.Millisecond, Max: 2 * time.Second}
	return retry.Do(ctx, p, func(err error) bool {
		return kube.Classify(err) == kube.Transient && !kube.IsConflict(err)
	}, func(ctx context.Context) error {
		cm := s.ConfigMap.DeepCopy()
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
				if cur, ok := st.storedAsWritten(ctx, cm); ok {
					s.ConfigMap = cur
					return nil
				}
				return &fault.Error{Class: fault.Interrupted, Reason: "RecordConflict",
					Message: fmt.Sprintf("the migration record %s/%s was changed by someone else while this run held the lease", cm.Namespace, cm.Name)}
			}
			return err
		}
		s.ConfigMap = cm
		return nil
	})
}

// storedAsWritten re-reads the record's ConfigMap and reports whether it
// holds exactly what want says: the same record and the same reset
// annotation. Then a conflicting update was our own write, applied although
// its reply was lost, and cur is the ConfigMap to continue from.
func (st Store) storedAsWritten(ctx context.Context, want *corev1.ConfigMap) (*corev1.ConfigMap, bool) {
	cur, err := st.Kube.GetConfigMap(ctx, want.Namespace, want.Name)
	if err != nil {
		return nil, false
	}
	if cur.UID != want.UID || cur.Data[RecordKey] != want.Data[RecordKey] ||
		cur.Annotations[AnnotationReset] != want.Annotations[AnnotationReset] || !kube.OfMigration(cur.Labels, want.Labels[kube.LabelMigration]) {
		return nil, false
	}
	return cur, true
}
