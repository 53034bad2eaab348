package guestboot

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// OSInfo is what the guest agent's guest-get-osinfo reports; KubeVirt shows
// the same fields in a VMI's status.guestOSInfo.
type OSInfo struct {
	ID            string `json:"id"`             // "debian"
	Name          string `json:"name"`           // "Debian GNU/Linux"
	PrettyName    string `json:"pretty-name"`    // "Debian GNU/Linux 12 (bookworm)"
	Version       string `json:"version"`        // "12 (bookworm)"
	VersionID     string `json:"version-id"`     // "12"
	KernelRelease string `json:"kernel-release"` // "6.1.0-...-cloud-amd64"
	KernelVersion string `json:"kernel-version"`
	Machine       string `json:"machine"` // "x86_64"
}

// Interface is one network interface as guest-network-get-interfaces
// reports it.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address"`
	IPAddresses     []IPAddress `json:"ip-addresses"`
}

// IPAddress is an address of an Interface.
type IPAddress struct {
	Type    string `json:"ip-address-type"` // "ipv4" or "ipv6"
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// agent talks to qemu-guest-agent over the virtio-serial port's host end,
// a unix socket QEMU listens on. One connection is kept for the guest's
// lifetime with its write side open: QEMU drops a connection whose client
// half-closes it, before any reply. Requests written while no agent runs in
// the guest stay queued and reach the agent when it starts, so every
// command is preceded by a guest-sync with a fresh id, and replies are read
// until that id comes back, discarding stale ones.
type agent struct {
	path string
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

// agentError is an error the agent returned for a command.
type agentError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *agentError) Error() string { return e.Class + ": " + e.Desc }

type agentReply struct {
	Return json.RawMessage `json:"return"`
	Error  *agentError     `json:"error"`
}

// maxReply bounds one reply line.
const maxReply = 1 << 20

// call runs command with args and decodes its "return" into out (when not
// nil). The exchange ends by ctx; a timed-out exchange drops the
// connection so that a later call starts clean.
func (a *agent) call(ctx context.Context, command string, args, out any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.connect(ctx); err != nil {
		return err
	}
	err := a.exchange(ctx, command, args, out)
	var ae *agentError
	if err != nil && !errors.As(err, &ae) {
		a.closeLocked()
	}
	return err
}

func (a *agent) connect(ctx context.Context) error {
	if a.conn != nil {
		return nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", a.path)
	if err != nil {
		return fmt.Errorf("connecting to the guest agent socket: %w", err)
	}
	a.conn = c
	a.r = bufio.NewReaderSize(c, 4096)
	return nil
}

func (a *agent) exchange(ctx context.Context, command string, args, out any) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	// The cancel hook may run after call has dropped the connection: it
	// holds its own reference.
	conn := a.conn
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	id := rand.Int64N(1 << 50)
	if err := a.send("guest-sync", map[string]int64{"id": id}); err != nil {
		return err
	}
	for {
		reply, err := a.read()
		if err != nil {
			return a.wrap(ctx, "guest-sync", err)
		}
		var got int64
		if reply.Error == nil && json.Unmarshal(reply.Return, &got) == nil && got == id {
			break
		}
	}
	if err := a.send(command, args); err != nil {
		return err
	}
	reply, err := a.read()
	if err != nil {
		return a.wrap(ctx, command, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("guest agent %s: %w", command, reply.Error)
	}
	if out != nil {
		if err := json.Unmarshal(reply.Return, out); err != nil {
			return fmt.Errorf("guest agent %s: decoding %s: %w", command, reply.Return, err)
		}
	}
	return nil
}

func (a *agent) send(command string, args any) error {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := a.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("guest agent %s: writing: %w", command, err)
	}
	return nil
}

// read returns the next reply; lines that are not JSON objects (the
// agent's 0xff sync delimiter, noise from a restarting agent) are skipped.
func (a *agent) read() (agentReply, error) {
	for {
		line, err := a.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			line, err = a.readLong(line)
		}
		if err != nil {
			return agentReply{}, err
		}
		var reply agentReply
		if json.Unmarshal(line, &reply) == nil && (reply.Return != nil || reply.Error != nil) {
			return reply, nil
		}
	}
}

func (a *agent) readLong(start []byte) ([]byte, error) {
	buf := append([]byte(nil), start...)
	for len(buf) < maxReply {
		more, err := a.r.ReadSlice('\n')
		buf = append(buf, more...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
	return nil, fmt.Errorf("reply longer than %d bytes", maxReply)
}

func (a *agent) wrap(ctx context.Context, command string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("guest agent %s: no reply: %w", command, ctx.Err())
	}
	return fmt.Errorf("guest agent %s: %w", command, err)
}

func (a *agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closeLocked()
}

func (a *agent) closeLocked() {
	if a.conn != nil {
		_ = a.conn.Close()
		a.conn, a.r = nil, nil
	}
}
