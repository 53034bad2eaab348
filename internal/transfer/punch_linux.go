package transfer

import (
	"os"
	"syscall"
)

// Flags of fallocate(2).
const (
	fallocKeepSize  = 0x1
	fallocPunchHole = 0x2
)

// punch turns [off, off+n) of f into a hole: it reads as zeros and takes no
// space, and the file keeps its size.
func punch(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, off, n)
	if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS {
		return zeroFill(f, off, n)
	}
	return err
}
