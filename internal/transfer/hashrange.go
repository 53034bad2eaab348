package transfer

import (
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/zerosum"
)

// hashRange writes [off, off+n) of f to h, as reading it would: the
// file's holes as zeros from zerosum, without reading them, the rest read.
// The staging file of a thin disk is mostly holes, and reading them back
// only had the kernel fill pages with zeros.
func hashRange(h io.Writer, f *os.File, off, n int64) error {
	size, err := fileSize(f)
	if err != nil {
		return err
	}
	if size < off+n {
		return fmt.Errorf("the staging file is %d bytes, short of %d", size, off+n)
	}
	return sparsefile.Walk(f, off, off+n, func(off, n int64, data bool) error {
		if !data {
			zerosum.Write(h, n)
			return nil
		}
		got, err := io.Copy(h, io.NewSectionReader(f, off, n))
		if err == nil && got != n {
			err = fmt.Errorf("read %d of %d bytes at offset %d", got, n, off)
		}
		return err
	})
}

// addToWhole adds chunk [off, off+n) to whole: by the leaf hashes its
// record carries when they are the chunk's digest's (and returns them),
// else by hashing the chunk from the staging file (nil leaves).
func (c *copier) addToWhole(whole hash.Hash, r chunkRecord, off, n int64) ([]byte, error) {
	if d, ok := whole.(*diskdigest.Hasher); ok && diskdigest.LeavesMatch(r.Leaves, n, r.SHA256) && d.AddLeaves(r.Leaves) {
		return r.Leaves, nil
	}
	return nil, c.hashRange(whole, off, n)
}

// multiHash writes to each of its hashes, zero runs as zero runs (a disk
// digest then hashes none of them).
type multiHash []io.Writer

func (m multiHash) Write(p []byte) (int, error) {
	for _, h := range m {
		h.Write(p)
	}
	return len(p), nil
}

func (m multiHash) WriteZeros(n int64) {
	for _, h := range m {
		zerosum.Write(h, n)
	}
}
