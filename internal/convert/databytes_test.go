package convert

import (
	"os"
	"path/filepath"
	"testing"
)

// DataBytes counts the bytes of data in a sparse file, not its holes, and
// a file without holes is all data.
func TestDataBytes(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	const block = 1 << 20
	if err := f.Truncate(64 * block); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 10 * block, 63 * block} {
		if _, err := f.WriteAt(make([]byte, block), off); err != nil { // zeros written are data
			t.Fatal(err)
		}
	}
	f.Close()
	got, err := DataBytes(sparse)
	if err != nil {
		t.Fatal(err)
	}
	// File systems allocate in their own blocks: allow one extra block
	// of rounding per extent.
	if got < 3*block || got > 3*block+3*64<<10 {
		t.Errorf("DataBytes(sparse) = %d, want about %d (three 1 MiB extents in a 64 MiB file)", got, 3*block)
	}
	dense := filepath.Join(dir, "dense")
	if err := os.WriteFile(dense, make([]byte, 3*block+5), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := DataBytes(dense); err != nil || got != 3*block+5 {
		t.Errorf("DataBytes(dense) = %d, %v; want %d", got, err, 3*block+5)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := DataBytes(empty); err != nil || got != 0 {
		t.Errorf("DataBytes(empty) = %d, %v", got, err)
	}
}
