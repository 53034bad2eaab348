//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob/convertjobtest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
)

// convertSpec is a conversion of two 4 MiB disks, as the conversion Job
// passes it, and the disks' content before.
func convertSpec(t *testing.T) (string, convertjob.Spec, [][]byte) {
	t.Helper()
	s := convertjob.Spec{Disks: convertjobtest.Claims(t, 2, 4*mib, 3)}
	var before [][]byte
	for _, d := range s.Disks {
		b, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, b)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), s, before
}

// readConvertResult reads a conversion's termination message as the
// runner does.
func readConvertResult(t *testing.T, p string) convertjob.Result {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > copyjob.MaxResultBytes {
		t.Errorf("result of %d bytes does not fit a termination message", len(b))
	}
	r, err := convertjob.ParseResult(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The conversion Job's command line converts the guest in the claims,
// leaves its result where it is told and on stdout's last line, and
// answers a second time from the claims; a spec that cannot be read is a
// permanent failure with its result written.
func TestConvertCommand(t *testing.T) {
	fake := convertjobtest.Install(t, convertjobtest.Options{})
	spec, s, before := convertSpec(t)
	result := filepath.Join(t.TempDir(), "termination-log")
	for i, wantReused := range []bool{false, true} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"convert", "-spec-json", spec, "-result", result}, &stdout, &stderr)
		res := readConvertResult(t, result)
		if code != copyjob.ExitOK || !res.OK || res.Reused != wantReused || len(res.Disks) != 2 || stderr.Len() > 0 {
			t.Fatalf("run %d: exit %d, result %+v, stderr %q", i, code, res, stderr.String())
		}
		if fromLog, err := convertjob.ParseResult(stdout.String()); err != nil || !slices.Equal(fromLog.Disks, res.Disks) {
			t.Errorf("run %d: stdout's result %+v, %v", i, fromLog, err)
		}
		for j, d := range s.Disks {
			got, err := os.ReadFile(d.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, convertjobtest.Apply(before[j], j)) || sha256Of(t, d.Path, 4*mib) != res.Disks[j].SHA256 {
				t.Errorf("run %d: disk %d is not converted as the result says", i, j)
			}
		}
	}
	if n := fake.Runs(t); n != 1 {
		t.Errorf("virt-v2v-in-place ran %d times", n)
	}

	for _, bad := range []string{"{", `{"disks":[{"path":"/disks/0/disk.img","size_bytes":1}],"stall":1}`, `{"disks":[]}`} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"convert", "-spec-json", bad, "-result", result}, &stdout, &stderr)
		res := readConvertResult(t, result)
		if code != copyjob.ExitPermanent || res.Reason != convertjob.ReasonBadSpec || !strings.Contains(res.Error, "-spec-json") ||
			!strings.Contains(stdout.String(), `"event":"result"`) {
			t.Errorf("spec %s: exit %d, result %+v, stdout %q", bad, code, res, stdout.String())
		}
	}
}

// A conversion worker stopped with SIGTERM while virt-v2v writes says it
// was interrupted, with its own exit code, and leaves the images as they
// were.
func TestTerminatedConversion(t *testing.T) {
	bin := workerBinary(t)
	fake := convertjobtest.Install(t, convertjobtest.Options{Then: "sleep 600"})
	spec, s, before := convertSpec(t)
	result := filepath.Join(t.TempDir(), "termination-log")
	cmd := exec.Command(bin, "convert", "-spec-json", spec, "-result", result)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitWritten(t.Context()); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != copyjob.ExitInterrupted {
		t.Fatalf("worker: %v, want exit %d", err, copyjob.ExitInterrupted)
	}
	if res := readConvertResult(t, result); res.Class != "interrupted" || res.Reason != convertjob.ReasonInterrupted {
		t.Errorf("result %+v, want interrupted", res)
	}
	if l, ok := convertjob.LastStage(stdout.Bytes()); !ok || l.Stage != convertjob.StageConverting {
		t.Errorf("last stage %+v, want converting", l)
	}
	for i, d := range s.Disks {
		got, err := os.ReadFile(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, before[i]) {
			t.Errorf("disk %d changed", i)
		}
		if _, err := os.Stat(convertjob.Overlay(d.Path)); !os.IsNotExist(err) {
			t.Errorf("disk %d's overlay is left: %v", i, err)
		}
	}
}
