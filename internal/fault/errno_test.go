package fault

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestOfErrno(t *testing.T) {
	pathErr := func(e syscall.Errno) error { return &os.PathError{Op: "write", Path: "/var/tmp/disk.img", Err: e} }
	for _, tc := range []struct {
		name   string
		err    error
		want   Class
		ok     bool
		advice string
	}{
		{"disk full", pathErr(syscall.ENOSPC), NeedsHuman, true, "free space"},
		{"quota", fmt.Errorf("copy: %w", pathErr(syscall.EDQUOT)), NeedsHuman, true, "quota"},
		{"read-only", pathErr(syscall.EROFS), NeedsHuman, true, "read-only"},
		{"bare errno", syscall.ENOSPC, NeedsHuman, true, "free space"},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient, true, ""},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Transient, true, ""},
		{"no errno", errors.New("boom"), Permanent, false, ""},
		{"unlisted errno", pathErr(syscall.ENOENT), Permanent, false, ""},
		{"nil", nil, Permanent, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := OfErrno(tc.err)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("OfErrno(%v) = %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
			}
			adv := ErrnoAdvice(tc.err)
			if tc.advice == "" && adv != "" || !strings.Contains(adv, tc.advice) {
				t.Fatalf("ErrnoAdvice(%v) = %q; want it to mention %q", tc.err, adv, tc.advice)
			}
		})
	}
}

// A syscall.Errno satisfies net.Error: that is why the classification of
// errnos must not be left to a net.Error check.
func TestErrnoIsANetError(t *testing.T) {
	var ne net.Error
	if !errors.As(error(syscall.ENOSPC), &ne) {
		t.Fatal("syscall.Errno no longer satisfies net.Error; OfErrno's doc comment is out of date")
	}
}
