package esxi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// endDigest is the digest an END frame carries (the stream's last 32
// bytes).
func endDigest(stream []byte) []byte { return stream[len(stream)-32:] }

// A range with no data ends with the disk digest of its zeros, which
// costs neither side any hashing; the decoder checks it as any other, and
// the old all-zero sentinel (a host that did not hash) is refused.
func TestDecodeSparseStreamZeroDigest(t *testing.T) {
	end := func(f *frames, total uint64, digest []byte) []byte {
		f.WriteByte(frameEnd)
		binary.Write(f, binary.BigEndian, total)
		f.Write(digest)
		return f.Bytes()
	}
	zeros := make([]byte, 8)
	zsum := diskdigest.Sum(zeros)
	st, err := DecodeSparseStream(bytes.NewReader(newFrames().zero(100, 3).zero(103, 5).end(8, zeros).Bytes()), 100, 8, &recordSink{base: 100})
	if want := diskdigest.Zeros(8); err != nil || st.SHA256 != want || st.ZeroBytes != 8 {
		t.Errorf("zero runs: %+v, %v; want the digest of 8 zeros %x", st, err, want)
	}
	for name, stream := range map[string][]byte{
		"all-zero sentinel":          end(newFrames().zero(100, 3).zero(103, 5), 8, make([]byte, 32)),
		"sentinel after data":        end(newFrames().data(100, []byte("abc")).zero(103, 5), 8, make([]byte, 32)),
		"wrong digest of a zero run": newFrames().zero(100, 8).end(8, []byte{0, 0, 0, 0, 0, 0, 0, 1}).Bytes(),
		"digest of the wrong length": newFrames().zero(100, 8).end(8, make([]byte, 9)).Bytes(),
		"right digest, wrong total":  end(newFrames().zero(100, 8), 9, zsum[:]),
	} {
		if _, err := DecodeSparseStream(bytes.NewReader(stream), 100, 8, &recordSink{base: 100}); !errors.Is(err, ErrSparseStream) {
			t.Errorf("%s: err = %v, want ErrSparseStream", name, err)
		}
	}
}

// The host-side reader's END digest is the disk digest of the range, the
// same with or without SEEK_DATA, for holes, written zeros, a range with
// one non-zero byte among zeros, and ranges that do not start on a MiB.
func TestSparseReaderRangeDigest(t *testing.T) {
	const size = 4 * mib
	path, content := sparseFile(t, t.TempDir(), size, []region{
		{1 * mib, 1 * mib, 'z'}, // written zeros
		{3*mib + 5, 1, 'd'},     // one byte of data
	})
	for pname, prelude := range map[string]string{"seek-data": "", "no-seek-data": "import os\ndel os.SEEK_DATA\ndel os.SEEK_HOLE"} {
		for _, r := range []struct{ off, n int64 }{
			{0, 1 * mib},       // a hole
			{1 * mib, 1 * mib}, // written zeros
			{0, 3 * mib},       // both
			{2 * mib, 2 * mib}, // zeros, one byte, zeros
			{3*mib + 5, 1},
			{mib / 2, 3 * mib}, // leaves counted from the range's start
		} {
			out, stderr, err := runReader(t, prelude, path, r.off, r.n)
			if err != nil {
				t.Fatalf("%s %d+%d: %v: %s", pname, r.off, r.n, err, stderr)
			}
			want := diskdigest.Sum(content[r.off : r.off+r.n])
			if got := endDigest(out); !bytes.Equal(got, want[:]) {
				t.Errorf("%s %d+%d: END digest %x, want %x", pname, r.off, r.n, got, want)
			}
			st, err := DecodeSparseStream(bytes.NewReader(out), r.off, r.n, &recordSink{base: r.off})
			if err != nil || st.SHA256 != want {
				t.Errorf("%s %d+%d: decoded %x, %v; want %x", pname, r.off, r.n, st.SHA256, err, want)
			}
		}
	}
}
