package sparsefile

import (
	"os"
	"syscall"
)

// Flags of fallocate(2).
const (
	fallocKeepSize  = 0x1
	fallocPunchHole = 0x2
)

// Punch turns [off, off+n) of the regular file f into a hole: it reads as
// zeros and takes no space, and the file keeps its size. A file system
// that cannot punch holes gets zeros written instead.
func Punch(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, off, n)
	if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS {
		return ZeroFill(f, off, n)
	}
	return err
}
