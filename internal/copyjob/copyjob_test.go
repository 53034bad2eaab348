package copyjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

func validSpec() Spec {
	return Spec{
		Host: Host{Name: "esxi-1", Address: "192.0.2.10", HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43),
			PasswordFile: "/etc/vmmigration/credential/password"},
		Disk:   Disk{Path: "/vmfs/volumes/datastore1 (1)/web & db/web-flat.vmdk", SizeBytes: 8 << 20},
		Target: Target{Kind: TargetFile, Path: "/data/disk.img"},
	}
}

// Every untrusted name in a spec is checked before anything runs; the
// names real datastores and VMs have (spaces, parentheses, &, quotes,
// $, ;) pass and are quoted on their way to the host.
func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string // "" when valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"quote and dollar in a VM name", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/it's $HOME; `x`/a-flat.vmdk" }, ""},
		{"command substitution", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/$(touch /tmp/x)-flat.vmdk" }, ""},
		{"newline", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/a\nrm -rf /-flat.vmdk" }, "line break"},
		{"carriage return", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/a\r-flat.vmdk" }, "line break"},
		{"NUL", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/a\x00-flat.vmdk" }, "NUL"},
		{"tab", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/a\t-flat.vmdk" }, "control character"},
		{"dot-dot inside the datastore", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/../other/a-flat.vmdk" }, "not clean"},
		{"dot-dot out of the datastore", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/../../etc/a.vmdk" }, "leave its datastore"},
		{"outside the datastores", func(s *Spec) { s.Disk.Path = "/etc/shadow" }, "not below /vmfs/volumes"},
		{"not a disk", func(s *Spec) { s.Disk.Path = "/vmfs/volumes/ds1/vm/vm.vmx" }, ".vmdk"},
		{"relative", func(s *Spec) { s.Disk.Path = "ds1/vm/a-flat.vmdk" }, "not absolute"},
		{"size", func(s *Spec) { s.Disk.SizeBytes = 1000 }, "multiple of 512"},
		{"chunk", func(s *Spec) { s.ChunkSize = 1000 }, "chunk_size"},
		{"streams", func(s *Spec) { s.Streams = 11 }, "streams"},
		{"address option", func(s *Spec) { s.Host.Address = "-oProxyCommand=x" }, "host.address"},
		{"address space", func(s *Spec) { s.Host.Address = "a b" }, "host.address"},
		{"user", func(s *Spec) { s.Host.User = "root;id" }, "host.user"},
		{"no pinned key", func(s *Spec) { s.Host.HostKeyFingerprint = "" }, "host_key_fingerprint"},
		{"two credentials", func(s *Spec) { s.Host.PrivateKeyFile = "/k" }, "exactly one"},
		{"no credential", func(s *Spec) { s.Host.PasswordFile = "" }, "exactly one"},
		{"relative credential", func(s *Spec) { s.Host.PasswordFile = "password" }, "credential file"},
		{"target kind", func(s *Spec) { s.Target.Kind = "nbd" }, "target.kind"},
		{"target not clean", func(s *Spec) { s.Target.Path = "/data/../etc/passwd" }, "target.path"},
		{"block without journal", func(s *Spec) { s.Target = Target{Kind: TargetBlock, Path: "/dev/xvda"} }, "journal_path is required"},
		{"journal under /dev", func(s *Spec) { s.JournalPath = "/dev/shm/j" }, "/dev"},
		{"journal is the target", func(s *Spec) { s.JournalPath = s.Target.Path }, "target itself"},
		{"result relative", func(s *Spec) { s.ResultPath = "termination-log" }, "result_path"},
		{"deltas", func(s *Spec) {
			s.Deltas = []Delta{{Path: "/vmfs/volumes/ds1/web/web-000001-sesparse.vmdk", Format: "seSparse", SizeBytes: 1 << 20}}
		}, ""},
		{"delta format", func(s *Spec) {
			s.Deltas = []Delta{{Path: "/vmfs/volumes/ds1/web/web-000001-delta.vmdk", Format: "vmfs", SizeBytes: 512}}
		}, "deltas[0].format"},
		{"delta path", func(s *Spec) {
			s.Deltas = []Delta{{Path: "/vmfs/volumes/ds1/../x.vmdk", Format: "seSparse", SizeBytes: 512}}
		}, "deltas[0].path"},
		{"delta size", func(s *Spec) {
			s.Deltas = []Delta{{Path: "/vmfs/volumes/ds1/w/w-000001-delta.vmdk", Format: "vmfsSparse", SizeBytes: 100}}
		}, "deltas[0].size_bytes"},
		{"delta is the base", func(s *Spec) { s.Deltas = []Delta{{Path: s.Disk.Path, Format: "vmfsSparse", SizeBytes: 512}} }, "twice"},
		{"too many deltas", func(s *Spec) {
			for k := range MaxDeltas + 1 {
				s.Deltas = append(s.Deltas, Delta{Path: fmt.Sprintf("/vmfs/volumes/ds1/w/w-%06d-delta.vmdk", k+1), Format: "vmfsSparse", SizeBytes: 512})
			}
		}, "at most 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.edit(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused a valid spec: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// A valid path reaches the host as one quoted shell word.
func TestDiskPathIsQuotedOnTheCommandLine(t *testing.T) {
	p := "/vmfs/volumes/ds1/$(touch /tmp/x);`id`'/a-flat.vmdk"
	if err := ValidateDiskPath(p); err != nil {
		t.Fatal(err)
	}
	cmd, err := esxi.DD(p, 1<<20, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "'if=" + strings.ReplaceAll(p, "'", `'\''`) + "'"; !strings.Contains(cmd.String(), want) {
		t.Errorf("dd command %s does not carry the path as %s", cmd.String(), want)
	}
}

func TestLoadSpecRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	b, _ := json.Marshal(validSpec())
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, b, 0o600)
	if _, err := LoadSpec(good); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, append(b[:len(b)-1], []byte(`,"pasword":"x"}`)...), 0o600)
	if _, err := LoadSpec(bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("spec with a misspelt field: %v", err)
	}
}

// A credential file that group or others may read is refused before a
// byte of it is read, as needing a person.
func TestReadCredential(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o400, true}, {0o600, true}, {0o440, false}, {0o644, false}, {0o404, false}, {0o402, false}} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			p := filepath.Join(dir, fmt.Sprintf("password-%o", tc.mode))
			if err := os.WriteFile(p, []byte("s3cret'pw\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCredential(p, true)
			if tc.ok && (err != nil || got != "s3cret'pw") {
				t.Errorf("got %q, %v", got, err)
			}
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("mode %04o", tc.mode)) || fault.Classify(err) != fault.NeedsHuman {
					t.Errorf("mode %04o: %v (class %v), want a needs-human refusal", tc.mode, err, fault.Classify(err))
				}
				if err != nil && strings.Contains(err.Error(), "s3cret") {
					t.Error("the error shows the credential")
				}
			}
		})
	}
	// A Secret volume's file is a symbolic link to a 0400 file.
	target := filepath.Join(dir, "..data")
	os.WriteFile(target, []byte("key"), 0o400)
	link := filepath.Join(dir, "key")
	os.Symlink(target, link)
	if got, err := ReadCredential(link, false); err != nil || got != "key" {
		t.Errorf("through a link: %q, %v", got, err)
	}
	if _, err := ReadCredential(dir, true); err == nil {
		t.Error("a directory was read as a credential")
	}
}

// The result always fits a termination message, and each class has its
// own exit code.
func TestResultEncodeAndExitCode(t *testing.T) {
	ctx := context.Background()
	long := errors.New(strings.Repeat("ünïcode \"quoted\" ", 1000))
	r := Failed(ctx, long, "SHA256:x")
	if b := r.Encode(); len(b) > MaxResultBytes || !json.Valid(b) {
		t.Errorf("encoded %d bytes (valid JSON %v), want at most %d", len(b), json.Valid(b), MaxResultBytes)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		r    Result
		code int
	}{
		{succeeded(transfer.Result{SHA256: "x"}, "", Timing{CopySeconds: 1}), ExitOK},
		{Failed(ctx, long, ""), ExitPermanent},
		{Failed(ctx, &os.PathError{Op: "write", Err: os.ErrDeadlineExceeded}, ""), ExitTransient},
		{Failed(ctx, classed(fault.NeedsHuman, long), ""), ExitNeedsHuman},
		{Failed(cancelled, fmt.Errorf("copy: %w", context.Canceled), ""), ExitInterrupted},
	} {
		if got := tc.r.ExitCode(); got != tc.code {
			t.Errorf("%s result: exit %d, want %d", tc.r.Class, got, tc.code)
		}
	}
}

// Progress lines carry this run's rate and the time left at that rate.
func TestProgressLines(t *testing.T) {
	var out bytes.Buffer
	p := newProgressPrinter(&out)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	p.progress(transfer.Progress{BytesDone: 100 << 20, BytesTotal: 400 << 20, ChunksDone: 1, ChunksTotal: 4})
	now = now.Add(2 * time.Second)
	p.progress(transfer.Progress{BytesDone: 200 << 20, BytesTotal: 400 << 20, ChunksDone: 2, ChunksTotal: 4})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last Line
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Event != "progress" || last.RateBytesPerSecond != 50<<20 || last.ETASeconds != 4 || last.ChunksDone != 2 {
		t.Errorf("last line %+v, want 50 MiB/s and 4 s left", last)
	}
}

// The runner reads a running worker's progress from the last lines of
// its log: the last well-formed progress line, passing over a line the
// tail cut, other output and the result.
func TestLastProgress(t *testing.T) {
	log := "{\"event\":\"progress\",\"bytes_done\":10,\"bytes_total\":100,\"percent\":10}\n" +
		"{\"event\":\"progress\",\"bytes_done\":40,\"bytes_total\":100,\"percent\":40}\n" +
		"not json\n" +
		"{\"event\":\"progress\",\"bytes_done\":50,\"bytes_t"
	l, ok := LastProgress([]byte(log))
	if !ok || l.BytesDone != 40 || l.BytesTotal != 100 {
		t.Fatalf("LastProgress = %+v, %v; want 40 of 100", l, ok)
	}
	if _, ok := LastProgress([]byte("{\"event\":\"result\",\"result\":{\"ok\":true}}\n")); ok {
		t.Error("a result line was taken for progress")
	}
	if _, ok := LastProgress([]byte("{\"event\":\"progress\",\"bytes_done\":200,\"bytes_total\":100}\n")); ok {
		t.Error("progress beyond the total was believed")
	}
}

// The result of a flattened chain of the most deltas a copy applies fits
// a termination message whole.
func TestChainResultFitsTerminationMessage(t *testing.T) {
	r := Result{OK: true, SHA256: strings.Repeat("a", 64), BaseSHA256: strings.Repeat("b", 64), Bytes: 1 << 50, ZeroBytes: 1 << 49,
		ChunksCopied: 1 << 30, ChunksSkipped: 1 << 30, HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43),
		Timing: &Timing{CopySeconds: 1e9 / 3, ApplySeconds: 1e9 / 7, HashSeconds: 1e9 / 11,
			Streams: &StreamSeconds{Waiting: 1e9 / 3, Reading: 1e9 / 7, Writing: 1e9 / 11, Syncing: 1e9 / 13, Hashing: 1e9 / 17, Journal: 1e9 / 19}}}
	for range MaxDeltas {
		r.Deltas = append(r.Deltas, DeltaResult{SHA256: strings.Repeat("c", 64), Bytes: 1 << 50})
	}
	b := r.Encode()
	if len(b) > MaxResultBytes {
		t.Fatalf("%d bytes, more than %d", len(b), MaxResultBytes)
	}
	back, err := ParseResult(string(b))
	if err != nil || len(back.Deltas) != MaxDeltas || back.BaseSHA256 != r.BaseSHA256 {
		t.Fatalf("parsed back %+v, %v", back, err)
	}
}

// A leaves file is built on only when it holds one hash per leaf of the
// disk: absent, short, long or not a file, it is not.
func TestLeavesWhole(t *testing.T) {
	const size = 3<<20 + 512 // four leaves, the last short
	side := filepath.Join(t.TempDir(), "disk-0")
	if leavesWhole(side, size) {
		t.Error("an absent leaves file is whole")
	}
	for n, want := range map[int]bool{0: false, 3 * 32: false, 4 * 32: true, 5 * 32: false} {
		if err := os.WriteFile(leavesPath(side), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := leavesWhole(side, size); got != want {
			t.Errorf("a leaves file of %d bytes: whole %v, want %v", n, got, want)
		}
	}
	if err := os.Remove(leavesPath(side)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(leavesPath(side), 0o700); err != nil {
		t.Fatal(err)
	}
	if leavesWhole(side, size) {
		t.Error("a directory is a whole leaves file")
	}
}

// The runner's report of where a Job's time went names each stage that
// took time, the copy's summed over its streams, and nothing else.
func TestTimingString(t *testing.T) {
	var tm Timing
	tm.CopySeconds, tm.ApplySeconds = 1.44, 0.36
	tm.addStages(transfer.Stages{Waiting: 100 * time.Millisecond, Reading: 2500 * time.Millisecond, Syncing: 10 * time.Millisecond})
	tm.addStages(transfer.Stages{Reading: 500 * time.Millisecond, Journal: 200 * time.Millisecond})
	want := "copy 1.4 s (summed over streams: waiting 0.1 s, reading 3.0 s, journal 0.2 s), apply 0.4 s"
	if got := tm.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if (Timing{}).orNil() != nil || tm.orNil() == nil {
		t.Error("orNil: an empty timing is reported, or a timed one is not")
	}
}

// leafRehash writes the hashes of the leaves handed over into the leaves
// file; stopped before it hashed them all, it says so rather than leave
// a leaves file the state would vouch for.
func TestLeafRehash(t *testing.T) {
	const size = 3<<20 + 512 // four leaves, the last short
	dir := t.TempDir()
	target := filepath.Join(dir, "disk.img")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>20)
	}
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	side := filepath.Join(dir, "disk-0")
	c := &chainCopy{s: Spec{Disk: Disk{SizeBytes: size}, Target: Target{Kind: TargetFile, Path: target},
		JournalPath: side + transfer.JournalSuffix}}
	_, want, err := sparsefile.HashPrefixLeaves(t.Context(), target, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, stopped := range []bool{false, true} {
		if err := os.WriteFile(leavesPath(side), make([]byte, len(want)), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		h, err := c.startRehash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if stopped {
			cancel()
		}
		for i := range int64(5) { // leaf 4 is past the disk: not hashed
			h.add(i)
		}
		err = h.finish()
		h.stop()
		cancel()
		got, rerr := os.ReadFile(leavesPath(side))
		switch {
		case rerr != nil:
			t.Fatal(rerr)
		case stopped && err == nil:
			t.Error("a rehash stopped before its leaves were hashed reports no error")
		case !stopped && (err != nil || !bytes.Equal(got, want)):
			t.Errorf("rehash: %v; the leaves file equals the target's leaves: %v", err, bytes.Equal(got, want))
		}
	}
}
