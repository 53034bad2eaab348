package esxi

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// A range server is one long-lived sparse reader on the host
// (`python -c SCRIPT --serve`): a session that answers range requests on
// its stdin, one at a time, with the same framed stream as a reader started
// per range. A stream that reads a disk chunk after chunk then pays for the
// SSH exec and the interpreter's start once, not once per chunk; on a busy
// host an interpreter start alone measured hundreds of milliseconds.
//
// A server holds one of the client's sessions (max_sessions) for as long as
// it lives. Between ranges it waits in its client family's idle list for at
// most serverIdle; a command that finds every session taken closes the idle
// servers first, so an idle reader never keeps a command waiting.
type rangeServer struct {
	c      *Client
	conn   *ssh.Client
	sess   *ssh.Session
	in     io.WriteCloser
	cr     *countingReader
	out    *bufio.Reader
	stderr *limitedBuffer
	// done is closed when the session has ended; waitErr is then its
	// Wait result.
	done    chan struct{}
	waitErr error
	idle    *time.Timer
	once    sync.Once
}

// serverIdle is how long a range server waits for its next range.
var serverIdle = 5 * time.Second

// serverExplain is how long a stream that stopped waits for the session's
// end to say why.
const serverExplain = 3 * time.Second

// maxServedPath bounds a request's path (its length is a u16 on the wire).
const maxServedPath = 4096

// serverFamily is the idle range servers of a client and its stream
// clients, which share one session limit.
type serverFamily struct {
	mu   sync.Mutex
	idle []*rangeServer
}

// family is the idle list shared with the client this one belongs to.
func (c *Client) family() *serverFamily {
	if c.parent != nil {
		return c.parent.family()
	}
	return &c.servers
}

// acquireSession takes one of the client's sessions (max_sessions),
// closing idle range servers when every session is taken.
func (c *Client) acquireSession(ctx context.Context, op string) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	c.family().closeIdle(nil)
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return c.ctxError(ctx, op)
	}
}

// closeIdle closes the idle servers of owner (all of them when owner is
// nil).
func (f *serverFamily) closeIdle(owner *Client) {
	f.mu.Lock()
	var gone, kept []*rangeServer
	for _, s := range f.idle {
		if owner == nil || s.c == owner {
			gone = append(gone, s)
		} else {
			kept = append(kept, s)
		}
	}
	f.idle = kept
	f.mu.Unlock()
	for _, s := range gone {
		s.close()
	}
}

// takeServer returns an idle server of this client on its live
// connection, or starts one.
func (c *Client) takeServer(ctx context.Context) (*rangeServer, error) {
	conn, err := c.connection(ctx)
	if err != nil {
		return nil, err
	}
	f := c.family()
	f.mu.Lock()
	for i, s := range f.idle {
		if s.c != c {
			continue
		}
		f.idle = append(f.idle[:i:i], f.idle[i+1:]...)
		f.mu.Unlock()
		s.idle.Stop()
		if s.conn == conn && !s.ended() {
			return s, nil
		}
		s.close()
		return c.startServer(ctx)
	}
	f.mu.Unlock()
	return c.startServer(ctx)
}

// startServer starts a range server on the host.
func (c *Client) startServer(ctx context.Context) (*rangeServer, error) {
	const op = "sparse read"
	script, err := sparseServeCommand(pythonPath)
	if err != nil {
		return nil, &Error{Class: Permanent, Host: c.cfg.Name, Op: op, Msg: err.Error()}
	}
	if err := c.acquireSession(ctx, op); err != nil {
		return nil, err
	}
	sess, conn, err := c.openSession(ctx, op)
	if err != nil {
		<-c.sem
		return nil, err
	}
	s := &rangeServer{c: c, conn: conn, sess: sess, stderr: &limitedBuffer{limit: 1 << 20}, done: make(chan struct{})}
	fail := func(err error) (*rangeServer, error) {
		_ = sess.Close()
		<-c.sem
		if isNetworkError(err) {
			c.dropConn(conn)
		}
		return nil, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Msg: "the host refused to start the command", Err: err}
	}
	if s.in, err = sess.StdinPipe(); err != nil {
		return fail(err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	sess.Stderr = s.stderr
	if err := sess.Start(script); err != nil {
		return fail(err)
	}
	s.cr = &countingReader{r: stdout}
	s.out = bufio.NewReaderSize(s.cr, 256<<10)
	go func() {
		s.waitErr = sess.Wait()
		close(s.done)
	}()
	return s, nil
}

// ended reports whether the server's session has ended.
func (s *rangeServer) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// put returns a server that answered its range in full to the idle list.
func (s *rangeServer) put() {
	f := s.c.family()
	f.mu.Lock()
	f.idle = append(f.idle, s)
	s.idle = time.AfterFunc(serverIdle, func() { f.remove(s) })
	f.mu.Unlock()
}

// remove closes s if it is still idle.
func (f *serverFamily) remove(s *rangeServer) {
	f.mu.Lock()
	found := false
	for i, t := range f.idle {
		if t == s {
			f.idle = append(f.idle[:i:i], f.idle[i+1:]...)
			found = true
			break
		}
	}
	f.mu.Unlock()
	if found {
		s.close()
	}
}

// close ends the server's session (its stdin first, so that a reader
// between ranges exits on its own) and gives its session back. It waits
// a bounded time for the session's end, whose exit status then explains
// a stream that stopped.
func (s *rangeServer) close() {
	s.once.Do(func() {
		_ = s.in.Close()
		_ = s.sess.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
		<-s.c.sem
	})
}

// request encodes one range request.
func serveRequest(path string, offset, length int64) []byte {
	b := make([]byte, 0, 3+len(path)+16)
	b = append(b, 'R')
	b = binary.BigEndian.AppendUint16(b, uint16(len(path)))
	b = append(b, path...)
	b = binary.BigEndian.AppendUint64(b, uint64(offset))
	return binary.BigEndian.AppendUint64(b, uint64(length))
}

// readRangeServed is ReadRangeSparse through a range server.
func (c *Client) readRangeServed(ctx context.Context, path string, offset, length int64, sink SparseSink) (SparseStats, error) {
	const op = "sparse read"
	s, err := c.takeServer(ctx)
	if err != nil {
		return SparseStats{}, err
	}
	// A cancelled read ends the session: the decoder's next read fails.
	stop := context.AfterFunc(ctx, func() { _ = s.sess.Close() })
	var st SparseStats
	_, werr := s.in.Write(serveRequest(path, offset, length))
	var derr error
	if werr == nil {
		before := s.cr.n - int64(s.out.Buffered())
		st, derr = decodeSparse(s.out, offset, length, sink, true)
		st.WireBytes = s.cr.n - int64(s.out.Buffered()) - before
	}
	if stop() && werr == nil && derr == nil {
		s.put()
		return st, nil
	}
	if ctx.Err() != nil {
		s.close()
		return st, c.ctxError(ctx, op)
	}
	if derr != nil && !errors.Is(derr, ErrSparseStream) {
		// The sink failed: a local problem, returned as is.
		s.close()
		return st, derr
	}
	if derr != nil {
		// A stream that stopped is explained by the session's end (the
		// host's complaint, or the connection dropping), which follows at
		// once; a host still sending sent something invalid.
		select {
		case <-s.done:
		case <-time.After(serverExplain):
			s.close()
			return st, &Error{Class: Transient, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, Path: path,
				Msg: fmt.Sprintf("the host's stream for offset %d length %d is invalid: retry the range", offset, length), Err: derr}
		}
	}
	s.close()
	res, xerr := c.exitResult(op, execResult{stderr: s.stderr.buf.String()}, s.waitErr)
	if xerr != nil {
		var e *Error
		if errors.As(xerr, &e) && e.Path == "" {
			e.Path = path
		}
		return st, xerr
	}
	if res.status != 0 {
		return st, c.fileErr(op, path, 0, Result{Output: res.stderr, ExitStatus: res.status})
	}
	return st, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Path: path,
		Msg: fmt.Sprintf("the host's reader ended before the range at offset %d length %d was complete: retry the range", offset, length), Err: errors.Join(werr, derr)}
}
