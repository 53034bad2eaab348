package coord

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func pending(namespace, name string) record.Record {
	return record.Record{Version: record.RecordVersion, Phase: record.PhasePending,
		Identity: record.Identity{Host: "esx1", VMName: "vm", Namespace: namespace, Name: name}}
}

// A record is created once, read back, saved with optimistic concurrency,
// and refused when the ConfigMap of its name is someone else's.
func TestStore(t *testing.T) {
	ctx := t.Context()
	c, ns := newNamespace(t, "coord-store")
	st := Store{Kube: c, Now: newClock().Now}

	if _, err := st.Load(ctx, ns, "web"); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("Load of a missing record: %v, want ErrNoRecord", err)
	}
	s, err := st.CreatePending(ctx, pending(ns, "web"))
	if err != nil || s.ConfigMap.Name != RecordName("web") || s.ConfigMap.UID == "" {
		t.Fatalf("CreatePending = %+v, %v", s, err)
	}
	// The same Pending record already there is this run's create whose
	// reply was lost.
	again, err := st.CreatePending(ctx, pending(ns, "web"))
	if err != nil || again.ConfigMap.UID != s.ConfigMap.UID {
		t.Fatalf("CreatePending of the record already there = %+v, %v; want the first one", again, err)
	}
	if _, err := st.Create(ctx, pending(ns, "web")); !kube.IsAlreadyExists(err) {
		t.Fatalf("Create of an existing record: %v, want AlreadyExists", err)
	}

	s.Record.Phase = record.PhaseDiscovering
	if err := st.Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := st.Load(ctx, ns, "web")
	if err != nil || got.Record.Phase != record.PhaseDiscovering {
		t.Fatalf("Load after Save = %+v, %v; want phase Discovering", got, err)
	}

	// A save from a copy read before someone else's write conflicts.
	stale := &Stored{Record: s.Record, ConfigMap: s.ConfigMap.DeepCopy()}
	got.Record.Phase = record.PhaseValidated
	if err := st.Save(ctx, got); err != nil {
		t.Fatal(err)
	}
	stale.Record.Phase = record.PhasePreparing
	var fe *fault.Error
	if err := st.Save(ctx, stale); !errors.As(err, &fe) || fe.Class != fault.Interrupted || fe.Reason != "RecordConflict" {
		t.Fatalf("Save of a stale record: %v, want an Interrupted RecordConflict", err)
	}

	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: RecordName("db"),
		Labels: map[string]string{kube.LabelMigration: "other"}}}
	if err := c.CreateConfigMap(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, ns, "db"); !errors.As(err, &fe) || fe.Class != fault.NeedsHuman || fe.Reason != "RecordNotOurs" {
		t.Fatalf("Load of a ConfigMap that is not the record: %v, want a NeedsHuman RecordNotOurs", err)
	}
}

// Events go on the record's ConfigMap, cut to 1024 bytes; a record not yet
// written gets none.
func TestEvent(t *testing.T) {
	ctx := t.Context()
	c, ns := newNamespace(t, "coord-event")
	st := Store{Kube: c, Now: newClock().Now}
	s, err := st.CreatePending(ctx, pending(ns, "web"))
	if err != nil {
		t.Fatal(err)
	}
	st.Event(ctx, nil, true, "Ignored", "no record")
	st.Event(ctx, &Stored{Record: s.Record, ConfigMap: &corev1.ConfigMap{}}, true, "Ignored", "not written yet")
	st.Event(ctx, s, true, "Retrying", strings.Repeat("x", 2000))

	var evs corev1.EventList
	if err := cluster.Get(t).AdminClient().List(ctx, &evs); err != nil {
		t.Fatal(err)
	}
	var got []corev1.Event
	for _, ev := range evs.Items {
		if ev.Namespace == ns {
			got = append(got, ev)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d Events in %s, want 1: %+v", len(got), ns, got)
	}
	ev := got[0]
	if ev.InvolvedObject.UID != s.ConfigMap.UID || ev.Type != corev1.EventTypeWarning || ev.Reason != "Retrying" ||
		len(ev.Message) != maxEventMessage || !strings.HasSuffix(ev.Message, "...") || ev.Labels[kube.LabelMigration] != "web" {
		t.Errorf("Event = %+v; want a warning on the record, its message cut to %d bytes", ev, maxEventMessage)
	}
}
