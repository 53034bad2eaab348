package esxisim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// session is one authenticated SSH connection.
type session struct {
	s    *Server
	nc   net.Conn
	user string
	ctx  context.Context
}

func (s *Server) serveConn(nc net.Conn) {
	defer s.wg.Done()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
	}()
	// An unauthenticated peer gets two minutes, like sshd's LoginGraceTime.
	_ = nc.SetDeadline(time.Now().Add(2 * time.Minute))
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.authConfig())
	if err != nil {
		return
	}
	_ = nc.SetDeadline(time.Time{})
	s.stats.conns.Add(1)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	sess := &session{s: s, nc: nc, user: sc.User(), ctx: ctx}

	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		// Global requests (keepalive@openssh.com, tcpip-forward): refuse all,
		// as OpenSSH does for unknown ones and ESXi does for forwarding.
		for r := range reqs {
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		}
	}()
	for nch := range chans {
		if nch.ChannelType() != "session" {
			s.stats.rejected.Add(1)
			_ = nch.Reject(ssh.Prohibited, "open failed")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			sess.serveChannel(ch, creqs)
		}()
	}
	cancel()
	sc.Close()
	cwg.Wait()
}

// serveChannel handles one session channel: exactly one exec is honoured;
// shell, pty-req, subsystem, env and x11 requests are refused.
func (se *session) serveChannel(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	ctx, cancel := context.WithCancel(se.ctx)
	defer cancel()
	execCh := make(chan string, 1)
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		execed := false
		for r := range reqs {
			ok := false
			var p struct{ Command string }
			if r.Type == "exec" && !execed {
				if err := ssh.Unmarshal(r.Payload, &p); err == nil {
					ok, execed = true, true
				}
			} else if r.Type != "exec" {
				se.s.stats.rejected.Add(1)
			}
			// Reply before running, so that the reply always precedes
			// the exit status and channel close.
			if r.WantReply {
				_ = r.Reply(ok, nil)
			}
			if ok {
				execCh <- p.Command
			}
		}
		// The client closed the channel (or the connection died).
		cancel()
	}()
	// Stdin reaches the command through a pipe; once the command has
	// ended, the rest is discarded so that a client writing never blocks.
	stdinR, stdinW := io.Pipe()
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		_, err := io.Copy(stdinW, ch)
		stdinW.CloseWithError(err)
		_, _ = io.Copy(io.Discard, ch)
	}()
	defer func() {
		ch.Close()
		rwg.Wait()
	}()
	var cmd string
	select {
	case cmd = <-execCh:
	case <-ctx.Done():
		return
	}
	se.s.stats.execs.Add(1)
	active := se.s.stats.active.Add(1)
	defer se.s.stats.active.Add(-1)
	for peak := se.s.stats.peak.Load(); active > peak && !se.s.stats.peak.CompareAndSwap(peak, active); peak = se.s.stats.peak.Load() {
	}
	se.s.mu.Lock()
	se.s.cmdLog = append(se.s.cmdLog, LoggedCommand{Time: time.Now(), User: se.user, Command: cmd})
	se.s.mu.Unlock()

	out := &chanWriter{se: se, w: ch, stdout: true}
	errw := &chanWriter{se: se, w: ch.Stderr()}
	status := se.s.runScript(&shellEnv{ctx: ctx, se: se, stdin: stdinR, stdout: out, stderr: errw}, cmd)
	stdinR.CloseWithError(io.EOF)
	if ctx.Err() != nil || out.failed || errw.failed {
		return // connection dropped or client gone: no exit status
	}
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
	_ = ch.CloseWrite()
}

// errDropped is returned by writes after a fault dropped the connection.
var errDropped = errors.New("connection dropped")

// chanWriter writes to a channel's stdout or stderr, counting stdout bytes
// and applying the DropAfterBytes fault.
type chanWriter struct {
	se     *session
	w      io.Writer
	stdout bool
	failed bool
}

func (c *chanWriter) Write(p []byte) (int, error) {
	if c.failed {
		return 0, errDropped
	}
	n := len(p)
	drop := false
	if c.stdout {
		s := c.se.s
		s.mu.Lock()
		if s.dropBytes >= 0 {
			if int64(n) >= s.dropBytes {
				n = int(s.dropBytes)
				drop = true
				s.dropBytes = -1
			} else {
				s.dropBytes -= int64(n)
			}
		}
		s.mu.Unlock()
	}
	written, err := c.w.Write(p[:n])
	if c.stdout {
		c.se.s.stats.stdout.Add(int64(written))
	}
	if err != nil {
		c.failed = true
		return written, err
	}
	if drop {
		c.failed = true
		c.se.nc.Close()
		return written, errDropped
	}
	return written, nil
}
