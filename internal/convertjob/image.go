package convertjob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// createOverlay makes the disk's overlay, a qcow2 file whose backing file
// is the image by its relative name when the overlay is beside it (so
// that the overlay works wherever the claim is mounted), or else by its
// path in the pod (a device, or a disk.img in another claim).
func createOverlay(ctx context.Context, d Disk) error {
	backing := filepath.Base(d.Path)
	if d.OverlayDir != "" {
		backing = d.Path
	}
	return qemuImg(ctx, d.dir(), "create", "-q", "-f", "qcow2", "-F", "raw", "-b", backing, d.Overlay())
}

// commitOverlay writes what the disk's overlay holds into its image. -d
// leaves the overlay as it was: a commit cut short is made again whole.
func commitOverlay(ctx context.Context, d Disk) error {
	return qemuImg(ctx, d.dir(), "commit", "-q", "-d", "-f", "qcow2", d.Overlay())
}

// checkDevice checks that a device disk is a block device holding at
// least the disk.
func checkDevice(d Disk) error {
	fi, err := os.Stat(d.Path)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return fmt.Errorf("%s is not a block device (%s): is the claim in Block volume mode?", d.Path, fi.Mode().Type())
	}
	f, err := os.Open(d.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if size < d.SizeBytes {
		return fmt.Errorf("%s holds %d bytes, the disk %d", d.Path, size, d.SizeBytes)
	}
	return nil
}

// qemuImg runs qemu-img in dir with args (never through a shell; the
// paths it is given are absolute or plain names, never read as options).
func qemuImg(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "qemu-img", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("qemu-img %s: %w", args[0], ctx.Err())
	case errors.Is(err, exec.ErrNotFound):
		return &fault.Error{Class: fault.NeedsHuman, Reason: ReasonToolsMissing,
			Message: "qemu-img is not installed in the worker's image", Err: err,
			Action: "use the vmmigration-worker image built for this provider's version"}
	}
	return fmt.Errorf("qemu-img %s %s: %w: %s", args[0], args[len(args)-1], err, lastLines(out.String(), 10, 2048))
}

// lastLines is the end of a tool's output: at most n lines and limit bytes.
func lastLines(s string, n, limit int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s = strings.Join(lines, "\n")
	if cut := len(s) - limit; cut > 0 {
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "…" + s[cut:]
	}
	return s
}

// fsyncPath makes a file's data durable.
func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

// hashImage is the SHA-256 and size of a raw image, its holes hashed as
// the zeros they read as without being read; of a device, its first
// SizeBytes.
func hashImage(ctx context.Context, d Disk) (Checked, error) {
	n := int64(-1)
	if d.device() {
		n = d.SizeBytes
	}
	s, err := sparsefile.HashPrefix(ctx, d.Path, n)
	if err != nil {
		return Checked{}, err
	}
	return Checked{SHA256: s.SHA256, Bytes: s.Bytes}, nil
}
