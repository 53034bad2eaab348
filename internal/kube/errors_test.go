package kube

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
)

// Local errnos are classified by what they are (fault.OfErrno), not as
// network trouble: a full disk while staging an upload needs a human.
func TestClassifyErrno(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Class
	}{
		{"disk full", fmt.Errorf("staging upload: %w", &os.PathError{Op: "write", Path: "/var/tmp/x", Err: syscall.ENOSPC}), NeedsHuman},
		{"quota", &os.PathError{Op: "write", Path: "/var/tmp/x", Err: syscall.EDQUOT}, NeedsHuman},
		{"read-only", &os.PathError{Op: "open", Path: "/var/tmp/x", Err: syscall.EROFS}, NeedsHuman},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Transient},
		{"tunnel closed", &url.Error{Op: "Post", URL: "https://127.0.0.1:43213/v1beta1/upload-async", Err: &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}}, Transient},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
