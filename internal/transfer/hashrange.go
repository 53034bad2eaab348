package transfer

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"syscall"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/zerosum"
)

// seekData and seekHole are lseek's SEEK_DATA and SEEK_HOLE on Linux;
// elsewhere the call fails and the range is read as it is.
const (
	seekData = 3
	seekHole = 4
)

// hashRange writes [off, off+n) of f to h, as reading it would: the
// file's holes (SEEK_DATA/SEEK_HOLE) as zeros from zerosum, without
// reading them, the rest read. The staging file of a thin disk is mostly
// holes, and reading them back only had the kernel fill pages with zeros.
func hashRange(h hash.Hash, f *os.File, off, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < off+n {
		return fmt.Errorf("the staging file is %d bytes, short of %d", fi.Size(), off+n)
	}
	end := off + n
	for pos := off; pos < end; {
		data, err := f.Seek(pos, seekData)
		switch {
		case errors.Is(err, syscall.ENXIO):
			data = end // only a hole is left
		case err != nil:
			return copyRange(h, f, pos, end-pos) // holes are not reported here
		}
		data = min(data, end)
		zerosum.Write(h, data-pos)
		if data == end {
			return nil
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil {
			return copyRange(h, f, data, end-data)
		}
		hole = min(max(hole, data+1), end)
		if err := copyRange(h, f, data, hole-data); err != nil {
			return err
		}
		pos = hole
	}
	return nil
}

func copyRange(h hash.Hash, f *os.File, off, n int64) error {
	got, err := io.Copy(h, io.NewSectionReader(f, off, n))
	if err == nil && got != n {
		err = fmt.Errorf("read %d of %d bytes at offset %d", got, n, off)
	}
	return err
}
