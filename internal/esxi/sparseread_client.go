package esxi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// pythonProbe is what HasPython learned on one connection.
type pythonProbe struct {
	conn *ssh.Client
	ok   bool
}

// pythonProbes caches HasPython per client and connection: a reconnect
// (possibly to a host upgraded or replaced meanwhile) probes again.
var pythonProbes sync.Map // *Client -> pythonProbe

// HasPython reports whether the host can run the sparse reader: ESXi 7 and 8
// ship Python 3 as /bin/python, ESXi 6.x has none. The probe runs the reader
// itself in probe mode, so a Python too old to run it counts as missing. The
// answer is cached for the life of the connection. An error means the
// question could not be asked (connection trouble), not that Python is
// missing.
func (c *Client) HasPython(ctx context.Context) (bool, error) {
	conn, err := c.connection(ctx)
	if err != nil {
		return false, err
	}
	if v, ok := pythonProbes.Load(c); ok && v.(pythonProbe).conn == conn {
		return v.(pythonProbe).ok, nil
	}
	script, err := sparseProbeCommand(pythonPath)
	if err != nil {
		return false, err
	}
	out := &limitedBuffer{limit: 4096}
	res, err := c.exec(ctx, "python probe", script, out)
	if err != nil {
		return false, err
	}
	got := out.buf.String()
	ok := res.status == 0 && strings.HasPrefix(got, "vmm-sparse 1 ")
	if ok {
		c.logf("esxi %s: %s found (%s): disk reads skip zero runs on the host", c.cfg.Name, pythonPath, strings.TrimSpace(strings.TrimPrefix(got, "vmm-sparse 1 ")))
	} else {
		c.logf("esxi %s: no usable %s (exit status %d: %s): disk reads use dd and carry zeros over the network",
			c.cfg.Name, pythonPath, res.status, truncate(strings.TrimSpace(res.stderr+got), 200))
	}
	pythonProbes.Store(c, pythonProbe{conn: conn, ok: ok})
	return ok, nil
}

// ReadRangeSparse reads [offset, offset+length) of the file at path with the
// host-side sparse reader and passes it to sink: data as data, zero runs
// (holes the host's file system reports, and all-zero 64 KiB blocks) as
// zero runs, which cost 17 bytes on the wire whatever their length. The
// stream is checked frame by frame and against the SHA-256 the host computed
// over the whole range; stats.SHA256 is that digest. Unlike [Client.ReadRange]
// the range need not be aligned to 512 bytes.
//
// The host must have Python ([Client.HasPython]). Content reaches sink before
// the digest is verified: on error, discard what the sink received.
func (c *Client) ReadRangeSparse(ctx context.Context, path string, offset, length int64, sink SparseSink) (SparseStats, error) {
	script, err := SparseReadCommand(pythonPath, path, offset, length)
	if err != nil {
		return SparseStats{}, &Error{Class: Permanent, Host: c.cfg.Name, Op: "sparse read", Path: path, Msg: err.Error()}
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type execOut struct {
		res execResult
		err error
	}
	done := make(chan execOut, 1)
	go func() {
		res, err := c.exec(ctx, "sparse read", script, pw)
		// Report before closing the pipe: a decoder that sees the end of
		// the stream then also sees why it ended.
		done <- execOut{res, err}
		pw.CloseWithError(io.EOF)
	}()
	st, derr := DecodeSparseStream(pr, offset, length, sink)
	var eo execOut
	execFirst := false
	if derr != nil {
		select {
		case eo = <-done:
			execFirst = true
		default:
			// The stream itself is wrong (or the sink failed) while the
			// host is still sending: stop it.
			pr.CloseWithError(derr)
			cancel()
			eo = <-done
		}
	} else {
		eo = <-done
	}
	switch {
	case parent.Err() != nil:
		return st, c.ctxError(parent, "sparse read")
	case eo.err == nil && eo.res.status != 0:
		// The host's own complaint (locked, missing or short file).
		return st, c.fileErr("sparse read", path, 0, Result{Output: eo.res.stderr, ExitStatus: eo.res.status})
	case execFirst && eo.err != nil:
		// The connection dropped: that is why the stream ended.
		var e *Error
		if errors.As(eo.err, &e) && e.Path == "" {
			e.Path = path
		}
		return st, eo.err
	case errors.Is(derr, ErrSparseStream):
		return st, &Error{Class: Transient, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "sparse read", Path: path,
			Msg: fmt.Sprintf("the host's stream for offset %d length %d is invalid: retry the range", offset, length), Err: derr}
	case derr != nil:
		// The sink failed: a local problem, returned as is.
		return st, derr
	case eo.err != nil:
		var e *Error
		if errors.As(eo.err, &e) && e.Path == "" {
			e.Path = path
		}
		return st, eo.err
	}
	return st, nil
}

// ReadRangeSkippingZeros has the contract of [Client.ReadRange] (length
// bytes of path from offset written densely to w; the count written so a
// caller can resume) but, where the host has Python, runs the sparse reader
// so that zero runs do not cross the network. Hosts without Python (ESXi
// 6.x) get dd, whose ranges must be aligned to 512 bytes.
func (c *Client) ReadRangeSkippingZeros(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	n, _, _, err := c.ReadRangeChecked(ctx, path, offset, length, w)
	return n, err
}

// ReadRangeChecked is [Client.ReadRangeSkippingZeros] that also returns
// the range's SHA-256 when the sparse reader ran: computed on the host,
// checked against what arrived, so the caller need not hash the range
// again (checked is true). Through dd there is no such digest (checked is
// false).
func (c *Client) ReadRangeChecked(ctx context.Context, path string, offset, length int64, w io.Writer) (n int64, sum [32]byte, checked bool, err error) {
	ok, err := c.HasPython(ctx)
	if err != nil {
		return 0, sum, false, err
	}
	if !ok {
		n, err = c.ReadRange(ctx, path, offset, length, w)
		return n, sum, false, err
	}
	d := &denseSink{w: w}
	st, err := c.ReadRangeSparse(ctx, path, offset, length, d)
	if err != nil {
		return d.n, sum, false, err
	}
	return d.n, st.SHA256, true, nil
}
