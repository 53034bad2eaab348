//go:build !linux

package sparsefile

import "os"

// Punch makes [off, off+n) of f read as zeros (written out: no hole
// punching here).
func Punch(f *os.File, off, n int64) error { return ZeroFill(f, off, n) }
