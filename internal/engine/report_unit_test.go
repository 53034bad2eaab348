package engine

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fixedClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// report fills in the migration, the record's phase and the time, keeps the
// disk only on progress, and gives a measured transfer its rate and, when
// an Event is due, the reason "Progress". (The cluster is unreachable here:
// Kubernetes Events are best effort and never block a report.)
func TestReportFillsAndMeasures(t *testing.T) {
	clock := &fixedClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	var got []Event
	e := &Engine{deps: Deps{Clock: clock, Kube: kube.New(kube.Config{ConfigPath: "/nonexistent/kubeconfig"}),
		Progress: func(ev Event) { got = append(got, ev) }}}
	s := &coord.Stored{Record: record.Record{Phase: record.PhasePreparing}, ConfigMap: &corev1.ConfigMap{}}
	r := &run{e: e, spec: Spec{Namespace: "ns", Name: "web"}}
	r.setStored(s)
	ctx := t.Context()

	r.report(ctx, Event{Kind: EventInfo, Disk: 3, Reason: "PoweringOff", Message: "powering off source VM x", recorded: "powering off the source VM x"})
	cp := Transfer{Kind: TransferCopy}
	r.report(ctx, Event{Kind: EventProgress, Disk: 0, Transfer: cp, BytesDone: 0, BytesTotal: 100e6, Message: "disk 0: copied 0"})
	clock.add(2 * time.Second)
	r.report(ctx, Event{Kind: EventProgress, Disk: 0, Transfer: cp, BytesDone: 100e6, BytesTotal: 100e6, Message: "disk 0: copied 100000000"})

	if len(got) != 3 {
		t.Fatalf("%d events, want 3", len(got))
	}
	info := got[0]
	if info.Namespace != "ns" || info.Name != "web" || info.Phase != record.PhasePreparing || info.Disk != -1 || info.Time.IsZero() ||
		info.Reason != "PoweringOff" || info.Message != "powering off source VM x" {
		t.Errorf("info event = %+v", info)
	}
	if first := got[1]; first.Disk != 0 || first.Reason != "" || first.BytesPerSecond != 0 {
		t.Errorf("first progress event = %+v, want disk 0, no reason, no rate", first)
	}
	last := got[2]
	if last.BytesPerSecond != 50e6 || last.Reason != "Progress" || !strings.HasSuffix(last.Message, " at 50.0 MB/s") {
		t.Errorf("last progress event = %+v, want 5e7 B/s, reason Progress, the rate in its message", last)
	}
}
