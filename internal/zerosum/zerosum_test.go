package zerosum

import (
	"crypto/sha256"
	"testing"
)

// The cached digest of n zeros is the digest of n zeros, for lengths
// around the page size, zero included, also once the cache is full.
func TestSHA256(t *testing.T) {
	for i, n := range []int64{0, 1, 511, 1 << 20, 1<<20 + 1, 3<<20 - 7} {
		want := sha256.Sum256(make([]byte, n))
		for round := 0; round < 2; round++ {
			if got := SHA256(n); got != want {
				t.Fatalf("case %d round %d: SHA256(%d) = %x, want %x", i, round, n, got, want)
			}
		}
	}
	for n := int64(0); n < maxCached+10; n++ {
		if got, want := SHA256(n*512), sha256.Sum256(make([]byte, n*512)); got != want {
			t.Fatalf("SHA256(%d) = %x, want %x", n*512, got, want)
		}
	}
	if len(cache) > maxCached {
		t.Fatalf("cache holds %d lengths, more than %d", len(cache), maxCached)
	}
}
