package loopdev

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A file attached as a loop device reads and writes through the device.
func TestAttachWritesThroughToTheFile(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Attach(backing)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	defer func() {
		if err := d.Detach(); err != nil {
			t.Error(err)
		}
	}()
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("loop"), 1024)
	if _, err := f.WriteAt(want, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[4096:4096+len(want)], want) {
		t.Error("the data written to the device is not in the backing file")
	}
}
