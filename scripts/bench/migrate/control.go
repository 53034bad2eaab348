package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// controlCommands counts the command lines served by serveControl.
var controlCommands atomic.Int64

// serveControl answers scripts/bench/esxitool on ln until it closes: each
// connection carries one command line, run by the simulated host (see
// esxitool for the exchange). The command's context ends when the tool
// hangs up (its ssh session ended).
func serveControl(s *esxisim.Server, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serveControlConn(s, c)
	}
}

func serveControlConn(s *esxisim.Server, c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req struct {
		Args []string `json:"args"`
	}
	if err := json.Unmarshal(line, &req); err != nil || len(req.Args) == 0 {
		return
	}
	controlCommands.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Nothing more is sent: a read ends when the tool hangs up.
		_, _ = io.Copy(io.Discard, r)
		cancel()
	}()
	var mu sync.Mutex
	status := s.Run(ctx, req.Args, &frameWriter{c: c, mu: &mu, kind: '1'}, &frameWriter{c: c, mu: &mu, kind: '2'})
	var st [4]byte
	binary.BigEndian.PutUint32(st[:], uint32(status))
	_, _ = (&frameWriter{c: c, mu: &mu, kind: 'x'}).Write(st[:])
}

// frameWriter writes each Write as one frame of its kind.
type frameWriter struct {
	c    net.Conn
	mu   *sync.Mutex
	kind byte
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := make([]byte, 5, 5+len(p))
	b[0] = w.kind
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	if _, err := w.c.Write(append(b, p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}
