package fault

import (
	"errors"
	"syscall"
)

// OfErrno classifies err by the operating-system error number it wraps
// (through *os.PathError, *os.SyscallError, *net.OpError, ...), the one
// place that decides what a local or socket errno means:
//
//   - ENOSPC, EDQUOT (disk or quota full), EROFS (filesystem read-only,
//     often remounted after I/O errors), EIO, EACCES and EPERM are
//     NeedsHuman: retrying writes to a full or broken filesystem only fails
//     again. [ErrnoAdvice] says what to do.
//   - ECONNRESET, ECONNREFUSED, ECONNABORTED, EPIPE, ETIMEDOUT,
//     EHOSTUNREACH, ENETUNREACH, ENETDOWN, EINTR and EAGAIN are Transient.
//   - ENOMEM, EMFILE and ENFILE (this machine out of memory or file
//     descriptors) are Transient: they usually pass once other work ends.
//
// ok is false when err wraps no errno, or one not listed: the caller then
// decides by other means. Note that syscall.Errno satisfies net.Error, so
// callers must consult OfErrno before treating any net.Error as a dropped
// connection.
func OfErrno(err error) (Class, bool) {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return Permanent, false
	}
	switch errno {
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO, syscall.EACCES, syscall.EPERM:
		return NeedsHuman, true
	case syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.EINTR, syscall.EAGAIN,
		syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE:
		return Transient, true
	}
	return Permanent, false
}

// ErrnoAdvice says what a person should do about err's errno when
// [OfErrno] classifies it NeedsHuman, and "" otherwise.
func ErrnoAdvice(err error) string {
	var errno syscall.Errno
	if c, ok := OfErrno(err); !ok || c != NeedsHuman || !errors.As(err, &errno) {
		return ""
	}
	switch errno {
	case syscall.ENOSPC:
		return "the filesystem is full: free space (or give the work a larger volume) and retry"
	case syscall.EDQUOT:
		return "the disk quota is exhausted: free space or raise the quota, then retry"
	case syscall.EROFS:
		return "the filesystem is read-only (it may have been remounted read-only after I/O errors): fix or remount the filesystem, then retry"
	case syscall.EIO:
		return "the storage reported an I/O error: check the disk and the filesystem, then retry"
	default:
		return "permission denied: give this process access to the file or directory, then retry"
	}
}
