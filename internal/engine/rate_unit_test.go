package engine

import (
	"strings"
	"testing"
	"time"
)

// A transfer's throughput and time left come from its own bytes since its
// first report; nothing is claimed before a second has passed, a restarted
// transfer counts afresh, two disks are measured apart, and a Kubernetes
// Event is due at most every progressEventInterval and at the end.
func TestRateTrackerThroughputAndETA(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var tr rateTracker
	ev := func(disk int, at time.Duration, done int64) (Event, bool) {
		e := Event{Kind: EventProgress, Phase: PhasePreparing, Disk: disk, Time: t0.Add(at), BytesDone: done, BytesTotal: 1000e6,
			Message: "disk 0: copied"}
		due := tr.observe(&e)
		return e, due
	}
	if e, due := ev(0, 0, 100e6); e.BytesPerSecond != 0 || due {
		t.Fatalf("first report: rate %v, event due %v", e.BytesPerSecond, due)
	}
	if e, _ := ev(0, 500*time.Millisecond, 150e6); e.BytesPerSecond != 0 || e.RateText() != "" {
		t.Fatalf("half a second in: rate %v %q, want none yet", e.BytesPerSecond, e.RateText())
	}
	e, due := ev(0, 2*time.Second, 300e6)
	if e.BytesPerSecond != 100e6 || e.ETA != 7*time.Second || due {
		t.Fatalf("after 2 s and 200 MB: %v B/s, ETA %v, due %v; want 1e8, 7s, false", e.BytesPerSecond, e.ETA, due)
	}
	if got := e.RateText(); got != "100.0 MB/s, about 7s left" {
		t.Fatalf("RateText = %q", got)
	}
	// Another disk is its own transfer.
	if e, _ := ev(1, 3*time.Second, 900e6); e.BytesPerSecond != 0 {
		t.Fatalf("disk 1's first report has a rate: %v", e.BytesPerSecond)
	}
	if _, due := ev(0, 31*time.Second, 700e6); !due {
		t.Fatal("no Kubernetes Event due after 31 s")
	}
	if _, due := ev(0, 32*time.Second, 710e6); due {
		t.Fatal("a second Event due one second after the last")
	}
	if e, due := ev(0, 40*time.Second, 1000e6); !due || e.ETA != 0 || !strings.HasSuffix(e.RateText(), "MB/s") {
		t.Fatalf("at the end: due %v, ETA %v, %q", due, e.ETA, e.RateText())
	}
	// A resumed transfer (fewer bytes than before) starts counting again.
	if e, _ := ev(0, 41*time.Second, 200e6); e.BytesPerSecond != 0 {
		t.Fatalf("restarted transfer inherited a rate: %v", e.BytesPerSecond)
	}
	if e, _ := ev(0, 43*time.Second, 400e6); e.BytesPerSecond != 100e6 {
		t.Fatalf("restarted transfer rate = %v, want 1e8", e.BytesPerSecond)
	}
	// Other kinds of event carry no rate.
	info := Event{Kind: EventInfo, Time: t0.Add(50 * time.Second), BytesTotal: 1, Message: "x"}
	if tr.observe(&info) || info.BytesPerSecond != 0 {
		t.Fatal("an info event got a rate")
	}
}

func TestTransferOf(t *testing.T) {
	for msg, want := range map[string]string{
		"disk 0: copied 1 of 2 bytes (50.0%)":                               "disk 0",
		"disk 1: snapshot chain file /vmfs/volumes/a/b.vmdk: copied 1 of 2": "disk 1: snapshot chain file /vmfs/volumes/a/b.vmdk",
		"no colon": "",
	} {
		if got := transferOf(msg); got != want {
			t.Errorf("transferOf(%q) = %q, want %q", msg, got, want)
		}
	}
}
