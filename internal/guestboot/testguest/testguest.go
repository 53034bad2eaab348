// Package testguest gives tests a real guest disk: the VMware-style Debian
// 12 image tools/guest/build.sh makes (MBR, one ext4 partition, BIOS GRUB,
// an initramfs with IDE and pvscsi drivers but no virtio, a boot marker on
// ttyS0 and qemu-guest-agent). The image is built once per machine into
// .testbin/guest/ (or $VMMIGRATION_TESTBIN/guest/) and reused while the
// builder is unchanged; concurrent test binaries wait for one build.
// Building needs root and the packages of scripts/ensure-guest-deps.sh.
package testguest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Facts about the image, for assertions.
const (
	// Marker is the line the guest prints on ttyS0 after multi-user.target.
	Marker = "VMMIGRATION-GUEST-BOOTED"
	// RootUUID is the root file system's UUID (root=UUID=... in grub.cfg).
	RootUUID = "6d1c3f4e-8a0b-4c55-9a57-0b1d2c3e4f50"
	// Format is the image format.
	Format = "raw"
	// PartitionStart is the first sector of the root partition.
	PartitionStart = 2048
	// SectorSize is the image's sector size in bytes.
	SectorSize = 512
	// VirtualSize is the image's size in bytes.
	VirtualSize = 1 << 30
)

// EnvTestBin is the environment variable naming the folder the image is
// cached under (in guest/); .testbin in the repository root when unset,
// as for the test cluster's binaries.
const EnvTestBin = "VMMIGRATION_TESTBIN"

var (
	once     sync.Once
	image    string
	buildErr error
	took     time.Duration
)

// Image returns the path of the guest image, building it first when the
// cache has none from the current builder. Tests must not write to it:
// boot it with guestboot (which never writes images) or work on Copy.
func Image(t testing.TB) string {
	t.Helper()
	once.Do(func() { image, took, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("guest image: %v", buildErr)
	}
	return image
}

// BuildTime is how long Image took in this process (near zero when the
// cached image was reused); zero before Image is called.
func BuildTime() time.Duration { return took }

// Copy copies the guest image into the test's temporary folder, for tests
// that modify it (conversion), and returns the copy's path.
func Copy(t testing.TB) string {
	t.Helper()
	src := Image(t)
	dst := filepath.Join(t.TempDir(), "guest.raw")
	if err := copySparse(src, dst); err != nil {
		t.Fatalf("copying the guest image: %v", err)
	}
	return dst
}

func build() (string, time.Duration, error) {
	root, err := repoRoot()
	if err != nil {
		return "", 0, err
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(root, "tools", "guest", "build.sh"))
	cmd.Env = os.Environ()
	if dir := os.Getenv(EnvTestBin); dir != "" {
		cmd.Env = append(cmd.Env, "TESTBIN_DIR="+dir)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		tail := stderr.String()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return "", 0, fmt.Errorf("tools/guest/build.sh: %v (root and the packages of scripts/ensure-guest-deps.sh are needed):\n%s", err, tail)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	path := lines[len(lines)-1]
	if _, err := os.Stat(path); err != nil {
		return "", 0, fmt.Errorf("tools/guest/build.sh printed %q: %w", path, err)
	}
	return path, time.Since(start), nil
}

// copySparse copies src to dst, leaving holes for the zero blocks.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		out.Close()
		return err
	}
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for off := int64(0); off < size; {
		n, err := in.ReadAt(buf, off)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				out.Close()
				return werr
			}
		}
		off += int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			out.Close()
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := out.Truncate(size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// repoRoot walks up from the working directory to the folder with go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above")
		}
		dir = parent
	}
}
