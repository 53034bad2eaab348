package esxi

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
)

// endDigest is the digest an END frame carries (the stream's last 32
// bytes).
func endDigest(stream []byte) []byte { return stream[len(stream)-32:] }

// A range with no data may end with the all-zero digest instead of a hash
// of zeros the host never read; the decoder accepts it only when every
// frame was a zero run, and reports the digest of that many zeros. A range
// with data must carry its real digest.
func TestDecodeSparseStreamAllZeroDigest(t *testing.T) {
	sentinel := func(f *frames, total uint64) []byte {
		f.WriteByte(frameEnd)
		binary.Write(f, binary.BigEndian, total)
		f.Write(make([]byte, 32))
		return f.Bytes()
	}
	zeros := make([]byte, 8)
	for name, stream := range map[string][]byte{
		"sentinel":    sentinel(newFrames().zero(100, 3).zero(103, 5), 8),
		"real digest": newFrames().zero(100, 8).end(8, zeros).Bytes(),
	} {
		st, err := DecodeSparseStream(bytes.NewReader(stream), 100, 8, &recordSink{base: 100})
		if err != nil || st.SHA256 != sha256.Sum256(zeros) || st.ZeroBytes != 8 {
			t.Errorf("%s: %+v, %v; want the digest of 8 zeros", name, st, err)
		}
	}
	for name, stream := range map[string][]byte{
		"sentinel after data":         sentinel(newFrames().data(100, []byte("abc")).zero(103, 5), 8),
		"sentinel after a zero byte":  sentinel(newFrames().data(100, []byte{0}).zero(101, 7), 8),
		"wrong digest of a zero run":  newFrames().zero(100, 8).end(8, []byte{0, 0, 0, 0, 0, 0, 0, 1}).Bytes(),
		"digest of the wrong length":  newFrames().zero(100, 8).end(8, make([]byte, 9)).Bytes(),
		"sentinel, wrong total bytes": sentinel(newFrames().zero(100, 8), 9),
	} {
		if _, err := DecodeSparseStream(bytes.NewReader(stream), 100, 8, &recordSink{base: 100}); !errors.Is(err, ErrSparseStream) {
			t.Errorf("%s: err = %v, want ErrSparseStream", name, err)
		}
	}
}

// The host-side reader sends the all-zero digest for a range that is a
// hole or written zeros, with or without SEEK_DATA, and the real digest as
// soon as the range holds one non-zero byte, zeros before and after it
// included.
func TestSparseReaderAllZeroDigest(t *testing.T) {
	const size = 4 * mib
	path, content := sparseFile(t, t.TempDir(), size, []region{
		{1 * mib, 1 * mib, 'z'}, // written zeros
		{3*mib + 5, 1, 'd'},     // one byte of data
	})
	for pname, prelude := range map[string]string{"seek-data": "", "no-seek-data": "import os\ndel os.SEEK_DATA\ndel os.SEEK_HOLE"} {
		for _, r := range []struct {
			off, n int64
			noData bool
		}{
			{0, 1 * mib, true},        // a hole
			{1 * mib, 1 * mib, true},  // written zeros
			{0, 3 * mib, true},        // both
			{2 * mib, 2 * mib, false}, // zeros, one byte, zeros
			{3*mib + 5, 1, false},
		} {
			out, stderr, err := runReader(t, prelude, path, r.off, r.n)
			if err != nil {
				t.Fatalf("%s %d+%d: %v: %s", pname, r.off, r.n, err, stderr)
			}
			want := sha256.Sum256(content[r.off : r.off+r.n])
			got := endDigest(out)
			switch {
			case r.noData && !bytes.Equal(got, make([]byte, 32)):
				t.Errorf("%s %d+%d: no data, END digest %x, want the all-zero sentinel", pname, r.off, r.n, got)
			case !r.noData && !bytes.Equal(got, want[:]):
				t.Errorf("%s %d+%d: END digest %x, want %x", pname, r.off, r.n, got, want)
			}
			st, err := DecodeSparseStream(bytes.NewReader(out), r.off, r.n, &recordSink{base: r.off})
			if err != nil || st.SHA256 != want {
				t.Errorf("%s %d+%d: decoded %x, %v; want %x", pname, r.off, r.n, st.SHA256, err, want)
			}
		}
	}
}
