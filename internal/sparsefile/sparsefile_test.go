package sparsefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

const mib = 1 << 20

// sparseFile is a 16 MiB file, all holes but a byte 7 at each offset.
func sparseFile(t *testing.T, offs ...int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(16 * mib); err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		if _, err := f.WriteAt([]byte{7}, off); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// The spans Walk reports cover the range exactly, in order, and every
// byte of a hole span reads as zero while every written byte lies in a
// data span; a file with holes reports some.
func TestWalk(t *testing.T) {
	offs := []int64{0, 5*mib + 3, 16*mib - 1}
	f := sparseFile(t, offs...)
	written := map[int64]bool{}
	for _, off := range offs {
		written[off] = true
	}
	for _, r := range [][2]int64{{0, 16 * mib}, {mib, 6 * mib}, {5*mib + 3, 5*mib + 4}, {8 * mib, 9 * mib}} {
		next, holes := r[0], 0
		err := Walk(f, r[0], r[1], func(off, n int64, data bool) error {
			if off != next || n <= 0 || off+n > r[1] {
				t.Fatalf("range %v: span [%d, +%d) after %d", r, off, n, next)
			}
			next = off + n
			if !data {
				holes++
				b := make([]byte, n)
				if _, err := f.ReadAt(b, off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, make([]byte, n)) {
					t.Fatalf("range %v: hole [%d, +%d) holds data", r, off, n)
				}
				for w := range written {
					if w >= off && w < off+n {
						t.Fatalf("range %v: written byte %d in hole [%d, +%d)", r, w, off, n)
					}
				}
			}
			return nil
		})
		if err != nil || next != r[1] {
			t.Fatalf("range %v: %v, covered up to %d", r, err, next)
		}
		if r == [2]int64{0, 16 * mib} && holes == 0 {
			t.Fatal("a 16 MiB file with three bytes written reported no hole")
		}
	}
}

// WalkFile walks the whole file at path and reads it: the data spans hold
// every written byte, and a missing file is an error.
func TestWalkFile(t *testing.T) {
	offs := []int64{0, 5*mib + 3, 16*mib - 1}
	f := sparseFile(t, offs...)
	var covered, sevens int64
	err := WalkFile(f.Name(), func(g *os.File, off, n int64, data bool) error {
		if off != covered {
			t.Fatalf("span at %d after %d", off, covered)
		}
		covered += n
		if data {
			b := make([]byte, n)
			if _, err := g.ReadAt(b, off); err != nil {
				return err
			}
			sevens += int64(bytes.Count(b, []byte{7}))
		}
		return nil
	})
	if err != nil || covered != 16*mib || sevens != int64(len(offs)) {
		t.Fatalf("WalkFile: %v, covered %d, read %d written bytes; want nil, %d, %d", err, covered, sevens, 16*mib, len(offs))
	}
	if err := WalkFile(filepath.Join(t.TempDir(), "missing"), func(*os.File, int64, int64, bool) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WalkFile of a missing file: %v, want not exist", err)
	}
}

// HoleLen agrees with Walk's first span: the hole's length when the range
// starts in a hole, 0 when it starts with data; past the end of the file
// is a hole.
func TestHoleLen(t *testing.T) {
	f := sparseFile(t, 8*mib)
	for _, r := range [][2]int64{{0, 16 * mib}, {2 * mib, 3 * mib}, {8 * mib, 9 * mib}, {8*mib + 1, 16 * mib}, {12 * mib, 20 * mib}, {20 * mib, 30 * mib}, {5, 5}} {
		var first int64
		if r[0] < r[1] {
			if err := Walk(f, r[0], r[1], func(off, n int64, data bool) error {
				if !data {
					first = n
				}
				return errStop
			}); err != errStop {
				t.Fatal(err)
			}
		}
		got := HoleLen(f, r[0], r[1])
		if got != first {
			t.Fatalf("HoleLen(%v) = %d, Walk's first hole %d", r, got, first)
		}
		if b := make([]byte, got); got > 0 {
			n, _ := f.ReadAt(b, r[0])
			if !bytes.Equal(b[:n], make([]byte, n)) {
				t.Fatalf("HoleLen(%v) = %d covers data", r, got)
			}
		}
	}
	if HoleLen(f, 8*mib, 16*mib) != 0 {
		t.Fatal("a range starting on written data is reported as a hole")
	}
}

var errStop = errors.New("stop")
