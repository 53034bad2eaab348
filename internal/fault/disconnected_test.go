package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// An error's class comes from what it carries, then its errno, then whether
// the connection broke; anything else is Permanent.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name         string
		err          error
		want         Class
		disconnected bool
	}{
		{"nil", nil, Permanent, false},
		{"plain", errors.New("no such VM"), Permanent, false},
		{"carried", fmt.Errorf("read: %w", classed{NeedsHuman}), NeedsHuman, false},
		{"carried wins over its cause", fmt.Errorf("read: %w", &wrapClassed{classed{Permanent}, io.EOF}), Permanent, true},
		{"full disk", &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, NeedsHuman, false},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient, true},
		{"eof", fmt.Errorf("session: %w", io.ErrUnexpectedEOF), Transient, true},
		{"closed", net.ErrClosed, Transient, true},
		{"deadline", context.DeadlineExceeded, Transient, true},
		{"dns", &net.DNSError{Err: "no such host", Name: "esxi", IsNotFound: true}, Transient, true},
		{"bare errno", syscall.ENOENT, Permanent, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got := Disconnected(tc.err); got != tc.disconnected {
				t.Errorf("Disconnected(%v) = %v, want %v", tc.err, got, tc.disconnected)
			}
		})
	}
}

type wrapClassed struct {
	classed
	err error
}

func (e *wrapClassed) Unwrap() error { return e.err }
