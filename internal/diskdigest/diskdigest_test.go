package diskdigest

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// reference is the definition, computed the plain way: every leaf hashed
// whole, zeros included.
func reference(b []byte) string {
	outer := sha256.New()
	for off := 0; off < len(b); off += LeafSize {
		leaf := sha256.Sum256(b[off:min(off+LeafSize, len(b))])
		outer.Write(leaf[:])
	}
	return hex.EncodeToString(outer.Sum(nil))
}

// content is a disk of n bytes with data in a few places and zeros in
// between, some of them inside leaves that hold data.
func content(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	if n == 0 {
		return b
	}
	for range 6 {
		off := rng.IntN(n)
		end := min(off+rng.IntN(3*LeafSize/2)+1, n)
		for i := off; i < end; i++ {
			b[i] = byte(rng.IntN(255) + 1)
		}
	}
	return b
}

// Written in pieces of any size, zeros as bytes or as WriteZeros, with
// the state marshaled and restored anywhere, the digest is the
// definition's; Sum leaves the state as it was.
func TestHasherMatchesTheDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{0, 1, 512, LeafSize - 1, LeafSize, LeafSize + 512, 5*LeafSize + 4096, 8 * LeafSize} {
		b := content(rng, n)
		want := reference(b)
		for trial := range 4 {
			h := New()
			for off := 0; off < n; {
				k := min(rng.IntN(LeafSize+LeafSize/2)+1, n-off)
				part := b[off : off+k]
				if trial%2 == 1 && allZero(part) {
					h.WriteZeros(int64(k))
				} else {
					h.Write(part)
				}
				if rng.IntN(3) == 0 {
					_ = h.Sum(nil)
					state, _ := h.MarshalBinary()
					h = New()
					if err := h.UnmarshalBinary(state); err != nil {
						t.Fatal(err)
					}
				}
				off += k
			}
			if got := h.Hex(); got != want {
				t.Errorf("%d bytes, trial %d: %s, want %s", n, trial, got, want)
			}
			if again := h.Hex(); again != want {
				t.Errorf("%d bytes: a second Sum gives %s", n, again)
			}
		}
		if got := Bytes(b); got != want {
			t.Errorf("Bytes of %d bytes: %s, want %s", n, got, want)
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// A state that is not one is refused, and leaves the Hasher as it was.
func TestUnmarshalRefusesGarbage(t *testing.T) {
	h := New()
	h.Write([]byte("abc"))
	want := h.Hex()
	good, _ := h.MarshalBinary()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("vmmdd9"), good[6:]...),
		"truncated": good[:len(good)-10],
		"position":  append(append(append([]byte{}, good[:6]...), 0xff, 0, 0, 0, 0, 0, 0, 0), good[14:]...),
	} {
		if err := h.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if got := h.Hex(); got != want {
			t.Errorf("%s: the state changed to %s", name, got)
		}
	}
}

// The package's comment shows how to compute the digest by hand with GNU
// coreutils; that command gives the same digest.
func TestTheCommandInTheDocs(t *testing.T) {
	b := content(rand.New(rand.NewPCG(3, 5)), 3*LeafSize+1000)
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", "split -b 1M --filter='sha256sum | cut -c1-64 | tr a-f A-F | basenc --base16 -d' \"$1\" | sha256sum", "sh", p).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := strings.Fields(string(out))[0], Bytes(b); got != want {
		t.Errorf("the command gives %s, the package %s", got, want)
	}
}

func BenchmarkThinDisk(b *testing.B) {
	data := make([]byte, LeafSize)
	for i := range data {
		data[i] = byte(i)
	}
	b.SetBytes(64 * LeafSize)
	for b.Loop() {
		h := New()
		h.Write(data)
		h.WriteZeros(63 * LeafSize)
		_ = h.Sum(nil)
	}
}
