package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
)

// The image build checks its worker with `version` and `--help`; a pod
// started with a wrong command line must exit 64 and write no result.
func TestCommandLine(t *testing.T) {
	old := version
	version = "1.2.3"
	t.Cleanup(func() { version = old })

	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{[]string{"version"}, 0, "vmmigration-worker 1.2.3\n", ""},
		{[]string{"--help"}, 0, usage + "\n", ""},
		{[]string{"-h"}, 0, usage + "\n", ""},
		{[]string{"help"}, 0, usage + "\n", ""},
		{nil, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"version", "extra"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"convert"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"convert", "-result", "/dev/termination-log"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"convert", "-spec-json", "{}", "extra"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"translate", "-spec-json", "{}"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"copy"}, copyjob.ExitUsage, "", usage + "\n"},
		{[]string{"copy", "-spec", "a.json", "-spec-json", "{}"}, copyjob.ExitUsage, "", usage + "\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d", code, tt.wantCode)
			}
			if got := stdout.String(); got != tt.wantStdout {
				t.Errorf("stdout: got %q, want %q", got, tt.wantStdout)
			}
			if got := stderr.String(); got != tt.wantStderr {
				t.Errorf("stderr: got %q, want %q", got, tt.wantStderr)
			}
		})
	}
}
