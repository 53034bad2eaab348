package copyjob

import (
	"bytes"
	"encoding/json"
)

// LastProgress is the last well-formed progress line among the lines of a
// worker's log (the tail a runner reads through the API server), and
// whether there was one. Lines that are not the worker's JSON, or are
// cut short by the tail, are passed over.
func LastProgress(log []byte) (Line, bool) {
	lines := bytes.Split(log, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var l Line
		if json.Unmarshal(bytes.TrimSpace(lines[i]), &l) != nil || l.Event != "progress" {
			continue
		}
		if l.BytesTotal <= 0 || l.BytesDone < 0 || l.BytesDone > l.BytesTotal {
			continue
		}
		return l, true
	}
	return Line{}, false
}
