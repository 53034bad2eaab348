package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "modroot", "modroot.go")); err != nil {
		t.Fatalf("Find = %s, which does not hold this package: %v", root, err)
	}
	// A folder with a go.mod of another module (tools/...) is passed over.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(other)
	if got, err := Find(); err == nil {
		t.Fatalf("Find from another module = %s, want an error", got)
	}
}
