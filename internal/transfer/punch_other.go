//go:build !linux

package transfer

import "os"

// zeroBlockRange: no zero-out here; chunk writers check zero blocks.
var zeroBlockRange = func(f *os.File, off, n int64) error { return errCannotZero }
