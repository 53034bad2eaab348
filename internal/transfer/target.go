package transfer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// A copy's destination is a regular file (the staging file of a local
// copy, or disk.img in a Filesystem-mode claim) or a block device (a
// Block-mode claim). The copy never writes an all-zero block, so every
// byte it has not verified must read as zeros:
//
//   - A file is truncated and extended: the unverified bytes are holes.
//   - A block device cannot be truncated. Its unverified range is zeroed
//     with fallocate(PUNCH_HOLE|KEEP_SIZE), which on a block device is
//     the kernel's zero-out without fallback: the device unmaps the range
//     (or writes zeros by an offload) and guarantees it reads as zeros, or
//     refuses. Where it refuses, nothing is zeroed ahead; instead each
//     chunk writer reads back every zero block it skips and writes zeros
//     only where the device does not already read zeros.
//
// A block device may be larger than the disk (storage rounds claims up);
// only its first SizeBytes are the disk's, the rest is left untouched.

// blockAlign is the alignment of the ranges handed to the device's
// zero-out: the largest logical block size in use (the range starts on a
// chunk boundary; a disk's end may fall inside a 4 KiB block).
const blockAlign = 4096

// errCannotZero: the block device cannot zero a range without writing it.
var errCannotZero = errors.New("the device cannot zero a range without writing it")

// isBlockDevice reports whether fi describes a block device node.
func isBlockDevice(fi fs.FileInfo) bool {
	return fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
}

// fileSize is f's size: a regular file's length, or a block device's
// capacity (which stat reports as 0).
func fileSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat staging file: %w", err)
	}
	if !isBlockDevice(fi) {
		return fi.Size(), nil
	}
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of block device %s: %w", f.Name(), err)
	}
	return n, nil
}

// checkTarget classifies the adopted destination: a regular file or a
// block device at least SizeBytes large, whose journal is kept elsewhere.
func (c *copier) checkTarget() error {
	fi, err := c.f.Stat()
	if err != nil {
		return fmt.Errorf("stat staging file: %w", err)
	}
	switch {
	case fi.Mode().IsRegular():
		return nil
	case !isBlockDevice(fi):
		return fmt.Errorf("%s is neither a regular file nor a block device (%s)", c.dest, fi.Mode().Type())
	case c.opts.JournalPath == "":
		return fmt.Errorf("%s is a block device: its journal needs a path of its own on a file system (Options.JournalPath)", c.dest)
	}
	c.block = true
	size, err := fileSize(c.f)
	if err != nil {
		return err
	}
	if size < c.disk.SizeBytes {
		return fmt.Errorf("block device %s holds %d bytes, less than the disk's %d", c.dest, size, c.disk.SizeBytes)
	}
	return nil
}

// extent is how much of the destination belongs to the copy: a file's
// size, or SizeBytes of a block device (checked to hold that many).
func (c *copier) extent() (int64, error) {
	if c.block {
		return c.disk.SizeBytes, nil
	}
	return fileSize(c.f)
}

// resetBlockFrom makes [off, SizeBytes) of a block device read as zeros
// (or leaves that to the chunk writers) and flushes the device.
func (c *copier) resetBlockFrom(off int64) error {
	if err := c.clear(off, c.disk.SizeBytes-off); err != nil {
		return fmt.Errorf("zero block device: %w", err)
	}
	if err := c.sync(); err != nil {
		return fmt.Errorf("fsync block device: %w", err)
	}
	return nil
}

// clear makes [off, off+n) of the destination read as zeros: a hole in a
// file, the device's zero-out on a block device. On a block device that
// cannot zero without writing, it switches the copy to verifyZeros (the
// chunk writers then make every zero block right as they pass it) and
// clears nothing.
func (c *copier) clear(off, n int64) error {
	if !c.block {
		return sparsefile.Punch(c.f, off, n)
	}
	if n <= 0 || c.verifyZeros.Load() {
		return nil
	}
	aligned := (off+n)&^(blockAlign-1) - off
	if aligned > 0 {
		err := zeroBlockRange(c.f, off, aligned)
		if errors.Is(err, errCannotZero) {
			c.verifyZeros.Store(true)
			return nil
		}
		if err != nil {
			return err
		}
	} else {
		aligned = 0
	}
	return sparsefile.ZeroFill(c.f, off+aligned, n-aligned)
}
