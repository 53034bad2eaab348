package transfer

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// slowStart is a source whose every range starts after delay, as a host
// whose interpreter starts per range.
type slowStart struct {
	fakeSource
	delay time.Duration
}

func (s *slowStart) ReadRange(ctx context.Context, path string, off, n int64, w io.Writer) (int64, error) {
	time.Sleep(s.delay)
	return s.fakeSource.ReadRange(ctx, path, off, n, w)
}

// The last progress report says where the copy spent its time: each
// range's start-up as Waiting, at least the delay per range; writes,
// fsyncs and the journal each measured; no time hashing the staging file
// again for the whole file's digest, which takes each chunk's leaf hashes.
func TestProgressReportsStages(t *testing.T) {
	const delay = 20 * time.Millisecond
	for _, streams := range []int{1, 2} {
		data := patterned(8 * mib)
		src := &slowStart{fakeSource: fakeSource{data: data}, delay: delay}
		var mu sync.Mutex
		var last Progress
		opts := Options{ChunkSize: mib, Streams: streams, Progress: func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			last = p
		}}
		if _, err := Copy(t.Context(), src, Disk{Path: "/vmfs/volumes/ds/vm/vm-flat.vmdk", SizeBytes: int64(len(data))},
			filepath.Join(t.TempDir(), "disk.raw"), opts); err != nil {
			t.Fatal(err)
		}
		st := last.Stages
		if st.Waiting < 8*delay {
			t.Errorf("streams %d: Waiting %v, want at least 8 ranges x %v", streams, st.Waiting, delay)
		}
		if st.Writing <= 0 || st.Syncing <= 0 || st.Journal <= 0 {
			t.Errorf("streams %d: writing %v, syncing %v, journal %v: each should be measured", streams, st.Writing, st.Syncing, st.Journal)
		}
		if st.Hashing != 0 {
			t.Errorf("streams %d: %v hashing the staging file again: the chunks' leaf hashes make the whole file's digest", streams, st.Hashing)
		}
		if st.Reading < 0 {
			t.Errorf("streams %d: negative Reading %v", streams, st.Reading)
		}
	}
}
