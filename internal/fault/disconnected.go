package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// Disconnected reports whether err means the connection to a remote system
// broke or timed out rather than the remote system refusing the work: an
// end of stream, a reset or closed connection, an unreachable host, a
// deadline or cancellation, or any other network error. Reading again on a
// new connection may succeed.
//
// A bare syscall.Errno satisfies net.Error too; only a real network error
// (net.OpError, a dial or DNS error) counts, so that a local errno is left
// to [OfErrno].
func Disconnected(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		_, isErrno := ne.(syscall.Errno)
		return !isErrno
	}
	return false
}

// Classify returns the class of an error from a remote system: the one it
// carries ([Of]), else its errno's ([OfErrno]), else Transient when the
// connection broke ([Disconnected]), else Permanent, so that nothing
// unrecognised is retried blindly. nil is Permanent.
func Classify(err error) Class {
	if err == nil {
		return Permanent
	}
	if c, ok := Of(err); ok {
		return c
	}
	if c, ok := OfErrno(err); ok {
		return c
	}
	if Disconnected(err) {
		return Transient
	}
	return Permanent
}
