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

// zeroBlockRange makes [off, off+n) of a block device read as zeros
// without writing it: fallocate(PUNCH_HOLE|KEEP_SIZE) on a block device is
// the kernel's zero-out without fallback (unmap or a write-zeroes offload,
// each guaranteed to read back zeros). errCannotZero when the device has
// neither. off and n are multiples of the device's logical block size.
// A variable so that tests can take the device's refusal.
var zeroBlockRange = func(f *os.File, off, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), fallocPunchHole|fallocKeepSize, off, n)
	switch err {
	case nil:
		return nil
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.ENODEV, syscall.EINVAL:
		return errCannotZero
	}
	return err
}
