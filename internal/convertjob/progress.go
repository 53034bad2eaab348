package convertjob

import (
	"bytes"
	"encoding/json"
	"io"
)

// Events of the worker's JSON lines (Line.Event).
const (
	EventStage  = "stage"
	EventResult = "result"
)

// Stages of a conversion (Line.Stage), in order; a run that finds the
// conversion committing starts at "committing", one that finds it done
// prints only its result.
const (
	StageOverlays   = "overlays"
	StageConverting = "converting"
	StageCommitting = "committing"
	StageHashing    = "hashing"
)

// Line is one JSON line the worker prints on stdout: one as each stage
// begins ("stage"), then the result ("result", with Result set), so that
// the log's last lines carry the result when the termination message is
// lost.
type Line struct {
	Event   string  `json:"event"`
	Stage   string  `json:"stage,omitempty"`
	Disks   int     `json:"disks,omitempty"`
	Message string  `json:"message,omitempty"`
	Result  *Result `json:"result,omitempty"`
}

// printer prints Lines on w; a write that fails is dropped (stdout gone:
// nothing to tell anyone).
type printer struct{ enc *json.Encoder }

func newPrinter(w io.Writer) *printer { return &printer{enc: json.NewEncoder(w)} }

func (p *printer) stage(name string, disks int, msg string) {
	_ = p.enc.Encode(Line{Event: EventStage, Stage: name, Disks: disks, Message: msg})
}

func (p *printer) result(r Result) {
	_ = p.enc.Encode(Line{Event: EventResult, Result: &r})
}

// PrintResult prints r as the final line on w.
func PrintResult(w io.Writer, r Result) { newPrinter(w).result(r) }

// LastStage is the last well-formed stage line among the lines of a
// worker's log (the tail a runner reads through the API server), and
// whether there was one.
func LastStage(log []byte) (Line, bool) {
	lines := bytes.Split(log, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var l Line
		if json.Unmarshal(bytes.TrimSpace(lines[i]), &l) == nil && l.Event == EventStage && l.Stage != "" {
			return l, true
		}
	}
	return Line{}, false
}
