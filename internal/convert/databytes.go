package convert

import (
	"errors"
	"os"
	"syscall"
)

// seekData and seekHole are lseek's SEEK_DATA and SEEK_HOLE (Linux, and
// the BSDs' values differ: there the call fails and the whole file counts
// as data).
const (
	seekData = 3
	seekHole = 4
)

// DataBytes returns how many bytes of the file at path hold data, as its
// file system's holes tell (SEEK_DATA/SEEK_HOLE). A file system that does
// not report holes makes every byte data.
func DataBytes(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	var data int64
	for off := int64(0); off < size; {
		start, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return size, nil // holes are not reported here
		}
		end, err := f.Seek(start, seekHole)
		if err != nil {
			return size, nil
		}
		end = min(max(end, start), size)
		data += end - start
		if end <= off {
			break
		}
		off = end
	}
	return data, nil
}
