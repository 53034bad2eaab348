package vmdk

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// writtenDelta writes an extent with writes and returns its first sector,
// its length and what the writer says it holds.
func writtenDelta(t *testing.T, format Format, capacity int64, writes []Write) ([]byte, int64, ExtentStats) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d"+format.ExtentSuffix())
	st, err := WriteExtent(p, format, capacity/SectorSize, writes)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b[:DeltaHeaderBytes], int64(len(b)), st
}

func TestDeltaGrainBytesMatchesGrainsWritten(t *testing.T) {
	const capacity int64 = 40*mib + 512 // a partial last grain
	last := (capacity - 1) / 4096 * 4096
	cases := []struct {
		name   string
		writes []Write
	}{
		{"empty", nil},
		{"one grain", []Write{{Offset: 8192, Data: pattern(4096, 1)}}},
		{"spread over grain tables", []Write{
			{Offset: 0, Data: pattern(3*4096, 2)},
			{Offset: 16*mib - 4096, Data: pattern(2*4096, 3)},
			{Offset: 33 * mib, Data: pattern(mib, 4)},
			{Offset: last, Data: pattern(int(capacity-last), 5)},
		}},
	}
	for _, format := range []Format{VMFSSparse, SESparse} {
		for _, tc := range cases {
			t.Run(string(format)+"/"+tc.name, func(t *testing.T) {
				writes := tc.writes
				if format == SESparse && len(writes) > 1 {
					// Explicit zeros take no grain.
					writes = append(writes, Write{Offset: 20 * mib, ZeroLength: 64 * 1024})
				}
				hdr, size, st := writtenDelta(t, format, capacity, writes)
				got, err := DeltaGrainBytes(format, hdr, size, capacity/SectorSize)
				if err != nil {
					t.Fatal(err)
				}
				want := st.DataGrains * format.GrainSize()
				if format == VMFSSparse {
					want += st.GrainTables * cowdGTBytes
				}
				if got != want {
					t.Errorf("DeltaGrainBytes = %d, want %d (%d grains of %d bytes, %d grain tables)", got, want, st.DataGrains, format.GrainSize(), st.GrainTables)
				}
				if len(tc.writes) > 0 && got == 0 {
					t.Error("a delta with data reports no grains")
				}
				// The other format's reading of the header fails.
				other := SESparse
				if format == SESparse {
					other = VMFSSparse
				}
				if _, err := DeltaGrainBytes(other, hdr, size, capacity/SectorSize); err == nil {
					t.Errorf("a %s header read as %s: want an error", format, other)
				}
			})
		}
	}
}

func TestDeltaGrainBytesRejectsContradictions(t *testing.T) {
	const capacity = 24 * mib
	sectors := int64(capacity / SectorSize)
	w := []Write{{Offset: mib, Data: pattern(8192, 7)}}
	cowd, cowdSize, _ := writtenDelta(t, VMFSSparse, capacity, w)
	se, seSize, _ := writtenDelta(t, SESparse, capacity, w)
	le := binary.LittleEndian
	mod := func(b []byte, f func([]byte)) []byte { c := append([]byte(nil), b...); f(c); return c }
	cases := []struct {
		name    string
		format  Format
		hdr     []byte
		size    int64
		sectors int64
	}{
		{"short read", VMFSSparse, cowd[:100], cowdSize, sectors},
		{"capacity differs from descriptor", VMFSSparse, cowd, cowdSize, sectors + 8},
		{"free sector past file end", VMFSSparse, cowd, cowdSize - 1024, sectors},
		{"free sector inside directory", VMFSSparse, mod(cowd, func(b []byte) { le.PutUint32(b[28:], 4) }), cowdSize, sectors},
		{"zero grain", VMFSSparse, mod(cowd, func(b []byte) { le.PutUint32(b[16:], 0) }), cowdSize, sectors},
		{"directory too small", VMFSSparse, mod(cowd, func(b []byte) { le.PutUint32(b[24:], 1) }), cowdSize, sectors},
		{"directory over header", VMFSSparse, mod(cowd, func(b []byte) { le.PutUint32(b[20:], 1) }), cowdSize, sectors},
		{"huge free sector", VMFSSparse, mod(cowd, func(b []byte) { le.PutUint32(b[28:], math.MaxUint32) }), math.MaxInt64, sectors},
		{"bad magic", SESparse, mod(se, func(b []byte) { b[0] ^= 1 }), seSize, sectors},
		{"grains past file end", SESparse, mod(se, func(b []byte) { le.PutUint64(b[24*8:], uint64(seSize)) }), seSize, sectors},
		{"region overlaps grains", SESparse, mod(se, func(b []byte) { le.PutUint64(b[19*8:], math.MaxUint64) }), seSize, sectors},
		{"grains beyond capacity", SESparse, se, seSize + 2*capacity, sectors},
		{"negative capacity", SESparse, se, seSize, -8},
		{"not a delta", Flat, se, seSize, sectors},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if n, err := DeltaGrainBytes(tc.format, tc.hdr, tc.size, tc.sectors); err == nil {
				t.Errorf("DeltaGrainBytes = %d, want an error", n)
			}
		})
	}
}

// TestDeltaGrainBytesHostileHeaders flips random header fields to random
// and extreme values: the result is an error or a count within what the
// file and the disk can hold, never a panic or a negative number.
func TestDeltaGrainBytesHostileHeaders(t *testing.T) {
	const capacity = 24 * mib
	sectors := int64(capacity / SectorSize)
	w := []Write{{Offset: 3 * mib, Data: pattern(3*4096, 9)}}
	extremes := []uint64{0, 1, 4, 8, 64, 0x7fffffff, math.MaxUint32, 1 << 40, math.MaxInt64, math.MaxUint64}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, format := range []Format{VMFSSparse, SESparse} {
		hdr, size, _ := writtenDelta(t, format, capacity, w)
		width := 4
		if format == SESparse {
			width = 8
		}
		accepted := 0
		for i := 0; i < 20000; i++ {
			h := append([]byte(nil), hdr...)
			for k := rng.IntN(3) + 1; k > 0; k-- {
				off := rng.IntN(26) * width
				v := extremes[rng.IntN(len(extremes))]
				if rng.IntN(2) == 0 {
					v = rng.Uint64()
				}
				if width == 4 {
					binary.LittleEndian.PutUint32(h[off:], uint32(v))
				} else {
					binary.LittleEndian.PutUint64(h[off:], v)
				}
			}
			fs := size
			if rng.IntN(4) == 0 {
				fs = []int64{0, 511, 512, size / 2, math.MaxInt64}[rng.IntN(5)]
			}
			n, err := DeltaGrainBytes(format, h, fs, sectors)
			if err != nil {
				continue
			}
			accepted++
			limit := int64(capacity)
			if format == VMFSSparse {
				limit += ceilDiv(sectors, cowdGTEntries) * cowdGTBytes
			}
			if n < 0 || n > limit || n > fs {
				t.Fatalf("%s header %x, file %d: %d bytes is outside [0, %d] or past the file", format, h[:208], fs, n, limit)
			}
		}
		if accepted == 0 {
			t.Errorf("%s: no mutated header accepted: the test exercises only the error paths", format)
		}
	}
}

func FuzzDeltaGrainBytes(f *testing.F) {
	dir := f.TempDir()
	for _, format := range []Format{VMFSSparse, SESparse} {
		p := filepath.Join(dir, "d"+format.ExtentSuffix())
		if _, err := WriteExtent(p, format, 24*mib/SectorSize, []Write{{Offset: 0, Data: pattern(8192, 3)}}); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(format == SESparse, b[:DeltaHeaderBytes], int64(len(b)), int64(24*mib/SectorSize))
	}
	f.Fuzz(func(t *testing.T, se bool, hdr []byte, size, sectors int64) {
		format := VMFSSparse
		if se {
			format = SESparse
		}
		n, err := DeltaGrainBytes(format, hdr, size, sectors)
		if err == nil && (n < 0 || n > size) {
			t.Fatalf("%d bytes from a %d-byte file", n, size)
		}
	})
}
