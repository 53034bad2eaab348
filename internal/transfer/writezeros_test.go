package transfer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// piece is a part of a chunk as a sparse source delivers it: data, or a
// run of zeros.
type piece struct {
	zeros int64
	data  []byte
}

// Zero runs delivered through WriteZeros leave the same staging file, chunk
// record, whole-file hash and byte count as the same zeros written as
// bytes: aligned or not, at the start, between data, at the end, and for a
// chunk that is nothing but zeros (whose digest is the cached one).
func TestChunkWriterWriteZerosMatchesWrite(t *testing.T) {
	d := func(n int, b byte) piece { return piece{data: bytes.Repeat([]byte{b}, n)} }
	z := func(n int64) piece { return piece{zeros: n} }
	cases := map[string][]piece{
		"all zeros":            {z(3*ZeroBlockSize + 4096)},
		"all zeros, in pieces": {z(100), z(ZeroBlockSize), z(2*ZeroBlockSize - 100 + 4096)},
		"data then zeros":      {d(5, 1), z(3*ZeroBlockSize + 4091)},
		"zeros then data":      {z(2*ZeroBlockSize + 7), d(ZeroBlockSize+4089, 2)},
		"interleaved":          {d(ZeroBlockSize, 3), z(ZeroBlockSize + 1), d(3, 4), z(ZeroBlockSize + 4092)},
		"unaligned everywhere": {z(17), d(1, 5), z(ZeroBlockSize*2 - 18), d(4096, 6), z(ZeroBlockSize)},
		"zero bytes as data":   {d(ZeroBlockSize, 0), z(2*ZeroBlockSize + 4096)},
	}
	for name, pieces := range cases {
		t.Run(name, func(t *testing.T) {
			var content []byte
			for _, p := range pieces {
				if p.data != nil {
					content = append(content, p.data...)
				} else {
					content = append(content, make([]byte, p.zeros)...)
				}
			}
			n := int64(len(content))
			run := func(useZeros bool) (chunkRecord, int64, string, []byte, int64) {
				f, err := os.Create(filepath.Join(t.TempDir(), "stage"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				// The chunk sits after one chunk of the file, with the
				// region a hole beforehand.
				if err := f.Truncate(2 * n); err != nil {
					t.Fatal(err)
				}
				var reported int64
				w := newChunkWriter(f, n, n, make([]byte, 0, writeBufferSize), func(got int64) { reported = got })
				for _, p := range pieces {
					switch {
					case p.data != nil:
						_, err = w.Write(p.data)
					case useZeros:
						err = w.WriteZeros(p.zeros)
					default:
						_, err = w.Write(make([]byte, p.zeros))
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				rec, got, err := w.finish()
				if err != nil {
					t.Fatal(err)
				}
				back := make([]byte, n)
				if _, err := f.ReadAt(back, n); err != nil {
					t.Fatal(err)
				}
				return rec, got, fmt.Sprintf("%x", rec.Leaves), back, reported
			}
			wantRec, wantN, wantWhole, wantFile, _ := run(false)
			rec, got, wh, file, reported := run(true)
			if rec.SHA256 != wantRec.SHA256 || rec.ZeroBytes != wantRec.ZeroBytes || got != wantN || wh != wantWhole || !bytes.Equal(file, wantFile) || reported != n {
				t.Errorf("with WriteZeros: %+v, %d bytes, whole %s, reported %d; with Write: %+v, %d bytes, whole %s",
					rec, got, wh, reported, wantRec, wantN, wantWhole)
			}
			if rec.SHA256 != sha(content) || !bytes.Equal(file, content) {
				t.Errorf("chunk digest %s or staged content is not the content's (%s)", rec.SHA256, sha(content))
			}
		})
	}
	// More zeros than the chunk holds are refused.
	f, err := os.Create(filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newChunkWriter(f, 0, 2*ZeroBlockSize, make([]byte, 0, writeBufferSize), nil)
	if err := w.WriteZeros(3 * ZeroBlockSize); err == nil {
		t.Error("WriteZeros accepted more than the chunk")
	}
}
