package testcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ToolBinary finds a test program by name and version, and says how to
// build it when it is missing or of another version.
func TestToolBinary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvTestBin, dir)
	if _, err := ToolBinary("cdi-uploadserver", CDIUploadServerVersion); err == nil ||
		!strings.Contains(err.Error(), "cdi-uploadserver "+CDIUploadServerVersion+" is missing") || !strings.Contains(err.Error(), `"make testbin"`) {
		t.Errorf("missing: %v, want it missing and how to build it", err)
	}
	p := filepath.Join(dir, "cdi-uploadserver")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := ToolBinary("cdi-uploadserver", CDIUploadServerVersion); err != nil || got != p {
		t.Errorf("unstamped: %q, %v; want %q", got, err, p)
	}
	if err := os.WriteFile(p+".version", []byte("v1.64.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ToolBinary("cdi-uploadserver", CDIUploadServerVersion); err == nil || !strings.Contains(err.Error(), "is v1.64.0, want "+CDIUploadServerVersion) {
		t.Errorf("another version: %v, want it refused", err)
	}
	if err := os.WriteFile(p+".version", []byte(CDIUploadServerVersion+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ToolBinary("cdi-uploadserver", CDIUploadServerVersion); err != nil || got != p {
		t.Errorf("stamped: %q, %v; want %q", got, err, p)
	}
}
