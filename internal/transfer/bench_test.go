//go:build linux || darwin

package transfer

import (
	"io"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// BenchmarkCopy copies a 256 MiB disk from the simulator over SSH on
// loopback. Every iteration measures the baseline (the same chunked
// ReadRange calls into io.Discard: SSH + dd only) and then Copy (plus two
// SHA-256s, zero detection, sparse writes, fsync and journal); it reports
// both rates and Copy's time as a ratio of the baseline ("x-raw").
//
//	go test -run '^$' -bench Copy -benchtime 3x ./internal/transfer/
func BenchmarkCopy(b *testing.B) {
	const size = 256 * mib
	const chunk = DefaultChunkSize
	env := newSim(b)
	contents := []struct {
		name string
		ext  []esxisim.Extent
	}{
		{"random", []esxisim.Extent{{Offset: 0, Length: size, Seed: 11}}},
		// 1/4 data in 8 MiB runs, the rest zero: a thin disk.
		{"sparse", func() []esxisim.Extent {
			var e []esxisim.Extent
			for off := int64(0); off < size; off += 32 * mib {
				e = append(e, esxisim.Extent{Offset: off, Length: 8 * mib, Seed: uint64(off)})
			}
			return e
		}()},
	}
	for _, ct := range contents {
		_, df := env.addDisk(b, "bench-"+ct.name, size, ct.ext)
		want := df.SHA256()
		// Each iteration runs the baseline (timer stopped) and then Copy,
		// interleaved so that noise from other load hits both alike.
		b.Run(ct.name, func(b *testing.B) {
			b.SetBytes(size)
			dir := b.TempDir()
			var raw, cp time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				start := time.Now()
				for off := int64(0); off < size; off += chunk {
					if _, err := env.c.ReadRange(b.Context(), df.Flat, off, chunk, io.Discard); err != nil {
						b.Fatal(err)
					}
				}
				raw += time.Since(start)
				dest := dir + "/disk.raw"
				b.StartTimer()
				start = time.Now()
				res, err := Copy(b.Context(), env.c, diskOf(df), dest, Options{ChunkSize: chunk})
				cp += time.Since(start)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if res.SHA256 != want {
					b.Fatalf("sha %s, want %s", res.SHA256, want)
				}
				if err := Remove(dest); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(size)*float64(b.N)/raw.Seconds()/1e6, "raw-MB/s")
			b.ReportMetric(float64(size)*float64(b.N)/cp.Seconds()/1e6, "copy-MB/s")
			b.ReportMetric(cp.Seconds()/raw.Seconds(), "x-raw")
		})
	}
}
