//go:build unix

package transfer

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking advisory lock on f, released by
// the returned function or when the process dies (so kill -9 never leaves a
// stale lock behind).
func lockFile(f *os.File) (func(), error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
