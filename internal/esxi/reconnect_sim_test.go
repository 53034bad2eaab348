package esxi

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// A host that never answered and refuses connections gets the "enable
// SSH" advice; the same refusal after the host has answered means it is
// rebooting, which is worth retrying.
func TestSimRefusedBeforeAndAfterAnswering(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	addr := env.srv.Addr()
	c := env.client(t)
	ctx := ctxT(t)
	if _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}

	// The host reboots: its listener goes away and comes back on the same port.
	env.srv.StopListening()
	_, err := c.Version(ctx)
	wantErr(t, err, ErrConnection, Transient, "may be rebooting")
	if strings.Contains(err.Error(), "enable the SSH service") {
		t.Errorf("a host that answered before is told to enable SSH: %v", err)
	}
	if err := env.srv.Start(addr); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("after the host came back: %v", err)
	}

	// Long after the host last answered, a refusal is a disabled SSH
	// service again.
	env.srv.StopListening()
	c.mu.Lock()
	c.rebootWindow = time.Millisecond
	c.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	_, err = c.Version(ctx)
	wantErr(t, err, ErrSSHUnavailable, NeedsHuman, "enable the SSH service")

	// A fresh client for a host that has never answered it.
	fresh := env.client(t)
	_, err = fresh.Version(ctx)
	wantErr(t, err, ErrSSHUnavailable, NeedsHuman, "enable the SSH service")
}

// A host that answered and now resets connections during the handshake is
// also rebooting, not misconfigured.
func TestSimResetAfterAnswering(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	addr := env.srv.Addr()
	c := env.client(t)
	ctx := ctxT(t)
	if _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}
	env.srv.StopListening()
	// Something accepts on the port and closes at once (sshd starting).
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Close()
		}
	}()
	_, err = c.Version(ctx)
	wantErr(t, err, ErrConnection, Transient, "may be rebooting")
}

// A full local disk while a command's output is written here is not a
// dropped connection: retrying cannot help.
func TestSimLocalDiskFull(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	_, files, err := env.srv.AddVM(esxisim.VMSpec{Name: "data", Disks: []esxisim.DiskSpec{{CapacityBytes: 4 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	full := &failingWriter{after: 1 << 20, err: &os.PathError{Op: "write", Path: "/var/tmp/disk.img", Err: syscall.ENOSPC}}
	_, err = c.ReadRange(ctxT(t), files.Disks[0].Flat, 0, 4<<20, full)
	wantErr(t, err, nil, NeedsHuman, "free space")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("the errno is lost: %v", err)
	}
}

type failingWriter struct {
	n, after int
	err      error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.after {
		return 0, w.err
	}
	w.n += len(p)
	return len(p), nil
}

func TestClassifyLocalErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Class
	}{
		{&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, NeedsHuman},
		{syscall.EDQUOT, NeedsHuman},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, NeedsHuman},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient},
		{context.DeadlineExceeded, Transient},
		{syscall.ENOENT, Permanent},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if isNetworkError(syscall.ENOSPC) {
		t.Error("ENOSPC counts as a dropped connection")
	}
}

// The host powers the VM off and the connection drops before the answer:
// the caller sees a transient connection error, the VM is off, and a retry
// (observing first, as PowerOff does) succeeds without a second power-off.
func TestSimPowerOffReplyLost(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	id, _, err := env.srv.AddVM(esxisim.VMSpec{Name: "web", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}, Power: esxisim.PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	ctx := ctxT(t)
	env.srv.DropAfterRunning("power.off", 1)
	err = c.PowerOff(ctx, id)
	wantErr(t, err, ErrConnection, Transient)
	if st, _ := env.srv.PowerState(id); st != esxisim.PoweredOff {
		t.Fatalf("power state %v: the command should have run", st)
	}
	if env.srv.LostReplies() != 1 {
		t.Errorf("LostReplies() = %d, want 1", env.srv.LostReplies())
	}
	if st, err := c.PowerState(ctx, id); err != nil || st != PoweredOff {
		t.Errorf("after the lost reply: %v, %v; want poweredOff", st, err)
	}
	if err := c.PowerOff(ctx, id); err != nil {
		t.Errorf("retried power.off: %v", err)
	}
}
