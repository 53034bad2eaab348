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
// that cannot punch holes, or a block device that cannot zero the range
// without writing it, gets zeros written instead.
func Punch(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, off, n)
	// A block device refuses what it cannot zero without writing
	// (EOPNOTSUPP), or a range not aligned to its logical blocks
	// (EINVAL), such as one 512-byte grain on a 4 KiB-sector device.
	if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS || err == syscall.EINVAL || err == syscall.ENODEV {
		return ZeroFill(f, off, n)
	}
	return err
}
