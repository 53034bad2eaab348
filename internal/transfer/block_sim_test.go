//go:build linux

package transfer

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/loopdev"
)

// staleByte fills a block device before a copy, as a claim that held
// someone else's data would: every zero run the copy skips must still
// read back as zeros.
const staleByte = 0xa5

// newBlockDevice attaches a loop device of size bytes, full of staleByte,
// and returns its node and backing file.
func newBlockDevice(t *testing.T, size int64) (dev, backing string) {
	t.Helper()
	backing = filepath.Join(t.TempDir(), "claim.raw")
	if err := os.WriteFile(backing, bytes.Repeat([]byte{staleByte}, int(size)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := loopdev.Attach(backing)
	if err != nil {
		t.Fatalf("this test writes to a loop device: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Detach(); err != nil {
			t.Error(err)
		}
	})
	return d.Path, backing
}

// sha256Prefix is the disk digest of the first n bytes of path.
func sha256Prefix(t *testing.T, path string, n int64) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := diskdigest.New()
	if got, err := io.Copy(h, io.LimitReader(f, n)); err != nil || got != n {
		t.Fatalf("read %d of %d bytes of %s: %v", got, n, path, err)
	}
	return h.Hex()
}

// cannotZero makes block devices refuse the zero-out for one test, as
// storage without unmap or write-zeroes does.
func cannotZero(t *testing.T) {
	saved := zeroBlockRange
	zeroBlockRange = func(*os.File, int64, int64) error { return errCannotZero }
	t.Cleanup(func() { zeroBlockRange = saved })
}

// A disk copied onto a block device larger than the disk (a Block-mode
// claim) reads back equal to the source, its zero runs as zeros over stale
// data, with the device zeroed ahead where it can be (holes in the loop
// device's file) and zero blocks checked where it cannot; the bytes past
// the disk are left alone, and a second Copy is answered by the journal.
func TestCopyToBlockDevice(t *testing.T) {
	const size = 24*mib + 3584 // a tail that ends inside a 4 KiB block
	for _, tc := range []struct {
		name       string
		zeroOut    bool
		streams    int
		pythonHost bool
	}{
		{"zero-out, one stream, dd", true, 1, false},
		{"zero-out, three streams, sparse reader", true, 3, true},
		{"no zero-out, one stream, dd", false, 1, false},
		{"no zero-out, three streams, sparse reader", false, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.zeroOut {
				cannotZero(t)
			}
			python := ""
			if tc.pythonHost {
				python = readModes[1].python
			}
			env := newSimWith(t, python)
			_, df := env.addDisk(t, "blk", size, mixedContent(size))
			dev, backing := newBlockDevice(t, size+2*mib)
			journal := filepath.Join(t.TempDir(), "disk.journal")
			opts := Options{ChunkSize: 2 * mib, Streams: tc.streams, JournalPath: journal}
			if tc.streams > 1 {
				_, opts.Sources = streamSources(t, env, 4, tc.streams)
			}
			res, err := Copy(ctxT(t), env.c, diskOf(df), dev, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != df.SHA256() || res.Bytes != size || res.ZeroBytes == 0 {
				t.Errorf("result %+v, want sha %s and zero bytes counted", res, df.SHA256())
			}
			if got := sha256Prefix(t, dev, size); got != df.SHA256() {
				t.Errorf("the device's first %d bytes hash to %s, the source to %s", size, got, df.SHA256())
			}
			raw, err := os.ReadFile(backing)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw[size:], bytes.Repeat([]byte{staleByte}, len(raw)-size)) {
				t.Error("the copy wrote past the disk's end")
			}
			if used := allocated(t, backing); tc.zeroOut && used > 12*mib {
				t.Errorf("the loop device's file holds %d bytes: the zero-out left no holes", used)
			}
			if _, err := os.Stat(dev + JournalSuffix); err == nil {
				t.Errorf("a journal was written beside the device node")
			}
			again, err := Copy(ctxT(t), env.c, diskOf(df), dev, opts)
			if err != nil || !sameResult(again, res) {
				t.Errorf("second copy: %+v, %v; want %+v", again, err, res)
			}
		})
	}
}

// A copy onto a block device stopped part-way resumes from its journal
// (kept on a file system) and does not read verified chunks again.
func TestCopyToBlockDeviceResumes(t *testing.T) {
	const size, chunk = 16 * mib, 1 * mib
	env := newSim(t)
	_, df := env.addDisk(t, "blk-resume", size, mixedContent(size))
	dev, _ := newBlockDevice(t, size)
	journal := filepath.Join(t.TempDir(), "disk.journal")
	ctx, cancel := context.WithCancel(ctxT(t))
	opts := Options{ChunkSize: chunk, JournalPath: journal, Progress: func(p Progress) {
		if p.ChunksDone >= 5 {
			cancel()
		}
	}}
	if _, err := Copy(ctx, env.c, diskOf(df), dev, opts); err == nil {
		t.Fatal("the copy finished although it was cancelled")
	}
	verified := readJournalAt(t, journal).VerifiedChunks
	if verified < 5 {
		t.Fatalf("journal holds %d chunks, want at least 5", verified)
	}
	env.srv.ResetStats()
	opts.Progress = nil
	res, err := Copy(ctxT(t), env.c, diskOf(df), dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != df.SHA256() || res.ChunksSkipped != verified || res.ChunksCopied != size/chunk-verified {
		t.Errorf("result %+v, want sha %s with %d chunks skipped", res, df.SHA256(), verified)
	}
	assertNoReadBelow(t, hostReads(env.srv), int64(verified)*chunk)
	if got := sha256Prefix(t, dev, size); got != df.SHA256() {
		t.Errorf("device hashes to %s, source to %s", got, df.SHA256())
	}
}

// A block device's journal cannot sit beside its node: Copy wants a path.
func TestCopyToBlockDeviceNeedsJournalPath(t *testing.T) {
	env := newSim(t)
	_, df := env.addDisk(t, "blk-nojournal", 4*mib, nil)
	dev, _ := newBlockDevice(t, 4*mib)
	_, err := Copy(ctxT(t), env.c, diskOf(df), dev, Options{ChunkSize: mib})
	if err == nil || !strings.Contains(err.Error(), "JournalPath") {
		t.Errorf("copy to a block device without a journal path: %v", err)
	}
}

func readJournalAt(tb testing.TB, path string) *journal {
	tb.Helper()
	j, err := loadJournalAt(path)
	if err != nil || j == nil {
		tb.Fatalf("journal %s: %v, %v", path, j, err)
	}
	return j
}

// A block claim recreated (zeroed) while its journal's claim was kept is
// not taken for the copy the journal describes, even when the last chunk
// the journal verified is all zeros and so reads back the same: the data
// before it is copied again, and the device ends equal to the source.
func TestCopyToReplacedBlockDevice(t *testing.T) {
	const size, chunk = 16 * mib, 1 * mib
	env := newSim(t)
	// Data in the first chunks only: every chunk after them is zero.
	_, df := env.addDisk(t, "blk-replaced", size, []esxisim.Extent{{Offset: 0, Length: 3 * mib, Seed: 11}})
	dev, backing := newBlockDevice(t, size)
	journal := filepath.Join(t.TempDir(), "disk.journal")
	ctx, cancel := context.WithCancel(ctxT(t))
	opts := Options{ChunkSize: chunk, JournalPath: journal, Progress: func(p Progress) {
		if p.ChunksDone >= 6 {
			cancel()
		}
	}}
	if _, err := Copy(ctx, env.c, diskOf(df), dev, opts); err == nil {
		t.Fatal("the copy finished although it was cancelled")
	}
	if verified := readJournalAt(t, journal).VerifiedChunks; verified < 6 {
		t.Fatalf("journal holds %d chunks, want at least 6", verified)
	}
	// The claim is recreated: a new, zeroed device behind the same path.
	if err := os.WriteFile(backing, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.Progress = nil
	res, err := Copy(ctxT(t), env.c, diskOf(df), dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Prefix(t, dev, size); got != df.SHA256() || res.SHA256 != df.SHA256() {
		t.Fatalf("device hashes to %s, result says %s, source is %s", got, res.SHA256, df.SHA256())
	}
	if res.ChunksSkipped != 0 {
		t.Errorf("%d chunks skipped on a device that held none of them", res.ChunksSkipped)
	}
}
