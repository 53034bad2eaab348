package esxi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// recordSink rebuilds the range densely and checks that calls arrive in
// order and cover the range exactly once.
type recordSink struct {
	base  int64
	buf   bytes.Buffer
	zeros int64 // bytes passed as zero runs
	calls int
}

func (s *recordSink) at(off int64) error {
	if want := s.base + int64(s.buf.Len()); off != want {
		return fmt.Errorf("sink call at offset %d, expected %d", off, want)
	}
	return nil
}

func (s *recordSink) WriteData(off int64, p []byte) error {
	if err := s.at(off); err != nil {
		return err
	}
	s.calls++
	s.buf.Write(p)
	return nil
}

func (s *recordSink) WriteZeros(off, n int64) error {
	if err := s.at(off); err != nil {
		return err
	}
	s.calls++
	s.zeros += n
	s.buf.Write(make([]byte, n))
	return nil
}

// runReader runs the reader script, exactly as sent to hosts, with the local
// python3. prelude runs first (to remove os.SEEK_DATA, say).
func runReader(t testing.TB, prelude, path string, off, length int64) ([]byte, string, error) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for these tests: %v", err)
	}
	args := []string{"-c", sparseReaderScript}
	if prelude != "" {
		args = []string{"-c", prelude + "\nimport sys\nexec(sys.argv.pop(1))", sparseReaderScript}
	}
	args = append(args, path, strconv.FormatInt(off, 10), strconv.FormatInt(length, 10))
	cmd := exec.Command(py, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.String(), err
}

// sparseFile writes a file of size bytes whose regions hold random data,
// written zeros or holes (never written), and returns its content.
type region struct {
	off, n int64
	kind   byte // 'd' data, 'z' written zeros; anything else stays a hole
}

func sparseFile(t testing.TB, dir string, size int64, regions []region) (string, []byte) {
	t.Helper()
	p := filepath.Join(dir, "disk-flat.vmdk")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	content := make([]byte, size)
	rng := rand.New(rand.NewSource(size))
	for _, r := range regions {
		b := make([]byte, r.n)
		if r.kind == 'd' {
			rng.Read(b)
			for i := range b { // no accidental zero grains, but zero bytes inside data
				if i%4096 == 0 {
					b[i] |= 1
				}
			}
		}
		if r.kind == 'd' || r.kind == 'z' {
			if _, err := f.WriteAt(b, r.off); err != nil {
				t.Fatal(err)
			}
			copy(content[r.off:], b)
		}
	}
	return p, content
}

const (
	kib = int64(1024)
	mib = 1024 * kib
)

func TestSparseReaderRealPython(t *testing.T) {
	dir := t.TempDir()
	size := 9*mib + 12345 // the last grain and the last read are partial
	// Anything not listed is a hole (never written).
	regions := []region{
		{0, 1 * mib, 'd'},                  // a dense MiB
		{1 * mib, 1 * mib, 'z'},            // a MiB of written zeros
		{2*mib + 64*kib, 64 * kib, 'd'},    // one grain inside a hole
		{3 * mib, 100 * kib, 'd'},          // data ending mid-grain...
		{3*mib + 100*kib, 28 * kib, 'z'},   // ...then written zeros
		{4 * mib, 1, 'd'},                  // one byte at a MiB boundary
		{5*mib + 7, 3, 'd'},                // three unaligned bytes
		{6*mib - 64*kib, 64 * kib, 'd'},    // data right before zeros
		{6 * mib, 1 * mib, 'z'},            // written zeros...
		{6*mib + 64*kib, 64*kib + 17, 'd'}, // ...with data across a grain boundary
		{7*mib + 3*kib, 5 * kib, 'd'},      // unaligned data in a hole
		{8*mib + 700*kib, 1 * kib, 'd'},    // a lone KiB
		{size - 10, 10, 'd'},               // data in the partial last grain
	}
	path, content := sparseFile(t, dir, size, regions)

	ranges := []struct{ off, n int64 }{
		{0, size},                    // whole file, partial tail
		{0, 4 * mib},                 // aligned
		{1*mib + 3, 2*mib + 5},       // unaligned both ends
		{2*mib + 512*kib, 512 * kib}, // entirely a hole
		{1 * mib, 1 * mib},           // entirely written zeros
		{size - 1, 1},                // last byte
		{5*mib + 8, 1},               // one byte in the middle of data
		{8 * mib, size - 8*mib},      // tail
		{64*kib - 1, 129 * kib},      // unaligned across grains of dense data
	}
	preludes := map[string]string{
		"seek-data":    "",
		"no-seek-data": "import os\ndel os.SEEK_DATA\ndel os.SEEK_HOLE",
	}
	for pname, prelude := range preludes {
		for _, r := range ranges {
			t.Run(fmt.Sprintf("%s/%d+%d", pname, r.off, r.n), func(t *testing.T) {
				out, stderr, err := runReader(t, prelude, path, r.off, r.n)
				if err != nil {
					t.Fatalf("reader: %v: %s", err, stderr)
				}
				sink := &recordSink{base: r.off}
				st, err := DecodeSparseStream(bytes.NewReader(out), r.off, r.n, sink)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				want := content[r.off : r.off+r.n]
				if !bytes.Equal(sink.buf.Bytes(), want) {
					t.Fatalf("reconstructed range differs from the source")
				}
				if sum := diskdigest.Sum(want); st.SHA256 != sum {
					t.Errorf("SHA256 %x, want %x (dense source)", st.SHA256, sum)
				}
				if st.LogicalBytes != r.n || st.DataBytes+st.ZeroBytes != r.n || st.ZeroBytes != sink.zeros {
					t.Errorf("stats %+v do not add up to %d (sink zeros %d)", st, r.n, sink.zeros)
				}
				if st.WireBytes != int64(len(out)) {
					t.Errorf("WireBytes %d, stream was %d bytes", st.WireBytes, len(out))
				}
				// Every DATA byte comes from a 64 KiB grain (counted from
				// the start of a read) holding a non-zero byte.
				if max := nonZeroGrainBytes(want); st.DataBytes > max+64*kib {
					t.Errorf("DataBytes %d, want at most %d (non-zero grains plus one misaligned grain)", st.DataBytes, max+64*kib)
				}
			})
		}
	}
}

// nonZeroGrainBytes counts the bytes of the 64 KiB-aligned (relative to the
// start of p) grains of p that hold a non-zero byte, each grain widened by
// one neighbour on both sides to allow for reads starting anywhere.
func nonZeroGrainBytes(p []byte) int64 {
	const g = 64 << 10
	var n int64
	for i := 0; i < len(p); i += g {
		j := min(i+g, len(p))
		if !bytes.Equal(p[i:j], make([]byte, j-i)) {
			n += 3 * int64(j-i)
		}
	}
	return n
}

// TestSparseReaderWireBytes checks the point of the reader: what crosses the
// wire is proportional to the data, not to the size of the range.
func TestSparseReaderWireBytes(t *testing.T) {
	dir := t.TempDir()
	const size = 256 * mib
	var regions []region
	for i := int64(0); i < 16; i++ { // 16 x 256 KiB = 4 MiB of data
		regions = append(regions, region{i * 16 * mib, 256 * kib, 'd'})
	}
	regions = append(regions, region{200 * mib, 8 * mib, 'z'}) // written zeros
	path, content := sparseFile(t, dir, size, regions)
	for pname, prelude := range map[string]string{"seek-data": "", "no-seek-data": "import os\ndel os.SEEK_DATA"} {
		t.Run(pname, func(t *testing.T) {
			out, stderr, err := runReader(t, prelude, path, 0, size)
			if err != nil {
				t.Fatalf("reader: %v: %s", err, stderr)
			}
			st, err := DecodeSparseStream(bytes.NewReader(out), 0, size, &hashSink{})
			if err != nil {
				t.Fatal(err)
			}
			if st.SHA256 != diskdigest.Sum(content) {
				t.Fatal("digest differs from the dense source")
			}
			if st.DataBytes != 4*mib {
				t.Errorf("DataBytes %d, want %d (exactly the data)", st.DataBytes, 4*mib)
			}
			// 4 MiB of data + at most 33 frames of framing + magic and END.
			if maxWire := 4*mib + 33*17 + 8 + 41; st.WireBytes > maxWire {
				t.Errorf("WireBytes %d for %d MiB with 4 MiB of data, want <= %d", st.WireBytes, size/mib, maxWire)
			}
		})
	}
}

// hashSink discards the content (the decoder hashes it itself).
type hashSink struct{}

func (hashSink) WriteData(int64, []byte) error { return nil }
func (hashSink) WriteZeros(int64, int64) error { return nil }

func TestSparseReaderErrors(t *testing.T) {
	dir := t.TempDir()
	path, _ := sparseFile(t, dir, 4096, []region{{0, 4096, 'd'}})
	for _, tc := range []struct {
		name     string
		path     string
		off, n   int64
		contains string
	}{
		{"missing", filepath.Join(dir, "nope"), 0, 1, "No such file or directory"},
		{"past end", path, 4000, 97, "shorter than the range end 4097"},
		{"directory", dir, 0, 1, "vmm-sparse:"},
		{"negative offset", path, -1, 1, "invalid range"},
		{"zero length", path, 0, 0, "invalid range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runReader(t, "", tc.path, tc.off, tc.n)
			if err == nil {
				t.Fatalf("reader succeeded, want failure; stdout %d bytes", len(out))
			}
			if !bytes.Contains([]byte(stderr), []byte(tc.contains)) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tc.contains)
			}
		})
	}
}

// TestSparseReaderPython35 compiles the script with Python 3.5's grammar:
// ESXi 7.0 ships Python 3.5, so no f-strings, walrus or newer syntax.
func TestSparseReaderPython35(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required: %v", err)
	}
	check := "import ast,sys\nast.parse(sys.argv[1], feature_version=(3, 5))"
	if out, err := exec.Command(py, "-c", check, sparseReaderScript).CombinedOutput(); err != nil {
		t.Fatalf("script is not Python 3.5 syntax: %v\n%s", err, out)
	}
	// The check itself must reject newer syntax, or it proves nothing.
	if _, err := exec.Command(py, "-c", check, "x = f'{1}'").CombinedOutput(); err == nil {
		t.Fatal("the Python 3.5 grammar check accepted an f-string")
	}
	out, err := exec.Command(py, "-c", sparseReaderScript, "--probe").Output()
	if err != nil || !bytes.HasPrefix(out, []byte("vmm-sparse 1 python 3.")) {
		t.Fatalf("probe: %q %v", out, err)
	}
}

func TestSparseReadCommandQuoting(t *testing.T) {
	p := "/vmfs/volumes/ds 1/it's $(reboot)/a`b`-flat.vmdk"
	cmd, err := SparseReadCommand("/bin/python", p, 512, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := "/bin/python -c " + Quote(sparseReaderScript) + " " + Quote(p) + " 512 1024"
	if cmd != want {
		t.Errorf("command line is not the quoted script, quoted path and numbers")
	}
	for _, bad := range []struct {
		interp, path string
		off, n       int64
	}{
		{"python", "/vmfs/volumes/ds/a", 0, 1},
		{"/bin/python;reboot", "/vmfs/volumes/ds/a", 0, 1},
		{"/bin/python", "/etc/shadow", 0, 1},
		{"/bin/python", "/vmfs/volumes/ds/../../etc/shadow", 0, 1},
		{"/bin/python", "/vmfs/volumes/ds/a\nreboot", 0, 1},
		{"/bin/python", "/vmfs/volumes/ds/a", -1, 1},
		{"/bin/python", "/vmfs/volumes/ds/a", 0, 0},
		{"/bin/python", "/vmfs/volumes/ds/a", maxInt64, 1},
	} {
		if _, err := SparseReadCommand(bad.interp, bad.path, bad.off, bad.n); err == nil {
			t.Errorf("SparseReadCommand(%q, %q, %d, %d) accepted", bad.interp, bad.path, bad.off, bad.n)
		}
	}
}

// frames builds a stream by hand.
type frames struct{ bytes.Buffer }

func newFrames() *frames { f := &frames{}; f.WriteString(sparseMagic); return f }

func (f *frames) data(off int64, p []byte) *frames {
	f.WriteByte(frameData)
	binary.Write(f, binary.BigEndian, uint64(off))
	binary.Write(f, binary.BigEndian, uint32(len(p)))
	f.Write(p)
	return f
}

func (f *frames) dataHeader(off uint64, n uint32) *frames {
	f.WriteByte(frameData)
	binary.Write(f, binary.BigEndian, off)
	binary.Write(f, binary.BigEndian, n)
	return f
}

func (f *frames) zero(off, n uint64) *frames {
	f.WriteByte(frameZero)
	binary.Write(f, binary.BigEndian, off)
	binary.Write(f, binary.BigEndian, n)
	return f
}

func (f *frames) end(total uint64, content []byte) *frames {
	f.WriteByte(frameEnd)
	binary.Write(f, binary.BigEndian, total)
	sum := diskdigest.Sum(content)
	f.Write(sum[:])
	return f
}

func TestDecodeSparseStreamRejects(t *testing.T) {
	abc := []byte("abc")
	content := append(append([]byte(nil), abc...), make([]byte, 5)...) // "abc" + 5 zeros at offset 100
	valid := func() *frames { return newFrames().data(100, abc).zero(103, 5) }
	big := make([]byte, maxSparseData+1)
	tests := []struct {
		name   string
		stream []byte
	}{
		{"empty", nil},
		{"bad magic", append([]byte("VMMSPR2\n"), valid().Bytes()[8:]...)},
		{"no END", valid().Bytes()},
		{"unknown frame", append(valid().Bytes(), 'X')},
		{"empty DATA", newFrames().data(100, nil).data(100, abc).zero(103, 5).end(8, content).Bytes()},
		{"empty ZERO", newFrames().zero(100, 0).data(100, abc).zero(103, 5).end(8, content).Bytes()},
		{"gap", newFrames().data(100, abc).zero(104, 4).end(8, content).Bytes()},
		{"overlap", newFrames().data(100, abc).zero(102, 6).end(8, content).Bytes()},
		{"out of order", newFrames().zero(103, 5).data(100, abc).end(8, content).Bytes()},
		{"starts late", newFrames().data(101, abc).zero(104, 4).end(8, content).Bytes()},
		{"past the end", newFrames().data(100, abc).zero(103, 6).end(8, content).Bytes()},
		{"ZERO length overflow", newFrames().data(100, abc).zero(103, 1<<63+5).end(8, content).Bytes()},
		{"ZERO length wraps", newFrames().data(100, abc).zero(103, ^uint64(0)-102).end(8, content).Bytes()},
		{"DATA offset huge", newFrames().dataHeader(^uint64(0), 3).Bytes()},
		{"DATA too long", newFrames().data(100, big).Bytes()},
		{"DATA header claims more than sent", newFrames().dataHeader(100, 1000).Bytes()},
		{"truncated DATA header", append(newFrames().Bytes(), frameData, 0, 0)},
		{"truncated ZERO", valid().Bytes()[:len(valid().Bytes())-3]},
		{"END early", newFrames().data(100, abc).end(8, content).Bytes()},
		{"END wrong total", valid().end(9, content).Bytes()},
		{"END wrong digest", valid().end(8, []byte("abc\x00\x00\x00\x00\x01")).Bytes()},
		{"truncated END", valid().end(8, content).Bytes()[:len(valid().end(8, content).Bytes())-1]},
		{"data after END", append(valid().end(8, content).Bytes(), 0)},
		{"second END", valid().end(8, content).end(8, content).Bytes()},
	}
	// The valid stream is accepted, or the rejections prove nothing.
	ok := valid().end(8, content).Bytes()
	st, err := DecodeSparseStream(bytes.NewReader(ok), 100, 8, &recordSink{base: 100})
	if err != nil || st.DataBytes != 3 || st.ZeroBytes != 5 || st.WireBytes != int64(len(ok)) {
		t.Fatalf("valid stream: %+v, %v", st, err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSparseStream(bytes.NewReader(tc.stream), 100, 8, &recordSink{base: 100})
			if !errors.Is(err, ErrSparseStream) {
				t.Errorf("err = %v, want ErrSparseStream", err)
			}
		})
	}
	if _, err := DecodeSparseStream(bytes.NewReader(ok), 100, 0, &recordSink{}); err == nil || errors.Is(err, ErrSparseStream) {
		t.Errorf("zero-length range: %v, want an argument error", err)
	}
}

func TestDecodeSparseStreamSinkError(t *testing.T) {
	stream := newFrames().data(0, []byte("x")).end(1, []byte("x")).Bytes()
	boom := errors.New("disk full")
	_, err := DecodeSparseStream(bytes.NewReader(stream), 0, 1, failSink{boom})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want the sink's error", err)
	}
}

type failSink struct{ err error }

func (f failSink) WriteData(int64, []byte) error { return f.err }
func (f failSink) WriteZeros(int64, int64) error { return f.err }

func TestDenseSink(t *testing.T) {
	stream := newFrames().data(10, []byte("ab")).zero(12, 70000).data(70012, []byte("c")).
		end(70003, append(append([]byte("ab"), make([]byte, 70000)...), 'c')).Bytes()
	var out bytes.Buffer
	if _, err := DecodeSparseStream(bytes.NewReader(stream), 10, 70003, DenseSink(&out)); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("ab"), make([]byte, 70000)...), 'c')
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("dense output differs (len %d, want %d)", out.Len(), len(want))
	}
}

func FuzzDecodeSparseStream(f *testing.F) {
	content := append([]byte("abc"), make([]byte, 5)...)
	f.Add(newFrames().data(100, []byte("abc")).zero(103, 5).end(8, content).Bytes(), int64(100), int64(8))
	f.Add(newFrames().zero(0, 8).end(8, make([]byte, 8)).Bytes(), int64(0), int64(8))
	f.Add(newFrames().data(7, []byte("z")).end(1, []byte("z")).Bytes(), int64(7), int64(1))
	f.Add([]byte(sparseMagic+"E"), int64(0), int64(1))
	f.Fuzz(func(t *testing.T, stream []byte, off, n int64) {
		if n > 1<<20 {
			n = 1 << 20 // bound the zero runs a sink would have to rebuild
		}
		sink := &recordSink{base: off}
		st, err := DecodeSparseStream(bytes.NewReader(stream), off, n, sink)
		if err != nil {
			return
		}
		if st.LogicalBytes != n || st.DataBytes+st.ZeroBytes != n || int64(sink.buf.Len()) != n {
			t.Fatalf("accepted stream covers %d (data %d zero %d, sink %d), range is %d", st.LogicalBytes, st.DataBytes, st.ZeroBytes, sink.buf.Len(), n)
		}
		if diskdigest.Sum(sink.buf.Bytes()) != st.SHA256 {
			t.Fatal("accepted stream's digest is not the digest of what the sink received")
		}
		if st.WireBytes != int64(len(stream)) {
			t.Fatalf("WireBytes %d, stream %d", st.WireBytes, len(stream))
		}
	})
}

func BenchmarkDecodeSparseStream(b *testing.B) {
	// 64 MiB: 1 MiB of data then 3 MiB of zeros, repeated.
	const size = 64 * mib
	f := newFrames()
	data := make([]byte, mib)
	rand.New(rand.NewSource(1)).Read(data)
	var content []byte
	for off := int64(0); off < size; off += 4 * mib {
		f.data(off, data).zero(uint64(off+mib), uint64(3*mib))
		content = append(content, data...)
		content = append(content, make([]byte, 3*mib)...)
	}
	stream := f.end(uint64(size), content).Bytes()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := DecodeSparseStream(bytes.NewReader(stream), 0, size, hashSink{})
		if err != nil || st.DataBytes != size/4 {
			b.Fatal(st, err)
		}
	}
	b.ReportMetric(float64(len(stream))/float64(size), "wire/logical")
}
