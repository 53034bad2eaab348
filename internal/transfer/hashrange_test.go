package transfer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// hashRange hashes what reading the range returns, for ranges that start
// and end in holes, in data, across both, and over a file with no holes;
// a range past the file's end is an error.
func TestHashRange(t *testing.T) {
	const mib = 1 << 20
	path := filepath.Join(t.TempDir(), "staged")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(16 * mib); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		off int64
		n   int
		b   byte
	}{{0, 4096, 1}, {3 * mib, mib + 5, 2}, {8*mib - 100, 200, 3}, {16*mib - 10, 10, 4}} {
		b := make([]byte, w.n)
		for i := range b {
			b[i] = w.b + byte(i)
		}
		if _, err := f.WriteAt(b, w.off); err != nil {
			t.Fatal(err)
		}
	}
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 16 * mib}, {0, 1}, {1 * mib, 1 * mib}, {2 * mib, 3 * mib}, {3*mib + 7, 5 * mib}, {8*mib - 50, 8*mib + 50}, {16*mib - 1, 1}} {
		h := diskdigest.New()
		if err := hashRange(h, f, r[0], r[1]); err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		if got, want := h.Sum(nil), diskdigest.Sum(content[r[0]:r[0]+r[1]]); string(got) != string(want[:]) {
			t.Errorf("range %v: hash differs from the content's", r)
		}
	}
	if err := hashRange(diskdigest.New(), f, 15*mib, 2*mib); err == nil {
		t.Error("a range past the end of the file was hashed")
	}
	dense := filepath.Join(t.TempDir(), "dense")
	if err := os.WriteFile(dense, content[:2*mib], 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(dense)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h := diskdigest.New()
	if err := hashRange(h, g, mib, mib); err != nil {
		t.Fatal(err)
	}
	if want := diskdigest.Sum(content[mib : 2*mib]); string(h.Sum(nil)) != string(want[:]) {
		t.Error("dense file: hash differs")
	}
}
