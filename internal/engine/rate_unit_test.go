package engine

import (
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
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
		e := Event{Kind: EventProgress, Phase: record.PhasePreparing, Disk: disk, Time: t0.Add(at), BytesDone: done, BytesTotal: 1000e6,
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

// A transfer is known by its identity (phase, disk, Transfer, size), never
// by its message: two chain files whose names differ by a suffix, or hold
// ':', are measured apart; a copy and an upload of the same disk are
// measured apart; and one transfer whose messages change (':' anywhere)
// stays one transfer.
func TestRateTrackerKeyedByIdentity(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var tr rateTracker
	observe := func(disk int, tf Transfer, at time.Duration, done int64, msg string) Event {
		t.Helper()
		e := Event{Kind: EventProgress, Phase: record.PhasePreparing, Disk: disk, Transfer: tf, Time: t0.Add(at),
			BytesDone: done, BytesTotal: 1000e6, Message: msg}
		tr.observe(&e)
		return e
	}
	base := Transfer{Kind: TransferCopy, File: "/vmfs/volumes/ds:1/web/web.vmdk"}
	delta := Transfer{Kind: TransferCopy, File: "/vmfs/volumes/ds:1/web/web.vmdk-000001"}
	observe(-1, base, 0, 0, "precopy: snapshot chain file "+base.File+": copied 0 of 1000000000 bytes")
	observe(-1, delta, time.Second, 500e6, "precopy: snapshot chain file "+delta.File+": copied 500000000 of 1000000000 bytes")
	if e := observe(-1, base, 2*time.Second, 200e6, "precopy: snapshot chain file "+base.File+": copied"); e.BytesPerSecond != 100e6 {
		t.Errorf("base file: %v B/s, want 1e8 (its own bytes, not the other file's)", e.BytesPerSecond)
	}
	if e := observe(-1, delta, 3*time.Second, 900e6, "precopy: snapshot chain file "+delta.File+": copied"); e.BytesPerSecond != 200e6 {
		t.Errorf("delta file: %v B/s, want 2e8", e.BytesPerSecond)
	}

	// The copy of disk 0 and its upload as it copies, in one phase with one
	// size, are two transfers even under one label.
	cp, up := Transfer{Kind: TransferCopy}, Transfer{Kind: TransferUpload}
	observe(0, cp, 0, 0, "disk 0: copied")
	observe(0, up, 0, 0, "disk 0: uploaded")
	observe(0, cp, 4*time.Second, 400e6, "disk 0: copied")
	if e := observe(0, up, 4*time.Second, 100e6, "disk 0: uploaded"); e.BytesPerSecond != 25e6 {
		t.Errorf("upload: %v B/s, want 2.5e7 (not counted from the copy's 400 MB)", e.BytesPerSecond)
	}
	// Disk 1 with the same kind is another transfer again.
	if e := observe(1, cp, 5*time.Second, 600e6, "disk 1: copied"); e.BytesPerSecond != 0 {
		t.Errorf("disk 1's first report has a rate: %v", e.BytesPerSecond)
	}

	// One transfer whose messages put ':' in different places is still one.
	imp := Transfer{Kind: TransferImport}
	observe(2, imp, 0, 100e6, "disk 2: DataVolume web-disk-2 ImportInProgress 10.0%")
	if e := observe(2, imp, 2*time.Second, 300e6, "disk 2: DataVolume web-disk-2 ImportInProgress: 30.0% (pod web:importer)"); e.BytesPerSecond != 100e6 {
		t.Errorf("import with changing messages: %v B/s, want 1e8", e.BytesPerSecond)
	}
}
