package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// fakeSource serves data from memory, failing reads as scripted.
type fakeSource struct {
	data []byte
	mu   sync.Mutex
	// fail is consulted before each read: a non-nil error fails the read
	// after half of it has been written.
	fail  func(call int, off int64) error
	calls int
	block chan struct{} // if set, reads wait for it to close
}

func (s *fakeSource) ReadRange(ctx context.Context, path string, off, n int64, w io.Writer) (int64, error) {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.mu.Unlock()
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if off+n > int64(len(s.data)) {
		return 0, errors.New("short file")
	}
	if s.fail != nil {
		if err := s.fail(call, off); err != nil {
			k, _ := w.Write(s.data[off : off+n/2])
			return int64(k), err
		}
	}
	k, err := w.Write(s.data[off : off+n])
	return int64(k), err
}

func patterned(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		if (i/ZeroBlockSize)%3 != 1 { // every third block is zero
			b[i] = byte(i*7 + i>>11)
		}
	}
	return b
}

// sha is the digest a chunk's record holds, digest the one a copy's
// result holds: both the disk digest.
func sha(b []byte) string    { return diskdigest.Bytes(b) }
func digest(b []byte) string { return diskdigest.Bytes(b) }

var transientErr = &esxi.Error{Class: esxi.Transient, Kind: esxi.ErrConnection, Msg: "connection dropped"}

func TestCopyRetryPolicy(t *testing.T) {
	data := patterned(6 * mib)
	tests := []struct {
		name      string
		retries   int
		fail      func(call int, off int64) error
		wantErr   error
		wantCalls int
	}{
		{"transient retried", 3, func(call int, off int64) error {
			if call == 3 || call == 4 { // chunk 1 fails twice
				return transientErr
			}
			return nil
		}, nil, 1 + 3 + 2},
		{"budget exhausted", 2, func(call int, off int64) error {
			if off == 2*mib {
				return transientErr
			}
			return nil
		}, esxi.ErrConnection, 1 + 1 + 3},
		{"permanent not retried", 5, func(call int, off int64) error {
			if off == 2*mib {
				return &esxi.Error{Class: esxi.Permanent, Kind: esxi.ErrFileNotFound, Msg: "gone"}
			}
			return nil
		}, esxi.ErrFileNotFound, 1 + 1 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeSource{data: data, fail: tc.fail}
			dest := destIn(t, "d.raw")
			res, err := Copy(context.Background(), src, Disk{Path: "/vmfs/volumes/ds/x-flat.vmdk", SizeBytes: int64(len(data))}, dest,
				Options{ChunkSize: 2 * mib, Retries: tc.retries, RetryDelay: time.Millisecond})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil || res.SHA256 != digest(data) {
				t.Fatalf("Copy = %+v, %v", res, err)
			}
			if src.calls != tc.wantCalls {
				t.Errorf("%d reads, want %d", src.calls, tc.wantCalls)
			}
			if tc.wantErr == nil {
				got, _ := os.ReadFile(dest)
				if !bytes.Equal(got, data) {
					t.Error("staging file differs (a failed attempt's bytes leaked?)")
				}
			}
		})
	}
}

func TestCopyCancelDuringBackoff(t *testing.T) {
	src := &fakeSource{data: patterned(2 * mib), fail: func(int, int64) error { return transientErr }}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Copy(ctx, src, Disk{Path: "/p", SizeBytes: 2 * mib}, destIn(t, "d"), Options{RetryDelay: time.Hour})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %v", err, time.Since(start))
	}
}

func TestCopyOneWriterPerDest(t *testing.T) {
	block := make(chan struct{})
	src := &fakeSource{data: patterned(2 * mib), block: block}
	dest := destIn(t, "d.raw")
	disk := Disk{Path: "/p", SizeBytes: 2 * mib}
	// The first copy holds the lock while its probe waits on block.
	if err := os.WriteFile(dest, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := Copy(context.Background(), src, disk, dest, Options{})
		errc <- err
	}()
	for {
		src.mu.Lock()
		started := src.calls > 0
		src.mu.Unlock()
		if started {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, err := Copy(context.Background(), &fakeSource{data: src.data}, disk, dest, Options{})
	if err == nil || !strings.Contains(err.Error(), "another copy") {
		t.Errorf("concurrent Copy: %v", err)
	}
	close(block)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestCopyValidation(t *testing.T) {
	src := &fakeSource{data: patterned(mib)}
	for _, tc := range []struct {
		disk Disk
		opts Options
		want string
	}{
		{Disk{Path: "/p", SizeBytes: mib}, Options{ChunkSize: mib + 512}, "multiple of 1 MiB"},
		{Disk{Path: "/p", SizeBytes: mib + 1}, Options{}, "multiple of 512"},
		{Disk{Path: "/p", SizeBytes: 0}, Options{}, "multiple of 512"},
		{Disk{SizeBytes: mib}, Options{}, "source path is empty"},
	} {
		if _, err := Copy(context.Background(), src, tc.disk, destIn(t, "d"), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Copy(%+v, %+v) = %v, want %q", tc.disk, tc.opts, err, tc.want)
		}
	}
	if src.calls != 0 {
		t.Errorf("invalid input read the source %d times", src.calls)
	}
}

func TestChunkWriterZeroBlocks(t *testing.T) {
	f, err := os.Create(destIn(t, "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 3*ZeroBlockSize + 4096 // a short final block
	data := make([]byte, n)
	data[ZeroBlockSize+5] = 1 // block 1 has data; blocks 0 and 2 are zero
	data[n-1] = 2             // the short block has data
	if err := f.Truncate(2 * n); err != nil {
		t.Fatal(err)
	}
	w := newChunkWriter(f, n, n, make([]byte, 0, writeBufferSize), nil)
	// Odd-sized writes straddle block and buffer boundaries.
	for p := data; len(p) > 0; {
		k := min(len(p), 10007)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	rec, got, err := w.finish()
	if err != nil || got != n {
		t.Fatal(got, err)
	}
	if rec.ZeroBytes != 2*ZeroBlockSize || rec.SHA256 != sha(data) || !diskdigest.LeavesMatch(rec.Leaves, n, sha(data)) {
		t.Errorf("record %+v", rec)
	}
	back := make([]byte, n)
	if _, err := f.ReadAt(back, n); err != nil || !bytes.Equal(back, data) {
		t.Errorf("file content differs: %v", err)
	}
	if _, err := w.Write([]byte{1}); !errors.Is(err, errWriterClosed) {
		t.Errorf("write after finish: %v", err)
	}
	w2 := newChunkWriter(f, 0, 10, make([]byte, 0, writeBufferSize), nil)
	if _, err := w2.Write(make([]byte, 11)); err == nil {
		t.Error("writer accepted more than the chunk")
	}
}

func TestJournalIsAtomicJSON(t *testing.T) {
	src := &fakeSource{data: patterned(3 * mib)}
	dest := destIn(t, "d.raw")
	if _, err := Copy(context.Background(), src, Disk{Path: "/p", SizeBytes: 3 * mib}, dest, Options{ChunkSize: mib}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dest + JournalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"version": 2`, `"source": "/p"`, `"size_bytes": 3145728`, `"chunk_size": 1048576`, `"verified_chunks": 3`, `"sha256_state": "`, `"complete": true`, `"zero_bytes"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("journal lacks %s:\n%s", key, b)
		}
	}
	if _, err := os.Stat(dest + JournalSuffix + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Error("temporary journal left behind")
	}
	// A torn or garbage journal is not trusted: the copy starts over.
	if err := os.WriteFile(dest+JournalSuffix, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Copy(context.Background(), src, Disk{Path: "/p", SizeBytes: 3 * mib}, dest, Options{ChunkSize: mib})
	if err != nil || res.ChunksSkipped != 0 || res.SHA256 != digest(src.data) {
		t.Errorf("after a torn journal: %+v, %v", res, err)
	}
	if err := Remove(dest); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dest); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	// A copy whose folder was never made (or is gone) has nothing to
	// remove.
	if err := Remove(filepath.Join(t.TempDir(), "never-made", "disk-0.raw")); err != nil {
		t.Errorf("Remove in a missing folder: %v", err)
	}
	if st, err := Inspect(Disk{Path: "/p", SizeBytes: 3 * mib}, dest, mib); err != nil || st.State != StateAbsent {
		t.Errorf("Inspect after Remove = %+v, %v", st, err)
	}
}

// aheadCounter is a source that, as each chunk's read starts, counts the
// chunks whose reads have started and that the journal on disk does not
// hold yet: what a kill at that moment would make the next copy read
// again.
type aheadCounter struct {
	src       *fakeSource
	dest      string
	chunkSize int64

	mu      sync.Mutex
	started map[int64]bool
	most    int
}

func (a *aheadCounter) ReadRange(ctx context.Context, path string, off, n int64, w io.Writer) (int64, error) {
	if n == a.chunkSize {
		j, _ := loadJournal(a.dest)
		a.mu.Lock()
		a.started[off/a.chunkSize] = true
		lost := 0
		for i := range a.started {
			if j == nil || int(i) >= j.VerifiedChunks && !inAhead(j, int(i)) {
				lost++
			}
		}
		a.most = max(a.most, lost)
		a.mu.Unlock()
	}
	return a.src.ReadRange(ctx, path, off, n, w)
}

func inAhead(j *journal, i int) bool {
	_, ok := j.Ahead[i]
	return ok
}

// However slowly the journal is written, a stream starts a chunk only
// once its last one is recorded: a kill at any moment loses at most one
// chunk per stream.
func TestStreamsStayWithinOneChunkOfTheJournal(t *testing.T) {
	const streams = 2
	data := patterned(24 * mib)
	dest := filepath.Join(t.TempDir(), "disk.raw")
	src := &aheadCounter{src: &fakeSource{data: data}, dest: dest, chunkSize: mib, started: map[int64]bool{}}
	// Recording each chunk takes a while (the Progress callback runs
	// where the journal is written).
	slowRecord := func(Progress) { time.Sleep(15 * time.Millisecond) }
	res, err := Copy(context.Background(), src, Disk{Path: "/p", SizeBytes: int64(len(data))}, dest,
		Options{ChunkSize: mib, Streams: streams, Progress: slowRecord})
	if err != nil || res.SHA256 != digest(data) {
		t.Fatalf("copy: %+v, %v", res, err)
	}
	if src.most > streams {
		t.Errorf("up to %d chunks were read and not yet in the journal, want at most %d (one per stream)", src.most, streams)
	}
	t.Logf("at most %d chunks read ahead of the journal", src.most)
}

// A journal saved as a stream's chunk is recorded, before it joins the
// verified prefix (the next chunk in order among the chunks ahead), is
// trusted on resume: that chunk and the others ahead are not read again,
// only the chunks the journal does not hold.
func TestResumeWithTheNextChunkAhead(t *testing.T) {
	const chunks = 8
	data := patterned(chunks * mib)
	dest := filepath.Join(t.TempDir(), "disk.raw")
	disk := Disk{Path: "/p", SizeBytes: int64(len(data))}
	if _, err := Copy(context.Background(), &fakeSource{data: data}, disk, dest, Options{ChunkSize: mib, Streams: 2}); err != nil {
		t.Fatal(err)
	}
	// As if killed with chunks 0-2 in order and 3 and 5 recorded ahead.
	j := readJournal(t, dest)
	h := diskdigest.New()
	h.Write(data[:3*mib])
	j.Complete, j.Result, j.VerifiedChunks = false, nil, 3
	j.Ahead = map[int]chunkRecord{3: j.Chunks[3], 5: j.Chunks[5]}
	j.Chunks, j.SHA256State = j.Chunks[:3], marshalHash(h)
	if err := j.save(dest); err != nil {
		t.Fatal(err)
	}
	if loadedJ, err := loadJournal(dest); err != nil || loadedJ == nil {
		t.Fatalf("the journal with the next chunk ahead does not load: %v", err)
	}
	src := &aheadCounter{src: &fakeSource{data: data}, dest: dest, chunkSize: mib, started: map[int64]bool{}}
	res, err := Copy(context.Background(), src, disk, dest, Options{ChunkSize: mib, Streams: 2})
	if err != nil || res.SHA256 != digest(data) {
		t.Fatalf("resumed copy: %+v, %v", res, err)
	}
	var read []int64
	for i := range src.started {
		read = append(read, i)
	}
	slices.Sort(read)
	if !slices.Equal(read, []int64{4, 6, 7}) || res.ChunksSkipped != 5 || res.ChunksCopied != 3 {
		t.Errorf("resumed copy read chunks %v (skipped %d, copied %d), want only 4, 6 and 7", read, res.ChunksSkipped, res.ChunksCopied)
	}
}

// A copy with streams reports its verified prefix as it grows, never
// going back, and ends reporting every chunk verified: an upload that
// follows the copy reads ChunksDone and would otherwise wait forever.
func TestStreamsReportTheWholePrefix(t *testing.T) {
	const chunks = 12
	data := patterned(chunks * mib)
	dest := filepath.Join(t.TempDir(), "disk.raw")
	var mu sync.Mutex
	var seen []Progress
	_, err := Copy(context.Background(), &fakeSource{data: data}, Disk{Path: "/p", SizeBytes: int64(len(data))}, dest,
		Options{ChunkSize: mib, Streams: 3, Progress: func(p Progress) {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k < len(seen); k++ {
		if seen[k].ChunksDone < seen[k-1].ChunksDone || seen[k].BytesDone < seen[k-1].BytesDone {
			t.Fatalf("report %d says %d chunks (%d bytes) after %d (%d)", k, seen[k].ChunksDone, seen[k].BytesDone, seen[k-1].ChunksDone, seen[k-1].BytesDone)
		}
	}
	if n := len(seen); n == 0 || seen[n-1].ChunksDone != chunks {
		t.Fatalf("the last report says %+v, want all %d chunks verified", seen[len(seen)-1], chunks)
	}
}
