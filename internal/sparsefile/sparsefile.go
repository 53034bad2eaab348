// Package sparsefile walks a local file's data and holes, as its file
// system reports them (lseek SEEK_DATA and SEEK_HOLE), for code that
// treats holes as zeros without reading them.
package sparsefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/zerosum"
)

// seekData and seekHole are lseek's SEEK_DATA and SEEK_HOLE on Linux; on
// systems where these values mean something else or nothing, the call
// fails and the file is reported as all data.
const (
	seekData = 3
	seekHole = 4
)

// Walk calls fn for each span of [off, end) of f in order, with data true
// for a span that may hold data and false for a hole (zeros). A file
// system that does not report holes gives one data span. f's offset is
// moved; reads and writes at explicit offsets are unaffected.
func Walk(f *os.File, off, end int64, fn func(off, n int64, data bool) error) error {
	for pos := off; pos < end; {
		data, err := f.Seek(pos, seekData)
		switch {
		case errors.Is(err, syscall.ENXIO):
			data = end // only a hole is left
		case err != nil:
			return fn(pos, end-pos, true) // holes are not reported here
		}
		data = min(data, end)
		if data > pos {
			if err := fn(pos, data-pos, false); err != nil {
				return err
			}
		}
		if data == end {
			return nil
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil {
			return fn(data, end-data, true)
		}
		hole = min(max(hole, data+1), end)
		if err := fn(data, hole-data, true); err != nil {
			return err
		}
		pos = hole
	}
	return nil
}

// WalkFile opens the file at path and walks the whole of it as Walk does,
// handing fn the open file so that it can read the spans.
func WalkFile(path string, fn func(f *os.File, off, n int64, data bool) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return Walk(f, 0, fi.Size(), func(off, n int64, data bool) error { return fn(f, off, n, data) })
}

// HoleLen returns how many bytes of f from off, up to end, are a hole: 0
// when off holds data or the file system does not report holes. Past the
// end of the file is a hole.
func HoleLen(f *os.File, off, end int64) int64 {
	if off >= end {
		return 0
	}
	data, err := f.Seek(off, seekData)
	switch {
	case errors.Is(err, syscall.ENXIO):
		return end - off
	case err != nil:
		return 0
	}
	return max(min(data, end)-off, 0)
}

// Sum is a file's content digest as Hash computes it.
type Sum struct {
	// SHA256 is the hex disk digest (package diskdigest) of the whole
	// file.
	SHA256 string
	// Bytes is the file's size; HoleBytes how many of them are holes.
	Bytes, HoleBytes int64
}

// Hash is the disk digest (package diskdigest) of the file at path, its
// holes taken as the zeros they read as without being read.
func Hash(ctx context.Context, path string) (Sum, error) { return HashPrefix(ctx, path, -1) }

// HashPrefix is Hash of the first n bytes of the file or block device at
// path (all of it when n < 0); a shorter one is an error. A block device
// reports no holes: all of it is read.
func HashPrefix(ctx context.Context, path string, n int64) (Sum, error) {
	return hashPrefix(ctx, path, n, diskdigest.New())
}

// HashPrefixLeaves is HashPrefix, with the hashes of the prefix's 1 MiB
// leaves (diskdigest.Hasher.Leaves), so that a later change can update
// the digest by hashing only the leaves it touched (diskdigest.FromLeaves).
func HashPrefixLeaves(ctx context.Context, path string, n int64) (Sum, []byte, error) {
	h := diskdigest.New()
	h.KeepLeaves()
	s, err := hashPrefix(ctx, path, n, h)
	if err != nil {
		return Sum{}, nil, err
	}
	return s, h.Leaves(), nil
}

func hashPrefix(ctx context.Context, path string, n int64, h *diskdigest.Hasher) (Sum, error) {
	buf := make([]byte, 1<<20)
	var s Sum
	f, err := os.Open(path)
	if err != nil {
		return Sum{}, fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	// The end, not Stat's size: a block device's is 0.
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return Sum{}, fmt.Errorf("hash %s: %w", path, err)
	}
	if n < 0 {
		n = size
	}
	if size < n {
		return Sum{}, fmt.Errorf("hash %s: it holds %d bytes, not the %d hashed", path, size, n)
	}
	err = Walk(f, 0, n, func(off, k int64, data bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.Bytes = off + k
		if !data {
			s.HoleBytes += k
			zerosum.Write(h, k)
			return nil
		}
		got, err := io.CopyBuffer(h, io.NewSectionReader(f, off, k), buf)
		if err == nil && got != k {
			err = fmt.Errorf("read %d of %d bytes at %d: %w", got, k, off, io.ErrUnexpectedEOF)
		}
		return err
	})
	if err != nil {
		return Sum{}, fmt.Errorf("hash %s: %w", path, err)
	}
	s.SHA256 = h.Hex()
	return s, nil
}

// HashLeaf is the hash of leaf i (diskdigest.LeafSum) of a disk of size
// bytes held in f: its holes are not read.
func HashLeaf(f *os.File, i, size int64, buf []byte) ([diskdigest.Size]byte, error) {
	off := i * diskdigest.LeafSize
	n := min(diskdigest.LeafSize, size-off)
	if off < 0 || n <= 0 {
		return [diskdigest.Size]byte{}, fmt.Errorf("leaf %d is outside a %d-byte disk", i, size)
	}
	p := buf[:n]
	clear(p)
	err := Walk(f, off, off+n, func(o, k int64, data bool) error {
		if !data {
			return nil
		}
		_, err := f.ReadAt(p[o-off:o-off+k], o)
		return err
	})
	if err != nil {
		return [diskdigest.Size]byte{}, fmt.Errorf("hash leaf %d of %s: %w", i, f.Name(), err)
	}
	return diskdigest.LeafSum(p), nil
}

// HoleBytes is how many of the first n bytes of the file at path are
// holes (none on a block device); nothing is read.
func HoleBytes(path string, n int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var holes int64
	err = Walk(f, 0, n, func(_, k int64, data bool) error {
		if !data {
			holes += k
		}
		return nil
	})
	return holes, err
}
