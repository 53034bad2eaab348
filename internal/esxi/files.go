package esxi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ddBlockSize picks the largest block size (<= 1 MiB, a power of two,
// >= 512) that divides both offset and length.
func ddBlockSize(offset, length int64) (int64, error) {
	if offset < 0 || length <= 0 {
		return 0, fmt.Errorf("invalid range offset=%d length=%d", offset, length)
	}
	for bs := int64(maxDDBlock); bs >= 512; bs /= 2 {
		if offset%bs == 0 && length%bs == 0 {
			return bs, nil
		}
	}
	return 0, fmt.Errorf("range offset=%d length=%d is not aligned to 512 bytes: dd can only read whole blocks", offset, length)
}

// ReadRange streams length bytes of the file at path, starting at offset,
// to w, using `dd` with whole blocks (the largest power-of-two block size
// up to 1 MiB that divides both offset and length). offset and length must
// be multiples of 512. Fewer bytes than asked (the file is shorter) is an
// error; so is a locked file (a powered-on VM's disk): power the VM off
// first. It returns the number of bytes written to w, so a caller can
// resume from offset+n.
func (c *Client) ReadRange(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	bs, err := ddBlockSize(offset, length)
	if err != nil {
		return 0, &Error{Class: Permanent, Host: c.cfg.Name, Op: "dd", Path: path, Msg: err.Error()}
	}
	cmd, err := DD(path, bs, offset/bs, length/bs)
	if err != nil {
		return 0, &Error{Class: Permanent, Host: c.cfg.Name, Op: "dd", Path: path, Msg: err.Error()}
	}
	cw := &countingWriter{w: w}
	res, err := c.exec(ctx, "dd", cmd.String(), cw)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Path == "" {
			e.Path = path
		}
		return cw.n, err
	}
	if res.status != 0 {
		r := Result{Output: res.stderr, ExitStatus: res.status}
		return cw.n, c.fileErr("dd", path, 0, r)
	}
	if cw.n != length {
		return cw.n, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "dd", Path: path,
			Msg: fmt.Sprintf("read %d bytes at offset %d, expected %d: the file is shorter than the range (disk resized or wrong file?)", cw.n, offset, length)}
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

// FileSizes returns the size in bytes of each path (`stat -c '%s %n'`), in
// one exec. A missing file is an error matching [ErrFileNotFound].
func (c *Client) FileSizes(ctx context.Context, paths ...string) (map[string]int64, error) {
	labels := make([]string, len(paths))
	cmds := make([]Command, len(paths))
	for i, p := range paths {
		cmd, err := StatSize(p)
		if err != nil {
			return nil, &Error{Class: Permanent, Host: c.cfg.Name, Op: "stat", Path: p, Msg: err.Error()}
		}
		labels[i], cmds[i] = "f"+strconv.Itoa(i), cmd
	}
	rs, _, err := c.runMany(ctx, "stat", labels, cmds)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(paths))
	for i, p := range paths {
		r := rs[labels[i]]
		if e := c.fileErr("stat", p, 0, r); e != nil {
			return nil, e
		}
		n, err := ParseStatSize(r.Output, p)
		if err != nil {
			return nil, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "stat", Path: p, Msg: err.Error()}
		}
		out[p] = n
	}
	return out, nil
}

// ParseStatSize reads the output of `stat -c '%s %n' path`: one line,
// the size in decimal bytes, a space and the path. Anything else (another
// path, more lines, a sign, a size beyond int64) is an error: a size
// from the host must never reach a copy as a negative or wrapped number.
func ParseStatSize(out, path string) (int64, error) {
	line := strings.TrimSuffix(out, "\n")
	sp := strings.IndexByte(line, ' ')
	// stat prints sizes in canonical decimal: anything else (a sign, a
	// leading zero) is not stat's answer for this path.
	if sp <= 0 || line[sp+1:] != path || !isDigits(line[:sp]) || (sp > 1 && line[0] == '0') {
		return 0, fmt.Errorf("unexpected stat output %q", truncate(line, 200))
	}
	n, err := strconv.ParseInt(line[:sp], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat size %q is out of range", truncate(line[:sp], 40))
	}
	return n, nil
}
