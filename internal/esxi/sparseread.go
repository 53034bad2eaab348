package esxi

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// sparseReaderSource is the host-side reader (Python 3.5+, standard library
// only). It is sent as the argument of `python -c`, so what runs on the host
// is exactly this file, minus comment lines.
//
//go:embed sparseread.py
var sparseReaderSource string

// sparseReaderScript is sparseReaderSource without comment-only and blank
// lines: the command line (which the host writes to its auth.log) stays
// short. Indentation, and therefore meaning, is unchanged.
var sparseReaderScript = func() string {
	var b strings.Builder
	for _, line := range strings.Split(sparseReaderSource, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}()

// The framed stream written by the host-side reader. All integers are
// big-endian; offsets are absolute file offsets.
const (
	sparseMagic = "VMMSPR2\n"

	frameData = 'D' // offset u64, length u32, then length bytes
	frameZero = 'Z' // offset u64, length u64
	frameEnd  = 'E' // total u64, disk digest [32]byte of the range (package diskdigest)

	// maxSparseData bounds one DATA frame (the reader's read size), so a
	// hostile stream cannot make the decoder allocate more.
	maxSparseData = 1 << 20
)

// pythonPath is where ESXi 7 and 8 install Python 3. ESXi 6.x has none.
const pythonPath = "/bin/python"

// SparseReadCommand returns the command line that runs the host-side
// reader on [offset, offset+length) of path with the interpreter at
// interpreter (an absolute path such as /bin/python). path is validated with
// [ValidatePath] and quoted with [Quote]; the numbers are formatted by
// strconv; the script itself is a single quoted word.
func SparseReadCommand(interpreter, path string, offset, length int64) (string, error) {
	if err := validateInterpreter(interpreter); err != nil {
		return "", err
	}
	if err := checkSparseRange(path, offset, length); err != nil {
		return "", err
	}
	return interpreter + " -c " + Quote(sparseReaderScript) + " " + Quote(path) +
		" " + strconv.FormatInt(offset, 10) + " " + strconv.FormatInt(length, 10), nil
}

// checkSparseRange checks a range request before it reaches the host.
func checkSparseRange(path string, offset, length int64) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if len(path) > maxServedPath {
		return fmt.Errorf("path longer than %d bytes", maxServedPath)
	}
	if offset < 0 || length <= 0 || offset > maxInt64-length {
		return fmt.Errorf("invalid range offset=%d length=%d", offset, length)
	}
	return nil
}

// sparseServeCommand starts the reader in its long-lived mode
// (sparseserve.go): ranges are asked for on its stdin.
func sparseServeCommand(interpreter string) (string, error) {
	if err := validateInterpreter(interpreter); err != nil {
		return "", err
	}
	return interpreter + " -c " + Quote(sparseReaderScript) + " --serve", nil
}

// sparseProbeCommand asks the interpreter to compile and run the reader in
// probe mode: success proves the host's Python can run it.
func sparseProbeCommand(interpreter string) (string, error) {
	if err := validateInterpreter(interpreter); err != nil {
		return "", err
	}
	return interpreter + " -c " + Quote(sparseReaderScript) + " --probe", nil
}

func validateInterpreter(p string) error {
	if !strings.HasPrefix(p, "/") || len(p) > 256 {
		return fmt.Errorf("interpreter %q is not an absolute path", p)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-", c)) {
			return fmt.Errorf("interpreter path %q has characters other than [A-Za-z0-9/._-]", p)
		}
	}
	return nil
}

const maxInt64 = 1<<63 - 1

// SparseSink receives a decoded range in file order. Every byte of the range
// is passed exactly once, either as data or as part of a zero run.
type SparseSink interface {
	// WriteData receives p, the content at file offset off. p is only
	// valid during the call.
	WriteData(off int64, p []byte) error
	// WriteZeros reports that [off, off+n) reads as zeros. A sink writing a
	// fresh sparse file can leave it as a hole.
	WriteZeros(off, n int64) error
}

// SparseStats describes one decoded range.
type SparseStats struct {
	// LogicalBytes is the length of the range (data plus zeros).
	LogicalBytes int64
	// DataBytes is the payload of the DATA frames.
	DataBytes int64
	// ZeroBytes is the length of the ZERO runs (holes and zero blocks).
	ZeroBytes int64
	// WireBytes is every byte of the stream, framing included: what
	// crossed the network.
	WireBytes int64
	// DataFrames and ZeroFrames count the frames of each kind.
	DataFrames, ZeroFrames int64
	// SHA256 is the disk digest (package diskdigest) of the whole range,
	// zeros included, checked against the one the host computed.
	SHA256 [32]byte
	// Leaves are the hashes of the range's 1 MiB leaves, counted from
	// its offset (diskdigest.Hasher.Leaves): SHA256 is their SHA-256, so
	// a caller adds them to a file's digest without hashing the range
	// again.
	Leaves []byte
}

// ErrSparseStream marks a stream that breaks the framing rules: the host
// sent something else than the reader's output (or it was corrupted).
var ErrSparseStream = errors.New("malformed sparse stream")

func streamErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSparseStream, fmt.Sprintf(format, args...))
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// zeroPage feeds zero runs to the hash and to dense sinks.
var zeroPage = make([]byte, 64<<10)

// DecodeSparseStream reads the host-side reader's stream for [offset,
// offset+length) from r and passes its content to sink. It checks every
// frame strictly: the magic, known frame types, non-empty frames that start
// exactly where the previous one ended (in order, no gap, no overlap), no
// arithmetic overflow, nothing past the range, DATA frames of at most
// 1 MiB, an END frame whose total equals length, nothing after END, and the
// disk digest of the reconstructed range (zeros included, as the
// diskdigest package defines it from offset) against END's.
//
// Content reaches sink before the digest is checked: on any error the caller
// must discard what the sink received for this range.
func DecodeSparseStream(r io.Reader, offset, length int64, sink SparseSink) (SparseStats, error) {
	if offset < 0 || length <= 0 || offset > maxInt64-length {
		return SparseStats{}, fmt.Errorf("invalid range offset=%d length=%d", offset, length)
	}
	cr := &countingReader{r: r}
	br := bufio.NewReaderSize(cr, 256<<10)
	st, err := decodeSparse(br, offset, length, sink, false)
	st.WireBytes = cr.n - int64(br.Buffered())
	return st, err
}

// decodeSparse decodes one range's stream from br; served: the stream is a
// long-lived reader's, which goes on after END with the next range.
func decodeSparse(br *bufio.Reader, offset, length int64, sink SparseSink, served bool) (SparseStats, error) {
	var magic [len(sparseMagic)]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return SparseStats{}, streamErr("reading the stream header: %v", err)
	}
	if string(magic[:]) != sparseMagic {
		return SparseStats{}, streamErr("bad stream header %q", magic[:])
	}
	d := &sparseDecoder{br: br, sink: sink, offset: offset, length: length, end: offset + length, next: offset, served: served,
		h: diskdigest.New(), buf: make([]byte, maxSparseData)}
	d.h.KeepLeaves()
	for {
		if _, err := io.ReadFull(br, d.hdr[:1]); err != nil {
			return d.st, streamErr("stream ended at offset %d before the END frame: %v", d.next, err)
		}
		var err error
		switch d.hdr[0] {
		case frameData:
			err = d.data()
		case frameZero:
			err = d.zero()
		case frameEnd:
			if err := d.finish(); err != nil {
				return d.st, err
			}
			return d.st, nil
		default:
			err = streamErr("unknown frame type 0x%02x at offset %d", d.hdr[0], d.next)
		}
		if err != nil {
			return d.st, err
		}
	}
}

// sparseDecoder is one range's stream being decoded.
type sparseDecoder struct {
	br                        *bufio.Reader
	sink                      SparseSink
	offset, length, end, next int64 // next: where the next frame must start
	st                        SparseStats
	// h is the range's disk digest: zero runs cost it nothing unless a
	// 1 MiB leaf holds data too.
	h      *diskdigest.Hasher
	buf    []byte
	hdr    [1 + 8 + 32]byte
	served bool
}

// data reads a DATA frame (its type byte read) and passes it on.
func (d *sparseDecoder) data() error {
	if _, err := io.ReadFull(d.br, d.hdr[1:13]); err != nil {
		return streamErr("truncated DATA header at offset %d: %v", d.next, err)
	}
	off := int64(binary.BigEndian.Uint64(d.hdr[1:9]))
	n := int64(binary.BigEndian.Uint32(d.hdr[9:13]))
	if err := checkFrame("DATA", off, n, d.next, d.end); err != nil {
		return err
	}
	if n > maxSparseData {
		return streamErr("DATA frame of %d bytes at offset %d exceeds %d", n, off, maxSparseData)
	}
	p := d.buf[:n]
	if _, err := io.ReadFull(d.br, p); err != nil {
		return streamErr("truncated DATA frame at offset %d: %v", off, err)
	}
	d.h.Write(p)
	if err := d.sink.WriteData(off, p); err != nil {
		return err
	}
	d.st.DataBytes += n
	d.st.DataFrames++
	d.next = off + n
	return nil
}

// zero reads a ZERO frame (its type byte read) and passes it on.
func (d *sparseDecoder) zero() error {
	if _, err := io.ReadFull(d.br, d.hdr[1:17]); err != nil {
		return streamErr("truncated ZERO frame at offset %d: %v", d.next, err)
	}
	u, un := binary.BigEndian.Uint64(d.hdr[1:9]), binary.BigEndian.Uint64(d.hdr[9:17])
	if u > maxInt64 || un > maxInt64 {
		return streamErr("ZERO frame offset %d length %d out of range", u, un)
	}
	off, n := int64(u), int64(un)
	if err := checkFrame("ZERO", off, n, d.next, d.end); err != nil {
		return err
	}
	d.h.WriteZeros(n)
	if err := d.sink.WriteZeros(off, n); err != nil {
		return err
	}
	d.st.ZeroBytes += n
	d.st.ZeroFrames++
	d.next = off + n
	return nil
}

// finish reads the END frame (its type byte read), checks the total and
// the digest, and that nothing follows.
func (d *sparseDecoder) finish() error {
	if _, err := io.ReadFull(d.br, d.hdr[1:41]); err != nil {
		return streamErr("truncated END frame: %v", err)
	}
	total := binary.BigEndian.Uint64(d.hdr[1:9])
	if total != uint64(d.length) || d.next != d.end {
		return streamErr("END after %d of %d bytes (END says %d)", d.next-d.offset, d.length, total)
	}
	var sum [32]byte
	d.h.Sum(sum[:0])
	if host := d.hdr[9:41]; !bytes.Equal(sum[:], host) {
		return streamErr("digest mismatch: host %x, received %x", host, sum)
	}
	if d.served {
		// A long-lived reader's stream goes on with the next range.
		d.st.SHA256, d.st.Leaves = sum, d.h.Leaves()
		d.st.LogicalBytes = d.length
		return nil
	}
	if _, err := d.br.ReadByte(); err != io.EOF {
		if err == nil {
			return streamErr("data after the END frame")
		}
		return streamErr("after the END frame: %v", err)
	}
	d.st.SHA256, d.st.Leaves = sum, d.h.Leaves()
	d.st.LogicalBytes = d.length
	return nil
}

// checkFrame checks that a frame [off, off+n) is non-empty, starts at next
// and ends at or before end (all values already known to be >= 0).
func checkFrame(kind string, off, n, next, end int64) error {
	switch {
	case n <= 0:
		return streamErr("empty %s frame at offset %d", kind, off)
	case off != next:
		return streamErr("%s frame at offset %d, expected %d (out of order, gap or overlap)", kind, off, next)
	case n > end-off:
		return streamErr("%s frame [%d, +%d) runs past the range end %d", kind, off, n, end)
	}
	return nil
}

// DenseSink returns a sink that writes the range to w in order, zero runs
// as zero bytes: what [Client.ReadRange] would have written.
func DenseSink(w io.Writer) SparseSink { return &denseSink{w: w} }

type denseSink struct {
	w io.Writer
	n int64
}

func (d *denseSink) WriteData(_ int64, p []byte) error {
	n, err := d.w.Write(p)
	d.n += int64(n)
	return err
}

func (d *denseSink) WriteZeros(_ int64, n int64) error {
	if z, ok := d.w.(interface{ WriteZeros(int64) error }); ok {
		// The writer takes zero runs as they are (a copy's chunk writer
		// leaves them as holes without comparing them).
		if err := z.WriteZeros(n); err != nil {
			return err
		}
		d.n += n
		return nil
	}
	for n > 0 {
		k := min(n, int64(len(zeroPage)))
		w, err := d.w.Write(zeroPage[:k])
		d.n += int64(w)
		if err != nil {
			return err
		}
		n -= k
	}
	return nil
}
