package convertjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// evidence is what a conversion records at most: every message at its
// bound.
func fullEvidence() *convertjob.Evidence {
	msgs := func(kind string) []string {
		var out []string
		for i := range 10 {
			out = append(out, fmt.Sprintf("%s %d %s", kind, i, strings.Repeat("x", 280)))
		}
		return out
	}
	return &convertjob.Evidence{Tool: "virt-v2v-in-place", Version: "2.2.0", Accelerator: "kvm",
		OS: convertjob.GuestOS{Type: "windows", Distro: "windows", Version: "10.0", OSInfo: "win2k22", Arch: "x86_64",
			ProductName: strings.Repeat("Windows Server 2022 Datacenter ", 6), Firmware: "uefi"},
		Converted: "Converting " + strings.Repeat("Windows Server ", 18) + " to run on KVM",
		Drivers:   msgs("driver"), Warnings: msgs("warning"), Seconds: 187.25}
}

func okResult(disks int) convertjob.Result {
	r := convertjob.Result{OK: true, Evidence: fullEvidence()}
	for i := range disks {
		r.Disks = append(r.Disks, convertjob.Checked{SHA256: fmt.Sprintf("%064x", i+1), Bytes: 100<<30 + int64(i)})
	}
	return r
}

func decode(t *testing.T, b []byte) convertjob.Result {
	t.Helper()
	if len(b) > convertjob.MaxResultBytes {
		t.Fatalf("%d bytes do not fit a termination message", len(b))
	}
	r, err := convertjob.ParseResult(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A result fits a termination message: virt-v2v's warnings go first, then
// its driver messages, then the error is shortened, then the summary
// line; the images' hashes are kept.
func TestEncodeFits(t *testing.T) {
	t.Run("warnings dropped", func(t *testing.T) {
		r := okResult(2)
		r.Evidence.Drivers = r.Evidence.Drivers[:5]
		got := decode(t, r.Encode())
		if got.Evidence.Warnings != nil || len(got.Evidence.Drivers) != 5 || !reflect.DeepEqual(got.Disks, r.Disks) ||
			got.Evidence.Converted != r.Evidence.Converted {
			t.Errorf("decoded %+v", got.Evidence)
		}
		if len(r.Evidence.Warnings) != 10 {
			t.Error("Encode changed the result it encoded")
		}
	})
	t.Run("drivers dropped", func(t *testing.T) {
		r := okResult(12)
		got := decode(t, r.Encode())
		if got.Evidence.Warnings != nil || got.Evidence.Drivers != nil || got.Evidence.Converted != r.Evidence.Converted {
			t.Errorf("decoded %+v", got.Evidence)
		}
		if len(r.Evidence.Drivers) != 10 {
			t.Error("Encode changed the result it encoded")
		}
	})
	t.Run("summary shortened", func(t *testing.T) {
		r := okResult(35)
		r.Evidence.Converted = strings.Repeat("é", 3000)
		got := decode(t, r.Encode())
		if !reflect.DeepEqual(got.Disks, r.Disks) || !utf8.ValidString(got.Evidence.Converted) ||
			!strings.HasSuffix(got.Evidence.Converted, "…") || !strings.HasPrefix(got.Evidence.Converted, "éé") {
			t.Errorf("decoded %d images, summary %q", len(got.Disks), got.Evidence.Converted)
		}
	})
	t.Run("error shortened", func(t *testing.T) {
		r := convertjob.Result{Class: "needs-human", Reason: convertjob.ReasonFailed, Error: `virt-v2v: "` + strings.Repeat("ü\n", 5000)}
		got := decode(t, r.Encode())
		if !utf8.ValidString(got.Error) || !strings.HasPrefix(got.Error, `virt-v2v: "ü`) || !strings.HasSuffix(got.Error, "…") ||
			got.Reason != r.Reason || got.Class != r.Class || len(r.Encode()) < convertjob.MaxResultBytes-8 {
			t.Errorf("decoded %+v", got)
		}
	})
	t.Run("small result unchanged", func(t *testing.T) {
		r := okResult(1)
		r.Evidence.Drivers, r.Evidence.Warnings = r.Evidence.Drivers[:1], r.Evidence.Warnings[:1]
		if got := decode(t, r.Encode()); !reflect.DeepEqual(got, r) {
			t.Errorf("decoded %+v, want %+v", got, r)
		}
	})
}

// A result is read back from the termination message, or from the log's
// last lines when that is empty; one the worker could not have written is
// refused.
func TestParseResult(t *testing.T) {
	ok := okResult(2)
	ok.Evidence.Drivers, ok.Evidence.Warnings = nil, nil
	var log strings.Builder
	for _, st := range []string{convertjob.StageOverlays, convertjob.StageConverting} {
		fmt.Fprintf(&log, `{"event":"stage","stage":%q}`+"\n", st)
	}
	convertjob.PrintResult(&log, ok)
	log.WriteString("vmmigration-worker: something on stderr\n")

	good := []struct {
		name, msg string
		want      convertjob.Result
	}{
		{"termination message", string(ok.Encode()), ok},
		{"log lines", log.String(), ok},
		{"failure", `{"ok":false,"error":"full","class":"needs-human","reason":"ConversionNoSpace"}`,
			convertjob.Result{Error: "full", Class: "needs-human", Reason: convertjob.ReasonNoSpace}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			got, err := convertjob.ParseResult(tt.msg)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseResult = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	sha := strings.Repeat("0a", 32)
	bad := map[string]string{
		"empty":            "",
		"not JSON":         "panic: runtime error",
		"only stage lines": `{"event":"stage","stage":"converting"}`,
		"OK without disks": `{"ok":true,"evidence":{"tool":"x","converted":"y"}}`,
		"short sha256":     `{"ok":true,"disks":[{"sha256":"abc","bytes":5}]}`,
		"upper-case hex":   `{"ok":true,"disks":[{"sha256":"` + strings.ToUpper(sha) + `","bytes":5}]}`,
		"no size":          `{"ok":true,"disks":[{"sha256":"` + sha + `","bytes":0}]}`,
		"unknown class":    `{"ok":false,"error":"x","class":"fatal"}`,
		"no class":         `{"ok":false,"error":"x"}`,
	}
	for name, msg := range bad {
		t.Run(name, func(t *testing.T) {
			if got, err := convertjob.ParseResult(msg); err == nil {
				t.Errorf("ParseResult(%q) = %+v, want an error", msg, got)
			}
		})
	}
}

func TestWriteResult(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(p, []byte(strings.Repeat("stale ", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := okResult(3)
	if err := convertjob.WriteResult(p, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := decode(t, b); !reflect.DeepEqual(got.Disks, r.Disks) {
		t.Errorf("read back %+v", got)
	}
}

// Each fault of a conversion has local execution's class and reason, and
// the worker exits with copyjob's code for the class.
func TestFailureClasses(t *testing.T) {
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name   string
		ctx    context.Context
		err    error
		class  fault.Class
		reason string
		exit   int
	}{
		{"stalled", t.Context(), fmt.Errorf("%w: virt-v2v-in-place printed nothing", convert.ErrV2VStalled), fault.Transient, convertjob.ReasonStalled, copyjob.ExitTransient},
		{"no virtio-win", t.Context(), fmt.Errorf("%w: /usr/share/virtio-win", convert.ErrNoVirtioWin), fault.NeedsHuman, convertjob.ReasonNoVirtioWin, copyjob.ExitNeedsHuman},
		{"tools missing", t.Context(), fmt.Errorf("%w: nbdkit is not installed", convert.ErrV2VMissing), fault.NeedsHuman, convertjob.ReasonToolsMissing, copyjob.ExitNeedsHuman},
		{"claim full", t.Context(), &os.PathError{Op: "write", Path: "/disks/0/disk.img.v2v.qcow2", Err: syscall.ENOSPC}, fault.NeedsHuman, convertjob.ReasonNoSpace, copyjob.ExitNeedsHuman},
		{"claim full, said by qemu-img", t.Context(), errors.New("qemu-img commit: Could not write: No space left on device"), fault.NeedsHuman, convertjob.ReasonNoSpace, copyjob.ExitNeedsHuman},
		{"signal", stopped, fmt.Errorf("virt-v2v-in-place: %w", context.Canceled), fault.Interrupted, convertjob.ReasonInterrupted, copyjob.ExitInterrupted},
		{"guest refused", t.Context(), fmt.Errorf("%w: inspection found no OS", convert.ErrV2VFailed), fault.NeedsHuman, convertjob.ReasonFailed, copyjob.ExitNeedsHuman},
		{"anything else", t.Context(), errors.New("fsync: input/output error"), fault.NeedsHuman, convertjob.ReasonFailed, copyjob.ExitNeedsHuman},
		{"decided at its source", t.Context(), &fault.Error{Class: fault.Permanent, Reason: convertjob.ReasonBadDisk, Message: "not raw", Action: "copy again"},
			fault.Permanent, convertjob.ReasonBadDisk, copyjob.ExitPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := convertjob.Failure(tt.ctx, tt.err)
			if r.OK || r.Class != tt.class.String() || r.Reason != tt.reason || !strings.Contains(r.Error, tt.err.Error()) || r.ExitCode() != tt.exit {
				t.Errorf("%+v (exit %d), want %s %s (exit %d)", r, r.ExitCode(), tt.class, tt.reason, tt.exit)
			}
		})
	}
	if code := okResult(1).ExitCode(); code != copyjob.ExitOK {
		t.Errorf("OK exits %d", code)
	}
	if r := convertjob.SpecFailed(errors.New("-spec-json: bad")); r.Class != "permanent" || r.Reason != convertjob.ReasonBadSpec || r.ExitCode() != copyjob.ExitPermanent {
		t.Errorf("SpecFailed = %+v", r)
	}
}

func TestLastStage(t *testing.T) {
	log := `{"event":"stage","stage":"overlays","disks":2}
{"event":"stage","stage":"converting","disks":2}
libguestfs: trace: a line that is not the worker's
{"event":"stage","stage":"committ`
	l, ok := convertjob.LastStage([]byte(log))
	if !ok || l.Stage != convertjob.StageConverting || l.Disks != 2 {
		t.Errorf("LastStage = %+v, %v", l, ok)
	}
	if _, ok := convertjob.LastStage([]byte("no lines\n")); ok {
		t.Error("a stage found in a log without one")
	}
	var l2 convertjob.Line
	if err := json.Unmarshal([]byte(`{"event":"result","result":{"ok":false,"class":"transient"}}`), &l2); err != nil || l2.Result == nil {
		t.Errorf("a result line: %+v, %v", l2, err)
	}
}

// A conversion of MaxDisks disks with full evidence (100 GiB disks, every
// message at its bound) fits a termination message with every hash.
func TestEncodeFitsMaxDisks(t *testing.T) {
	r := okResult(convertjob.MaxDisks)
	for i := range r.Disks {
		r.Disks[i].Bytes = 100 << 30
	}
	b := r.Encode()
	if len(b) > convertjob.MaxResultBytes {
		t.Fatalf("%d bytes for %d disks, more than %d", len(b), convertjob.MaxDisks, convertjob.MaxResultBytes)
	}
	if got := decode(t, b); !reflect.DeepEqual(got.Disks, r.Disks) {
		t.Errorf("decoded %d images, want %d", len(got.Disks), len(r.Disks))
	}
}
