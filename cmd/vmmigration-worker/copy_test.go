//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/loopdev"
)

// sparseContent is data with long zero runs between, edges not aligned to
// chunks: about 5 MiB of data in the disk.
func sparseContent(size int64) []esxisim.Extent {
	return []esxisim.Extent{
		{Offset: 0, Length: mib, Seed: 1},
		{Offset: 5*mib + 4096, Length: 3*mib + 512, Seed: 2},
		{Offset: size / 2, Length: 512, Data: []byte("not all zero")},
		{Offset: size - mib - 1536, Length: mib + 1024, Seed: 3},
	}
}

// A disk copied into a Filesystem-mode claim's disk.img over two streams
// equals the source, keeps its zero runs as holes, keeps its journal
// beside the data, and reports the result, the host key it verified and
// progress with a rate.
func TestCopyIntoFileClaim(t *testing.T) {
	const size = 48 * mib
	h := newHost(t, esxisim.HostPython())
	disk := h.addDisk(t, "web", size, sparseContent(size))
	claim := t.TempDir()
	target := filepath.Join(claim, "disk.img")
	spec := h.writeSpec(t, h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: target}))

	code, lines, res := runInProcess(t, spec)
	if code != copyjob.ExitOK || !res.OK {
		t.Fatalf("exit %d, result %+v", code, res)
	}
	if res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256() {
		t.Errorf("result sha %s, file sha %s, source sha %s", res.SHA256, sha256Of(t, target, size), disk.SHA256())
	}
	if res.Bytes != size || res.ChunksCopied != size/mib || res.ChunksSkipped != 0 || res.ZeroBytes < size-8*mib {
		t.Errorf("result %+v", res)
	}
	if res.HostKeyFingerprint != h.srv.Fingerprint() {
		t.Errorf("host key seen %q, want %q", res.HostKeyFingerprint, h.srv.Fingerprint())
	}
	if used := allocated(t, target); used > 8*mib {
		t.Errorf("disk.img occupies %d bytes for about 5 MiB of data: zero runs were written", used)
	}
	if _, err := os.Stat(filepath.Join(claim, "disk.img.journal")); err != nil {
		t.Errorf("journal beside the data: %v", err)
	}
	var rated bool
	for _, l := range lines[:len(lines)-1] {
		rated = rated || (l.Event == "progress" && l.RateBytesPerSecond > 0 && l.BytesTotal == size)
	}
	if last := lines[len(lines)-1]; last.Event != "result" || last.Result == nil || !reflect.DeepEqual(*last.Result, res) || !rated {
		t.Errorf("stdout: %d lines, last %+v, a progress line with a rate: %v", len(lines), last, rated)
	}
	// Run again: the journal answers, nothing is read.
	h.srv.ResetStats()
	if code, _, again := runInProcess(t, spec); code != 0 || again.SHA256 != res.SHA256 || h.srv.Stats().Execs != 0 {
		t.Errorf("second run: exit %d, %+v, %d commands on the host", code, again, h.srv.Stats().Execs)
	}
}

// staleDevice is a Block-mode claim of size bytes that others used
// before: a loop device full of fill bytes, detached when the test ends.
func staleDevice(t *testing.T, size int64, fill byte) *loopdev.Device {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "claim.raw")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{fill}, int(size)), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := loopdev.Attach(backing)
	if err != nil {
		t.Fatalf("this test writes to a loop device: %v", err)
	}
	t.Cleanup(func() { _ = dev.Detach() })
	return dev
}

// A disk copied into a Block-mode claim (a loop device full of stale
// bytes) reads back equal to the source, with its journal on a file system.
func TestCopyIntoBlockClaim(t *testing.T) {
	const size = 24 * mib
	h := newHost(t, "")
	disk := h.addDisk(t, "db", size, sparseContent(size))
	dev := staleDevice(t, size+mib, 0xa5)
	s := h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetBlock, Path: dev.Path})
	s.JournalPath = filepath.Join(t.TempDir(), "disk.journal")
	code, _, res := runInProcess(t, h.writeSpec(t, s))
	if code != copyjob.ExitOK || res.SHA256 != disk.SHA256() {
		t.Fatalf("exit %d, result %+v, want sha %s", code, res, disk.SHA256())
	}
	if got := sha256Of(t, dev.Path, size); got != disk.SHA256() {
		t.Errorf("the device hashes to %s, the source to %s", got, disk.SHA256())
	}
	if _, err := os.Stat(s.JournalPath); err != nil {
		t.Errorf("journal: %v", err)
	}
}

// chunksRead is the set of 1 MiB chunks the host was asked to read whole
// (not the copy's other, smaller reads).
func chunksRead(h *host) map[int64]bool {
	out := map[int64]bool{}
	for _, r := range h.srv.DDReads() {
		if r.Length == mib && r.Offset%mib == 0 {
			out[r.Offset/mib] = true
		}
	}
	return out
}

// A worker killed with SIGKILL part-way resumes on its next run: the
// copy completes, equals the source, and re-reads at most the chunk each
// stream had in flight.
func TestKilledWorkerResumes(t *testing.T) {
	const size, streams = 40 * mib, 2
	bin := workerBinary(t)
	h := newHost(t, "") // dd reads: one command per chunk
	disk := h.addDisk(t, "app", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 9}})
	target := filepath.Join(t.TempDir(), "disk.img")
	spec := h.writeSpec(t, h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: target}))

	h.srv.SetCommandDelay(40 * time.Millisecond) // about 50 chunks/s over two streams
	cmd := exec.Command(bin, "copy", "-spec", spec)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	landed := waitForChunks(t, cmd, stdout, 8)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	before := chunksRead(h)
	h.srv.SetCommandDelay(0)
	h.srv.ResetStats()

	out, err := exec.Command(bin, "copy", "-spec", spec).Output()
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	res := readResult(t, spec)
	if !res.OK || res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256() {
		t.Fatalf("result %+v; the source's sha is %s", res, disk.SHA256())
	}
	if res.ChunksSkipped < landed || res.ChunksSkipped+res.ChunksCopied != size/mib {
		t.Errorf("result %+v after the kill had %d chunks verified", res, landed)
	}
	var again []int64
	for i := range chunksRead(h) {
		if before[i] {
			again = append(again, i)
		}
	}
	t.Logf("killed with %d chunks verified; the next run skipped %d, copied %d, re-read %v", landed, res.ChunksSkipped, res.ChunksCopied, again)
	// Per stream, the chunk being read or the one being recorded, never
	// both (transfer's runStreams).
	if len(again) > streams {
		t.Errorf("chunks %v were read by both runs: more than one per stream", again)
	}
	if lines := parseLines(t, bytes.NewReader(out)); lines[len(lines)-1].Result == nil {
		t.Error("no result line on stdout")
	}
}

// A worker stopped with SIGTERM (a pod evicted or deleted) stops at once
// and says it was interrupted, with its own exit code.
func TestTerminatedWorkerReportsInterrupted(t *testing.T) {
	const size = 40 * mib
	bin := workerBinary(t)
	h := newHost(t, "")
	disk := h.addDisk(t, "term", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 4}})
	spec := h.writeSpec(t, h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: filepath.Join(t.TempDir(), "disk.img")}))
	h.srv.SetCommandDelay(40 * time.Millisecond)
	cmd := exec.Command(bin, "copy", "-spec", spec)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForChunks(t, cmd, stdout, 4)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != copyjob.ExitInterrupted {
		t.Fatalf("worker: %v, want exit %d", err, copyjob.ExitInterrupted)
	}
	if res := readResult(t, spec); res.OK || res.Class != "interrupted" {
		t.Errorf("result %+v, want interrupted", res)
	}
}

// waitForChunks reads the worker's progress lines until n chunks are
// verified and returns how many are.
func waitForChunks(t *testing.T, cmd *exec.Cmd, stdout interface{ Read([]byte) (int, error) }, n int) int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l copyjob.Line
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Event == "progress" && l.ChunksDone >= n {
				done <- l.ChunksDone
				return
			}
		}
		done <- -1
	}()
	select {
	case got := <-done:
		if got < 0 {
			t.Fatal("the worker ended before it was killed")
		}
		return got
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the worker made no progress")
	}
	return 0
}

// A credential file that others may read is refused before the worker
// connects: a needs-human result and exit code.
func TestCredentialReadableByOthersRefused(t *testing.T) {
	bin := workerBinary(t)
	h := newHost(t, "")
	disk := h.addDisk(t, "pw", 4*mib, nil)
	s := h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: filepath.Join(t.TempDir(), "disk.img")})
	if err := os.Chmod(s.Host.PasswordFile, 0o644); err != nil {
		t.Fatal(err)
	}
	err := exec.Command(bin, "copy", "-spec", h.writeSpec(t, s)).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != copyjob.ExitNeedsHuman {
		t.Fatalf("worker: %v, want exit %d", err, copyjob.ExitNeedsHuman)
	}
	res := readResult(t, filepath.Join(h.dir, "spec.json"))
	if res.OK || res.Class != "needs-human" || !strings.Contains(res.Error, "mode 0644") {
		t.Errorf("result %+v", res)
	}
	if st := h.srv.Stats(); st.Conns != 0 || st.AuthFailures != 0 {
		t.Errorf("the worker logged in with a refused credential: %+v", st)
	}
}

// Hostile disk paths are refused before anything runs, or reach the host
// as one quoted word: no command they hold ever runs.
func TestHostileDiskPaths(t *testing.T) {
	h := newHost(t, "")
	disk := h.addDisk(t, "vm", 4*mib, nil)
	marker := filepath.Join(t.TempDir(), "x")
	for _, tc := range []struct {
		name, path string
		refused    bool
	}{
		{"command substitution", "/vmfs/volumes/datastore1/$(touch " + marker + ")-flat.vmdk", false},
		{"backquotes", "/vmfs/volumes/datastore1/vm/`touch " + marker + "`-flat.vmdk", false},
		{"semicolon and quote", "/vmfs/volumes/datastore1/vm/a'; touch " + marker + "; echo '-flat.vmdk", false},
		{"newline", "/vmfs/volumes/datastore1/vm/a\ntouch " + marker + "\n-flat.vmdk", true},
		{"dot-dot", "/vmfs/volumes/datastore1/../../../tmp/a-flat.vmdk", true},
		{"dot-dot inside", "/vmfs/volumes/datastore1/vm/../vm/vm-flat.vmdk", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.srv.ResetStats()
			s := h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: filepath.Join(t.TempDir(), "disk.img")})
			s.Disk.Path = tc.path
			code, _, res := runInProcess(t, h.writeSpec(t, s))
			if code != copyjob.ExitPermanent || res.OK {
				t.Errorf("exit %d, result %+v: want a permanent failure", code, res)
			}
			cmds := h.srv.Commands()
			if tc.refused && len(cmds) != 0 {
				t.Errorf("a refused path sent %d commands to the host: %q", len(cmds), cmds)
			}
			if !tc.refused {
				assertOneWord(t, cmds, tc.path)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a command from the disk path ran")
			}
		})
	}
}

// assertOneWord checks that the host received the path only quoted, and
// that a real POSIX shell reads that quoted text back as the path, one
// word, without running anything.
func assertOneWord(t *testing.T, cmds []string, path string) {
	t.Helper()
	quoted := esxi.Quote(path)
	found := false
	for _, c := range cmds {
		found = found || strings.Contains(c, quoted)
	}
	if !found {
		t.Fatalf("no command carried the path quoted as %s: %q", quoted, cmds)
	}
	out, err := exec.Command("/bin/sh", "-c", "printf '%s|' "+quoted).Output()
	if err != nil || string(out) != path+"|" {
		t.Errorf("/bin/sh reads %s as %q (%v), want the path as one word", quoted, out, err)
	}
}

// A spec given inline, as a copy Job passes it, copies the same way; one
// that is not valid JSON, or names an unknown field, is a permanent
// failure with its result written.
func TestInlineSpec(t *testing.T) {
	const size = 4 * mib
	h := newHost(t, "")
	disk := h.addDisk(t, "inline", size, sparseContent(size))
	target := filepath.Join(t.TempDir(), "disk.img")
	s := h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: target})
	s.ResultPath = ""
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(t.TempDir(), "termination-log")
	for _, tc := range []struct {
		name, spec string
		code       int
	}{
		{"valid", string(b), copyjob.ExitOK},
		{"not JSON", "{", copyjob.ExitPermanent},
		{"unknown field", `{"hots":{}}`, copyjob.ExitPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"copy", "-spec-json", tc.spec, "-result", result}, &stdout, &stderr)
			got, err := os.ReadFile(result)
			if err != nil {
				t.Fatal(err)
			}
			var res copyjob.Result
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatalf("result %q: %v", got, err)
			}
			if code != tc.code || res.OK != (tc.code == copyjob.ExitOK) {
				t.Fatalf("exit %d, result %+v, want exit %d", code, res, tc.code)
			}
			if res.OK && (res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256()) {
				t.Errorf("result %+v, source sha %s", res, disk.SHA256())
			}
			if !res.OK && !strings.Contains(res.Error, "-spec-json") {
				t.Errorf("error %q does not name -spec-json", res.Error)
			}
		})
	}
}
