package convert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TmpSuffix marks a converted image that is not finished: ConvertCopies
// writes <dst>.tmp and renames it to <dst> only once the conversion
// succeeded and the image is hashed and synced.
const TmpSuffix = ".tmp"

// ConvertedImage is one image a conversion produced.
type ConvertedImage struct {
	Path   string
	SHA256 string
	Bytes  int64
}

// ConvertCopies converts the guest whose disks are images on copies of
// them, never on the images themselves, so that a conversion cut short
// leaves nothing half converted under a final name. Each image is copied,
// keeping its holes, to dsts[i]+TmpSuffix; the copies are converted
// together (a guest's file systems may span its disks); each is then
// hashed, synced and renamed to dsts[i]. The images are only read. On
// failure the copies are removed and the images are as they were.
//
// The caller records the evidence and the hashes after ConvertCopies
// returns; a process that dies before that finds either leftovers (which
// the next ConvertCopies overwrites) or complete images it has no record
// of, which it converts again from the unchanged images.
func (v *V2V) ConvertCopies(ctx context.Context, images []V2VDisk, dsts []string, opts V2VOptions) (V2VEvidence, []ConvertedImage, error) {
	if len(images) == 0 || len(images) != len(dsts) {
		return V2VEvidence{}, nil, fmt.Errorf("convert: %d image(s) for %d destination(s)", len(images), len(dsts))
	}
	copies := make([]V2VDisk, len(images))
	cleanup := func() {
		for _, d := range dsts {
			_ = os.Remove(d + TmpSuffix)
		}
	}
	for i, img := range images {
		tmp := dsts[i] + TmpSuffix
		if err := CopySparse(img.Path, tmp); err != nil {
			cleanup()
			return V2VEvidence{}, nil, err
		}
		copies[i] = V2VDisk{Path: tmp, Format: img.Format}
	}
	ev, err := v.Convert(ctx, copies, opts)
	if err != nil {
		cleanup()
		return ev, nil, err
	}
	out := make([]ConvertedImage, len(dsts))
	for i, d := range dsts {
		tmp := d + TmpSuffix
		sum, n, err := hashFile(tmp)
		if err == nil {
			err = fsyncFile(tmp)
		}
		if err != nil {
			cleanup()
			return ev, nil, err
		}
		out[i] = ConvertedImage{Path: d, SHA256: sum, Bytes: n}
	}
	for i, d := range dsts {
		if err := os.Rename(d+TmpSuffix, d); err != nil {
			cleanup()
			return ev, nil, err
		}
		out[i].Path = d
	}
	if err := syncDir(filepath.Dir(dsts[0])); err != nil {
		return ev, nil, err
	}
	return ev, out, nil
}

// sparseBlock is the unit in which CopySparse looks for zeros.
const sparseBlock = 1 << 20

// CopySparse copies the file src to dst (created 0600, replaced if it
// exists), leaving a hole wherever a whole block of src is zeros: a raw
// image's unwritten space costs nothing and reads back as zeros, so the
// copy has the same content. Its data is synced before it returns.
func CopySparse(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("copy to %s: %w", dst, cerr)
		}
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	buf := make([]byte, sparseBlock)
	zero := make([]byte, sparseBlock)
	var off int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return fmt.Errorf("copy to %s: %w", dst, err)
				}
			}
			off += int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("copy %s: %w", src, rerr)
		}
	}
	if err := out.Truncate(off); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return out.Sync()
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// FileSHA256 is the hex SHA-256 of a file's content.
func FileSHA256(path string) (string, error) {
	sum, _, err := hashFile(path)
	return sum, err
}

// CheckVirtioWin fails, wrapping ErrNoVirtioWin, unless the virtio-win
// drivers a Windows guest's conversion needs are where VirtioWinPath says.
func (v *V2V) CheckVirtioWin() error { return v.checkVirtioWin() }

// VirtioWinPath is where conversions look for the virtio-win drivers:
// V2V.VirtioWin, else $VIRTIO_WIN, else DefaultVirtioWin.
func (v *V2V) VirtioWinPath() string { return v.virtioWin() }
