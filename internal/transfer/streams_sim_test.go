//go:build linux || darwin

package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// streamSources gives a copy n streams of the env's host, each on its own
// SSH connection, sharing a client limited to maxSessions sessions.
func streamSources(t *testing.T, e *simEnv, maxSessions, n int) (*esxi.Client, []RangeReader) {
	t.Helper()
	cfg := e.cfg
	cfg.MaxSessions = maxSessions
	c := newClient(t, cfg)
	var out []RangeReader
	for _, s := range c.StreamClients(n) {
		out = append(out, s)
	}
	return c, out
}

// chunkSums hashes every chunk of a local file.
func chunkSums(t *testing.T, path string, chunk int64) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	for {
		h := diskdigest.New()
		n, err := io.Copy(h, io.LimitReader(f, chunk))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		out = append(out, fmt.Sprintf("%x", h.Sum(nil)))
	}
}

// Several streams read one disk at once, on separate connections, never
// more sessions at once than max_sessions, and the copy is exact.
func TestCopyParallelStreams(t *testing.T) {
	const size = 24 * mib
	for _, tc := range []struct {
		name                 string
		maxSessions, streams int
	}{
		{"3 streams, 3 sessions", 3, 3},
		{"4 streams, 2 sessions", 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSim(t)
			_, disk := e.addDisk(t, "par", size, mixedContent(size))
			c, srcs := streamSources(t, e, tc.maxSessions, tc.streams)
			e.srv.SetCommandDelay(40 * time.Millisecond) // reads overlap visibly
			e.srv.ResetStats()
			dest := destIn(t, "disk.raw")
			res, err := Copy(ctxT(t), c, diskOf(disk), dest, Options{ChunkSize: mib, Streams: tc.streams, Sources: srcs})
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != disk.SHA256() || !sameBytes(t, dest, disk.LocalFlat) {
				t.Fatalf("copy digest %s, want %s (or the bytes differ)", res.SHA256, disk.SHA256())
			}
			if res.ChunksCopied != 24 || res.ChunksSkipped != 0 {
				t.Errorf("result %+v, want 24 chunks copied", res)
			}
			st := e.srv.Stats()
			want := int64(min(tc.streams, tc.maxSessions))
			if st.PeakExecs != want {
				t.Errorf("at most %d sessions ran at once, want %d (streams %d, max_sessions %d)", st.PeakExecs, want, tc.streams, tc.maxSessions)
			}
			if st.Conns < 2 {
				t.Errorf("%d connections: the streams should each have their own", st.Conns)
			}
			j := readJournal(t, dest)
			if !j.Complete || j.VerifiedChunks != 24 || len(j.Ahead) != 0 {
				t.Errorf("journal complete=%v verified=%d ahead=%d", j.Complete, j.VerifiedChunks, len(j.Ahead))
			}
			if got, want := fmt.Sprint(chunkSums(t, dest, mib)), fmt.Sprint(journalSums(j)); got != want {
				t.Errorf("journal chunk sums differ from the staging file's")
			}
		})
	}
}

func journalSums(j *journal) []string {
	var out []string
	for _, c := range j.Chunks {
		out = append(out, c.SHA256)
	}
	return out
}

// A parallel copy cancelled half-way records every chunk that landed,
// in order or not, and the resumed copy reads only the others.
func TestCopyParallelResumesAfterCancel(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) { copyParallelResumesAfterCancel(t, m.python) })
	}
}

func copyParallelResumesAfterCancel(t *testing.T, python string) {
	const size = 32 * mib
	e := newSimWith(t, python)
	_, disk := e.addDisk(t, "parcut", size, mixedContent(size))
	c, srcs := streamSources(t, e, 4, 3)
	// Chunk 5 does not arrive before the cancel, so the streams land
	// chunks ahead of it.
	open := append([]RangeReader(nil), srcs...)
	for i := range srcs {
		srcs[i] = stuckSource{srcs[i], 5 * mib}
	}
	e.srv.SetCommandDelay(20 * time.Millisecond)
	dest := destIn(t, "disk.raw")
	want := chunkSums(t, disk.LocalFlat, mib)

	ctx, cancel := context.WithCancel(ctxT(t))
	_, err := Copy(ctx, c, diskOf(disk), dest, Options{ChunkSize: mib, Streams: 3, Sources: srcs, Progress: func(p Progress) {
		if p.BytesDone >= 12*mib {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first copy: %v, want canceled", err)
	}
	j := readJournal(t, dest)
	recorded := map[int]string{}
	for i, r := range j.Chunks {
		recorded[i] = r.SHA256
	}
	for i, r := range j.Ahead {
		recorded[i] = r.SHA256
	}
	if j.VerifiedChunks != 5 || len(j.Ahead) < 7 {
		t.Errorf("journal: %d chunks in order, %d ahead; want 5 (up to the stuck chunk) and at least 7", j.VerifiedChunks, len(j.Ahead))
	}
	if len(recorded) < 12 || len(recorded) >= 32 || j.Complete {
		t.Fatalf("journal records %d chunks (complete %v) after the cancel, want 12 to 31", len(recorded), j.Complete)
	}
	for i, sum := range recorded {
		if sum != want[i] {
			t.Errorf("journal chunk %d sha256 %s, the source's %s", i, sum, want[i])
		}
	}
	t.Logf("after the cancel: %d chunks in order, %d ahead", j.VerifiedChunks, len(j.Ahead))

	e.srv.ResetStats()
	srcs = open
	res, err := Copy(ctxT(t), c, diskOf(disk), dest, Options{ChunkSize: mib, Streams: 3, Sources: srcs})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != disk.SHA256() || !sameBytes(t, dest, disk.LocalFlat) {
		t.Fatalf("resumed copy digest %s, want %s (or the bytes differ)", res.SHA256, disk.SHA256())
	}
	if res.ChunksSkipped != len(recorded) || res.ChunksCopied != 32-len(recorded) {
		t.Errorf("resumed copy skipped %d and copied %d chunks, want %d and %d", res.ChunksSkipped, res.ChunksCopied, len(recorded), 32-len(recorded))
	}
	assertReadMode(t, e.srv, python)
	for _, r := range hostReads(e.srv) {
		if r.length == 512 {
			continue // the probe of the last sector
		}
		if _, ok := recorded[int(r.off/mib)]; ok {
			t.Errorf("resumed copy read [%d, %d) again, which the journal had verified", r.off, r.off+r.length)
		}
	}
}

// stuckSource never answers a read at offset stuck (until ctx ends).
type stuckSource struct {
	RangeReader
	stuck int64
}

func (s stuckSource) ReadRange(ctx context.Context, path string, off, n int64, w io.Writer) (int64, error) {
	if off == s.stuck {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.RangeReader.ReadRange(ctx, path, off, n, w)
}

// The stream clients read through the host's Python where it has one: the
// wrapper keeps those paths.
func (s stuckSource) ReadRangeSkippingZeros(ctx context.Context, path string, off, n int64, w io.Writer) (int64, error) {
	if off == s.stuck {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.RangeReader.(ZeroSkippingReader).ReadRangeSkippingZeros(ctx, path, off, n, w)
}

func (s stuckSource) ReadRangeLeaves(ctx context.Context, path string, off, n int64, w io.Writer) (int64, []byte, bool, error) {
	if off == s.stuck {
		<-ctx.Done()
		return 0, nil, false, ctx.Err()
	}
	return s.RangeReader.(LeafRangeReader).ReadRangeLeaves(ctx, path, off, n, w)
}

// With KeepLeaves a copy that read every chunk returns the file's leaf
// hashes, from the ones each chunk was checked with (dd or the host's
// reader, one stream or several); a copy that resumed from a journal has
// not got the leaves of the chunks verified before, and returns none.
func TestCopyKeepsLeaves(t *testing.T) {
	const size = 24*mib + 4096 // a last, shorter leaf
	for _, m := range readModes {
		for _, streams := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d_streams", m.name, streams), func(t *testing.T) {
				env := newSimWith(t, m.python)
				_, df := env.addDisk(t, "leaves", size, mixedContent(size))
				c, srcs := streamSources(t, env, 4, streams)
				dest := destIn(t, "disk.raw")
				opts := Options{ChunkSize: 4 * mib, Streams: streams, Sources: srcs, KeepLeaves: true}
				res, err := Copy(ctxT(t), c, diskOf(df), dest, opts)
				if err != nil {
					t.Fatal(err)
				}
				_, want, err := sparsefile.HashPrefixLeaves(ctxT(t), dest, -1)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(res.Leaves, want) || diskdigest.FromLeaves(res.Leaves) != df.SHA256() {
					t.Fatalf("leaves of %d bytes (digest %s), want the file's %d bytes (%s)", len(res.Leaves), diskdigest.FromLeaves(res.Leaves), len(want), df.SHA256())
				}
				if j := readJournal(t, dest); j.Result == nil || len(j.Result.Leaves) != 0 {
					t.Errorf("the journal keeps leaves: %+v", j.Result)
				}

				// Resumed: chunks verified by the first call have no leaves here.
				dest2 := destIn(t, "disk2.raw")
				ctx, cancel := context.WithCancel(ctxT(t))
				opts.ProgressInterval, opts.Progress = time.Nanosecond, func(p Progress) {
					if p.ChunksDone >= 2 {
						cancel()
					}
				}
				if _, err := Copy(ctx, c, diskOf(df), dest2, opts); !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled copy: %v", err)
				}
				opts.Progress = nil
				res, err = Copy(ctxT(t), c, diskOf(df), dest2, opts)
				if err != nil || res.SHA256 != df.SHA256() || res.ChunksSkipped == 0 {
					t.Fatalf("resumed copy: %+v %v", res, err)
				}
				if res.Leaves != nil {
					t.Errorf("a resumed copy returns %d bytes of leaves", len(res.Leaves))
				}
			})
		}
	}
}
