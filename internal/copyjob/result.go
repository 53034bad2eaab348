package copyjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// MaxResultBytes is the most a termination message may hold: Kubernetes
// keeps at most 4096 bytes of it.
const MaxResultBytes = 4096

// Exit codes of the worker. Each fault class has its own, so that the
// engine reads the class from the Pod's status even when the termination
// message is lost.
const (
	ExitOK          = 0
	ExitPermanent   = 10 // retrying the same spec fails again
	ExitTransient   = 11 // retry with backoff: the journal keeps what landed
	ExitNeedsHuman  = 12 // credentials, host key, full or broken storage, a file mode
	ExitInterrupted = 13 // stopped by a signal (eviction, deletion): resume
	ExitUsage       = 64 // the command line was wrong; no result is written
)

// Result is the worker's outcome: the copy's evidence on success, the
// error and its class on failure. Its JSON stays under MaxResultBytes.
type Result struct {
	OK     bool   `json:"ok"`
	SHA256 string `json:"sha256,omitempty"`
	// Digest names the digest of SHA256, BaseSHA256 and Deltas
	// (diskdigest.Name), so that a runner never takes a worker of
	// another version's checksums for its own.
	Digest string `json:"digest,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// ZeroBytes were all-zero blocks: holes in a file target, zeros on a
	// block device.
	ZeroBytes     int64 `json:"zero_bytes,omitempty"`
	ChunksCopied  int   `json:"chunks_copied,omitempty"`
	ChunksSkipped int   `json:"chunks_skipped,omitempty"`
	// BaseSHA256 and Deltas are set for a disk on snapshots: the base's
	// copy and each delta file's, oldest first; SHA256 is then the
	// guest-visible disk's, after every delta was applied.
	BaseSHA256 string        `json:"base_sha256,omitempty"`
	Deltas     []DeltaResult `json:"deltas,omitempty"`
	// HostKeyFingerprint is the host key this copy verified ("" when it
	// never connected, as when the journal already held the whole copy).
	HostKeyFingerprint string `json:"host_key_fingerprint,omitempty"`
	// Timing is where the copy's time went, for the runner's report.
	Timing *Timing `json:"timing,omitempty"`
	Error  string  `json:"error,omitempty"`
	// Class is fault.Class's name: transient, permanent, needs-human or
	// interrupted.
	Class string `json:"class,omitempty"`
}

// Timing is where a copy's seconds went in its pod: reading from the
// host into the target or a delta's copy (with the hashing done as the
// bytes arrive), applying deltas over the target (the leaves they touched
// hashed again meanwhile, and the syncs), and the flattened disk's
// digest. It is reported, never checked.
type Timing struct {
	CopySeconds  float64 `json:"copy_s,omitempty"`
	ApplySeconds float64 `json:"apply_s,omitempty"`
	HashSeconds  float64 `json:"hash_s,omitempty"`
	// Streams is where the copies' seconds went, summed over their
	// streams (transfer.Stages).
	Streams *StreamSeconds `json:"streams,omitempty"`
}

// StreamSeconds are transfer.Stages in seconds.
type StreamSeconds struct {
	Waiting float64 `json:"waiting_s,omitempty"`
	Reading float64 `json:"reading_s,omitempty"`
	Writing float64 `json:"writing_s,omitempty"`
	Syncing float64 `json:"fsync_s,omitempty"`
	Hashing float64 `json:"hashing_s,omitempty"`
	Journal float64 `json:"journal_s,omitempty"`
}

// add adds the time since t0 to *field, one of t's.
func (t *Timing) add(field *float64, t0 time.Time) { *field += time.Since(t0).Seconds() }

// addStages adds one copy's stages to t.Streams.
func (t *Timing) addStages(st transfer.Stages) {
	if st == (transfer.Stages{}) {
		return
	}
	if t.Streams == nil {
		t.Streams = &StreamSeconds{}
	}
	s := t.Streams
	s.Waiting += st.Waiting.Seconds()
	s.Reading += st.Reading.Seconds()
	s.Writing += st.Writing.Seconds()
	s.Syncing += st.Syncing.Seconds()
	s.Hashing += st.Hashing.Seconds()
	s.Journal += st.Journal.Seconds()
}

// orNil is t, or nil when nothing was timed.
func (t Timing) orNil() *Timing {
	if t.CopySeconds == 0 && t.ApplySeconds == 0 && t.HashSeconds == 0 && t.Streams == nil {
		return nil
	}
	return &t
}

// String is t as the runner reports it: "copy 1.2 s (summed over
// streams: waiting 0.1 s, reading 2.2 s), apply 0.3 s".
func (t Timing) String() string {
	var parts []string
	for _, p := range []struct {
		name string
		s    float64
	}{{"copy", t.CopySeconds}, {"apply", t.ApplySeconds}, {"hash", t.HashSeconds}} {
		if p.s <= 0 {
			continue
		}
		part := fmt.Sprintf("%s %.1f s", p.name, p.s)
		if p.name == "copy" && t.Streams != nil {
			part += " (summed over streams: " + t.Streams.String() + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func (s StreamSeconds) String() string {
	var parts []string
	for _, p := range []struct {
		name string
		s    float64
	}{{"waiting", s.Waiting}, {"reading", s.Reading}, {"writing", s.Writing}, {"fsync", s.Syncing}, {"hashing", s.Hashing}, {"journal", s.Journal}} {
		if p.s >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f s", p.name, p.s))
		}
	}
	if len(parts) == 0 {
		return "all under 0.1 s"
	}
	return strings.Join(parts, ", ")
}

// DeltaResult is the evidence of one applied delta file.
type DeltaResult struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// succeeded is the Result of a completed copy.
func succeeded(r transfer.Result, fingerprint string, t Timing) Result {
	return Result{OK: true, Timing: t.orNil(), SHA256: r.SHA256, Digest: diskdigest.Name, Bytes: r.Bytes, ZeroBytes: r.ZeroBytes,
		ChunksCopied: r.ChunksCopied, ChunksSkipped: r.ChunksSkipped, HostKeyFingerprint: fingerprint}
}

// Failed is the Result of err: its class is the one fault.Classify finds,
// except that a copy stopped by its context (a signal) is Interrupted.
func Failed(ctx context.Context, err error, fingerprint string) Result {
	class := fault.Classify(err)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		class = fault.Interrupted
	}
	msg := err.Error()
	if advice := fault.ErrnoAdvice(err); advice != "" {
		msg += ": " + advice
	}
	return Result{Error: msg, Class: class.String(), HostKeyFingerprint: fingerprint}
}

// ExitCode is the worker's exit status for r.
func (r Result) ExitCode() int {
	switch {
	case r.OK:
		return ExitOK
	case r.Class == fault.Transient.String():
		return ExitTransient
	case r.Class == fault.NeedsHuman.String():
		return ExitNeedsHuman
	case r.Class == fault.Interrupted.String():
		return ExitInterrupted
	}
	return ExitPermanent
}

// Encode is r as JSON of at most MaxResultBytes, the error message
// shortened (at a character boundary) when it would not fit.
func (r Result) Encode() []byte {
	for {
		b, err := json.Marshal(r)
		if err != nil {
			// Result holds only strings and numbers.
			panic(fmt.Sprintf("copyjob: encode result: %v", err))
		}
		if len(b) <= MaxResultBytes || r.Error == "" {
			return b
		}
		cut := max(len(r.Error)-(len(b)-MaxResultBytes)-len("…"), 0)
		for cut > 0 && !utf8.RuneStart(r.Error[cut]) {
			cut--
		}
		r.Error = r.Error[:cut] + "…"
	}
}

// WriteResult writes r to p (a termination-message file: written in
// place, not renamed, since Kubernetes mounts that one file) and fsyncs it.
func WriteResult(p string, r Result) error { return WriteTerminationMessage(p, r.Encode()) }

// WriteTerminationMessage writes a worker's encoded result b to p, the
// termination-message file, in place, and fsyncs it.
func WriteTerminationMessage(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write result %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync result %s: %w", p, err)
	}
	return f.Close()
}

// ParseResult reads a worker's result back from a termination message:
// the result file's JSON, or, when the kubelet fell back to the log's
// last lines (the result file was empty), the last result line among
// them. A result that is not well formed (an OK without a SHA-256 and a
// size, a failure without a known class) is an error: the runner does not
// advance on evidence it cannot check.
func ParseResult(msg string) (Result, error) {
	var r Result
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	found := false
	if len(lines) == 1 {
		found = json.Unmarshal([]byte(lines[0]), &r) == nil && !strings.Contains(lines[0], `"event"`)
	}
	for i := len(lines) - 1; i >= 0 && !found; i-- {
		var l Line
		if json.Unmarshal([]byte(lines[i]), &l) == nil && l.Event == "result" && l.Result != nil {
			r, found = *l.Result, true
		}
	}
	if !found {
		return Result{}, fmt.Errorf("no worker result in %q", Shorten(msg, 200))
	}
	return r, r.check()
}

// check says whether r is a result the worker could have written.
func (r Result) check() error {
	switch {
	case r.OK && (len(r.SHA256) != 64 || strings.Trim(r.SHA256, "0123456789abcdef") != "" || r.Bytes <= 0):
		return fmt.Errorf("worker result says OK without a SHA-256 and a size: %+v", r)
	case r.OK && (r.ZeroBytes < 0 || r.ZeroBytes > r.Bytes || r.ChunksCopied < 0 || r.ChunksSkipped < 0):
		return fmt.Errorf("worker result has impossible counts: %+v", r)
	case !r.OK && !slices.Contains(FailureClasses, r.Class):
		return fmt.Errorf("worker result is a failure of unknown class %q", r.Class)
	}
	return nil
}

// FailureClasses are the classes a worker's failed result may carry.
var FailureClasses = []string{fault.Transient.String(), fault.Permanent.String(), fault.NeedsHuman.String(), fault.Interrupted.String()}

// Shorten cuts s to at most n bytes, at a character boundary.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
