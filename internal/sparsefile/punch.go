package sparsefile

import "os"

// zeroBlock is what ZeroFill writes.
var zeroBlock [1 << 16]byte

// ZeroFill writes zeros over [off, off+n) of f.
func ZeroFill(f *os.File, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := f.WriteAt(zeroBlock[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}
