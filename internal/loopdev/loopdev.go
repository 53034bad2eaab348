// Package loopdev attaches regular files as Linux loop block devices, for
// tests of code that writes to block devices (a Block-mode claim). It runs
// losetup(8) with arguments, never through a shell, and needs root.
package loopdev

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ErrUnavailable is returned when this machine cannot attach loop devices
// (no losetup, not root, no loop driver).
var ErrUnavailable = errors.New("loop devices are not available")

// Device is an attached loop device.
type Device struct {
	// Path is the device node, e.g. /dev/loop3; Backing the file behind it.
	Path, Backing string
}

// Attach attaches backing as a new loop device. The kernel hands out free
// devices one at a time, and another process may take the one losetup
// found first; a busy device is retried a few times.
func Attach(backing string) (*Device, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not running as root", ErrUnavailable)
	}
	bin, err := exec.LookPath("losetup")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		var out, stderr bytes.Buffer
		cmd := exec.Command(bin, "--find", "--show", "--", backing)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			lastErr = fmt.Errorf("losetup --find --show %s: %v: %s", backing, err, strings.TrimSpace(stderr.String()))
			time.Sleep(50 * time.Millisecond)
			continue
		}
		dev := strings.TrimSpace(out.String())
		if !strings.HasPrefix(dev, "/dev/loop") {
			return nil, fmt.Errorf("losetup printed %q, not a loop device", dev)
		}
		return &Device{Path: dev, Backing: backing}, nil
	}
	return nil, fmt.Errorf("%w: %v", ErrUnavailable, lastErr)
}

// Detach detaches the device (the backing file stays).
func (d *Device) Detach() error {
	out, err := exec.Command("losetup", "--detach", d.Path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("losetup --detach %s: %v: %s", d.Path, err, strings.TrimSpace(string(out)))
	}
	return nil
}
