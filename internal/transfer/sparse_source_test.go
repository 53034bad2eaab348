//go:build linux || darwin

package transfer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// The ESXi client offers zero-skipping reads with checked digests, and
// Copy uses them.
var (
	_ ZeroSkippingReader = (*esxi.Client)(nil)
	_ LeafRangeReader    = (*esxi.Client)(nil)
)

// TestCopyWithZeroSkippingReads copies a thin disk with the ESXi client as
// the source, as a migration does: with
// Python on the host only the data crosses the wire, without it everything
// does, and both copies verify against the disk's digest. The journal's
// chunk digests, taken from the host's checked digests with Python and
// from the staging file without it, are those of the disk's content,
// with one stream and with two.
func TestCopyWithZeroSkippingReads(t *testing.T) {
	// Three whole chunks and a last one with a tail under 1 MiB, read as
	// two ranges.
	const size = 96*mib + 1536
	// 3 MiB of data in three runs; the rest of the disk is zeros.
	content := []esxisim.Extent{
		{Offset: 0, Length: mib, Seed: 1},
		{Offset: 40*mib + 4096, Length: mib, Seed: 2},
		{Offset: size - mib, Length: mib, Seed: 3},
	}
	for _, tc := range []struct {
		name    string
		python  string
		minWire int64
		maxWire int64
	}{
		{"python", esxisim.HostPython(), 3 * mib, 3*mib + 64*1024},
		{"no python", "", size, size + 4096},
	} {
		for _, streams := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d streams", tc.name, streams), func(t *testing.T) {
				copyZeroSkipping(t, tc.python, streams, size, content, tc.minWire, tc.maxWire)
			})
		}
	}
}

// copyZeroSkipping copies a disk holding content through the simulated
// host's client and checks the copy, its wire bytes and its journal.
func copyZeroSkipping(t *testing.T, python string, streams int, size int64, content []esxisim.Extent, minWire, maxWire int64) {
	env := newSim(t)
	env.srv.SetPython(python)
	_, disk := env.addDisk(t, "thin", size, content)
	env.srv.ResetStats()
	dest := filepath.Join(t.TempDir(), "disk.raw")
	var mu sync.Mutex
	var last Progress
	opts := Options{ChunkSize: 32 * mib, Streams: streams, Progress: func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		last = p
	}}
	if streams > 1 {
		opts.Sources = []RangeReader{env.c, env.c}
	}
	res, err := Copy(context.Background(), env.c, diskOf(disk), dest, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != disk.SHA256() {
		t.Fatalf("copy digest %s, want %s", res.SHA256, disk.SHA256())
	}
	// Stdout bytes include a few small commands (stat, probe) besides the reads.
	sent := env.srv.Stats().StdoutBytes
	if sent < minWire || sent > maxWire {
		t.Errorf("host sent %d bytes, want between %d and %d", sent, minWire, maxWire)
	}
	j, err := loadJournal(dest)
	if err != nil || j == nil || len(j.Chunks) != 4 {
		t.Fatalf("journal %+v, %v: want 4 chunks", j, err)
	}
	src, err := os.ReadFile(disk.LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range j.Chunks {
		part := src[int64(i)*32*mib : min(int64(i+1)*32*mib, size)]
		if want := fmt.Sprintf("%x", diskdigest.Sum(part)); c.SHA256 != want {
			t.Errorf("chunk %d: journal digest %s, content %s", i, c.SHA256, want)
		}
		if c.Leaves != nil {
			t.Errorf("chunk %d of the verified prefix keeps %d bytes of leaf hashes in the journal", i, len(c.Leaves))
		}
	}
	// With the host's checked leaf hashes nothing is hashed again: not the
	// chunk, not the whole file's digest from the staging file.
	if mu.Lock(); python != "" && last.Stages.Hashing != 0 {
		t.Errorf("%v spent hashing the staging file although the host's leaf hashes were checked", last.Stages.Hashing)
	}
	mu.Unlock()
	if res.ZeroBytes < size-4*mib {
		t.Errorf("ZeroBytes %d: the staging file should keep the zero runs as holes", res.ZeroBytes)
	}
}
