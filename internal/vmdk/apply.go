package vmdk

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// ApplyStats is what applying a delta changed.
type ApplyStats struct {
	// DataBytes were written from the delta's allocated grains (all-zero
	// grains among them are punched instead, so the image stays sparse);
	// ZeroBytes were grains the delta marks zero, punched.
	DataBytes, ZeroBytes int64
	// Touched are the indexes of the disk's 1 MiB leaves
	// (diskdigest.LeafSize) that the delta wrote or zeroed, ascending:
	// the only ones whose digest can have changed.
	Touched []int64
}

// touch adds the leaves [off, off+n) overlaps to Touched.
func (st *ApplyStats) touch(off, n int64) {
	for i := off / diskdigest.LeafSize; i <= (off+n-1)/diskdigest.LeafSize; i++ {
		if k := len(st.Touched); k == 0 || st.Touched[k-1] < i {
			st.Touched = append(st.Touched, i)
		}
	}
}

// applyBuffer bounds what ApplyDelta holds of a run of grains at once.
const applyBuffer = 1 << 20

// ApplyDelta writes what the vmfsSparse or seSparse extent file at path
// holds over dst, a raw image of the same capacity holding the delta's
// parent as the guest saw it: allocated grains are written at their disk
// offsets, grains the delta marks zero become holes, unallocated grains
// are left as they are. The result is the guest-visible disk one link up
// the chain, as qemu reads the chain, without a second copy of the disk.
//
// Applying the same delta again over its own result gives the same image
// (every write is of the delta's own bytes at fixed offsets), so a process
// killed while applying runs it again from the start. dst is not synced:
// the caller syncs before recording that the delta was applied.
func ApplyDelta(ctx context.Context, path string, format Format, dst *os.File) (ApplyStats, error) {
	return ApplyDeltaFunc(ctx, path, format, dst, nil)
}

// ApplyDeltaFunc is ApplyDelta that also calls leafDone with the index of
// each touched leaf, in ascending order, as soon as the apply has passed
// it: the leaf's bytes in dst are then final (not yet synced), and can be
// hashed while the rest of the delta is applied. leafDone is called from
// ApplyDeltaFunc's goroutine; every touched leaf is passed exactly once
// when it returns without an error.
func ApplyDeltaFunc(ctx context.Context, path string, format Format, dst *os.File, leafDone func(leaf int64)) (ApplyStats, error) {
	var st ApplyStats
	passed := 0 // st.Touched[:passed] were given to leafDone
	pass := func(upTo int64) {
		for ; leafDone != nil && passed < len(st.Touched) && (st.Touched[passed]+1)*diskdigest.LeafSize <= upTo; passed++ {
			leafDone(st.Touched[passed])
		}
	}
	e, err := openSparse(path, format)
	if err != nil {
		return st, fmt.Errorf("vmdk: %w", err)
	}
	defer e.f.Close()
	capacity := e.capacity * SectorSize
	fi, err := dst.Stat()
	if err != nil {
		return st, err
	}
	// A block device (a Block-mode claim) may be larger than the disk:
	// its first capacity bytes are the disk. Stat gives it no size.
	size, device := fi.Size(), fi.Mode()&os.ModeDevice != 0
	if device {
		if size, err = dst.Seek(0, io.SeekEnd); err != nil {
			return st, err
		}
	}
	if size != capacity && !(device && size > capacity) {
		return st, fmt.Errorf("vmdk: %s describes a %d-byte disk, the image is %d bytes", path, capacity, size)
	}
	buf := make([]byte, applyBuffer)
	for off := int64(0); off < capacity; {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		state, at, run, err := e.lookup(off)
		if err != nil {
			return st, fmt.Errorf("vmdk: %s: %w", path, err)
		}
		if run <= 0 {
			return st, fmt.Errorf("vmdk: %s: no progress at offset %d", path, off)
		}
		n := min(run, capacity-off)
		if state == stateData || state == stateZero {
			st.touch(off, n)
		}
		switch state {
		case stateData:
			if err := copyGrains(e.f, dst, buf, at, off, n, &st); err != nil {
				return st, fmt.Errorf("vmdk: %s: grains at %d: %w", path, off, err)
			}
		case stateZero:
			if err := sparsefile.Punch(dst, off, n); err != nil {
				return st, fmt.Errorf("vmdk: zeroing %d bytes at %d: %w", n, off, err)
			}
			st.ZeroBytes += n
		}
		off += n
		pass(off)
	}
	pass(capacity + diskdigest.LeafSize) // with the last, shorter leaf
	return st, nil
}

// copyGrains copies n bytes of grains from src at from to dst at to, in
// pieces of buf; all-zero pieces become holes.
func copyGrains(src, dst *os.File, buf []byte, from, to, n int64, st *ApplyStats) error {
	for done := int64(0); done < n; {
		p := buf[:min(int64(len(buf)), n-done)]
		if err := readFull(src, p, from+done); err != nil {
			return err
		}
		if isZero(p) {
			if err := sparsefile.Punch(dst, to+done, int64(len(p))); err != nil {
				return err
			}
		} else if _, err := dst.WriteAt(p, to+done); err != nil {
			return err
		}
		st.DataBytes += int64(len(p))
		done += int64(len(p))
	}
	return nil
}

func isZero(p []byte) bool {
	for len(p) >= 64 {
		if !bytes.Equal(p[:64], zeros64[:]) {
			return false
		}
		p = p[64:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

var zeros64 [64]byte
