// Package zerosum gives the SHA-256 of a run of zero bytes, computed once
// per length: a thin disk's copy meets the same all-zero chunk length over
// and over, and each of its checks would otherwise hash the zeros again.
package zerosum

import (
	"crypto/sha256"
	"sync"
)

// maxCached bounds the lengths remembered; further lengths are hashed
// each time (a copy uses one chunk length and the tail of its last chunk).
const maxCached = 64

var (
	mu    sync.Mutex
	cache = map[int64][32]byte{}
	page  [1 << 20]byte
)

// SHA256 returns the SHA-256 of n zero bytes (n >= 0).
func SHA256(n int64) [32]byte {
	mu.Lock()
	sum, ok := cache[n]
	mu.Unlock()
	if ok {
		return sum
	}
	h := sha256.New()
	Write(h, n)
	h.Sum(sum[:0])
	mu.Lock()
	if len(cache) < maxCached {
		cache[n] = sum
	}
	mu.Unlock()
	return sum
}

// Write writes n zero bytes to w (a hash, typically); a w that takes
// zeros without being shown them (a disk digest's WriteZeros) gets them so.
func Write(w interface{ Write([]byte) (int, error) }, n int64) {
	if z, ok := w.(interface{ WriteZeros(int64) }); ok {
		z.WriteZeros(n)
		return
	}
	for n > 0 {
		k := min(n, int64(len(page)))
		w.Write(page[:k])
		n -= k
	}
}
