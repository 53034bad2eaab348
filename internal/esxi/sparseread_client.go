package esxi

import (
	"context"
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
// The host must have Python ([Client.HasPython]). One reader on the host
// serves the ranges of a client one after the other (sparseserve.go).
// Content reaches sink before the digest is verified: on error, discard
// what the sink received.
func (c *Client) ReadRangeSparse(ctx context.Context, path string, offset, length int64, sink SparseSink) (SparseStats, error) {
	if err := checkSparseRange(path, offset, length); err != nil {
		return SparseStats{}, &Error{Class: Permanent, Host: c.cfg.Name, Op: "sparse read", Path: path, Msg: err.Error()}
	}
	return c.readRangeServed(ctx, path, offset, length, sink)
}

// ReadRangeSkippingZeros has the contract of [Client.ReadRange] (length
// bytes of path from offset written densely to w; the count written so a
// caller can resume) but, where the host has Python, runs the sparse reader
// so that zero runs do not cross the network. Hosts without Python (ESXi
// 6.x) get dd, whose ranges must be aligned to 512 bytes.
func (c *Client) ReadRangeSkippingZeros(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	n, _, _, err := c.ReadRangeLeaves(ctx, path, offset, length, w)
	return n, err
}

// ReadRangeLeaves is [Client.ReadRangeSkippingZeros] that also returns
// the hashes of the range's 1 MiB leaves (SparseStats.Leaves) when the
// sparse reader ran: computed on the host, checked against what arrived,
// so the caller need not hash the range again (checked is true); their
// SHA-256 is the range's disk digest. Through dd there are none (checked
// is false).
func (c *Client) ReadRangeLeaves(ctx context.Context, path string, offset, length int64, w io.Writer) (n int64, leaves []byte, checked bool, err error) {
	ok, err := c.HasPython(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	if !ok {
		n, err = c.ReadRange(ctx, path, offset, length, w)
		return n, nil, false, err
	}
	d := &denseSink{w: w}
	st, err := c.ReadRangeSparse(ctx, path, offset, length, d)
	if err != nil {
		return d.n, nil, false, err
	}
	return d.n, st.Leaves, true, nil
}
