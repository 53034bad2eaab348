//go:build linux || darwin

package transfer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// The ESXi client offers zero-skipping reads, and Copy uses them.
var _ ZeroSkippingReader = (*esxi.Client)(nil)

// TestCopyWithZeroSkippingReads copies a thin disk with the ESXi client as
// the source, as a migration does: with
// Python on the host only the data crosses the wire, without it everything
// does, and both copies verify against the disk's digest.
func TestCopyWithZeroSkippingReads(t *testing.T) {
	const size = 96 * mib
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
		{"python", "python3", 3 * mib, 3*mib + 64*1024},
		{"no python", "", size, size + 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newSim(t)
			env.srv.SetPython(tc.python)
			_, disk := env.addDisk(t, "thin", size, content)
			env.srv.ResetStats()
			res, err := Copy(context.Background(), env.c, diskOf(disk),
				filepath.Join(t.TempDir(), "disk.raw"), Options{ChunkSize: 32 * mib})
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != disk.SHA256() {
				t.Fatalf("copy digest %s, want %s", res.SHA256, disk.SHA256())
			}
			// Stdout bytes include a few small commands (stat, probe) besides the reads.
			sent := env.srv.Stats().StdoutBytes
			if sent < tc.minWire || sent > tc.maxWire {
				t.Errorf("host sent %d bytes, want between %d and %d", sent, tc.minWire, tc.maxWire)
			}
			if res.ZeroBytes < size-4*mib {
				t.Errorf("ZeroBytes %d: the staging file should keep the zero runs as holes", res.ZeroBytes)
			}
		})
	}
}
