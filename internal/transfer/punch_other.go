//go:build !linux

package transfer

import "os"

// punch makes [off, off+n) of f read as zeros (written out: no hole
// punching here).
func punch(f *os.File, off, n int64) error { return zeroFill(f, off, n) }

// zeroBlockRange: no zero-out here; chunk writers check zero blocks.
var zeroBlockRange = func(f *os.File, off, n int64) error { return errCannotZero }
