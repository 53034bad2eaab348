package copyjob

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// Line is one JSON line the worker prints on stdout: progress while the
// copy runs ("progress"), then the result ("result", with Result set).
type Line struct {
	Event       string  `json:"event"`
	BytesDone   int64   `json:"bytes_done,omitempty"`
	BytesTotal  int64   `json:"bytes_total,omitempty"`
	Percent     float64 `json:"percent,omitempty"`
	ChunksDone  int     `json:"chunks_done,omitempty"`
	ChunksTotal int     `json:"chunks_total,omitempty"`
	// RateBytesPerSecond is this run's average over the bytes it moved
	// (chunks verified by an earlier run do not count); ETASeconds the
	// time the rest takes at that rate. Both are 0 until data flowed.
	RateBytesPerSecond float64 `json:"rate_bytes_per_second,omitempty"`
	ETASeconds         float64 `json:"eta_seconds,omitempty"`
	Result             *Result `json:"result,omitempty"`
}

// progressPrinter turns transfer progress into Lines on w.
type progressPrinter struct {
	mu    sync.Mutex
	enc   *json.Encoder
	now   func() time.Time
	start time.Time
	base  int64 // bytes done at the first report
	begun bool
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	return &progressPrinter{enc: json.NewEncoder(w), now: time.Now}
}

// progress is a transfer.Options.Progress.
func (p *progressPrinter) progress(pr transfer.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.begun {
		p.start, p.base, p.begun = now, pr.BytesDone, true
	}
	l := Line{Event: "progress", BytesDone: pr.BytesDone, BytesTotal: pr.BytesTotal, Percent: pr.Percent,
		ChunksDone: pr.ChunksDone, ChunksTotal: pr.ChunksTotal}
	if moved, secs := pr.BytesDone-p.base, now.Sub(p.start).Seconds(); moved > 0 && secs > 0 {
		l.RateBytesPerSecond = float64(moved) / secs
		l.ETASeconds = float64(pr.BytesTotal-pr.BytesDone) / l.RateBytesPerSecond
	}
	_ = p.enc.Encode(l) // stdout gone: nothing to tell anyone
}

// PrintResult prints r as the final line on w.
func PrintResult(w io.Writer, r Result) {
	_ = json.NewEncoder(w).Encode(Line{Event: "result", Result: &r})
}
