package podrun

import (
	"fmt"
	"os"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/loopdev"
)

// blockDevice is the device node a volumeDevice shows for a volume at
// path. A block device is shown as it is. A regular file (the sim's
// storage for a Block-mode claim) is attached as a loop device first, as
// the kubelet attaches a file-backed block volume
// (kubernetes v1.37.2 pkg/volume/util/volumepathhandler/
// volume_path_handler_linux.go, AttachFileDevice: losetup -f --show on
// the file), so that the container sees a block device, with a block
// device's size and semantics, never a file it could truncate. The loop
// device is detached when the pod's worker ends (detachLoops); what the
// container wrote is in the file by then.
func (w *podWorker) blockDevice(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	switch {
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		return path, nil
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is neither a block device nor a file (%s)", path, fi.Mode().Type())
	}
	for _, d := range w.loops {
		if d.Backing == path {
			return d.Path, nil
		}
	}
	d, err := loopdev.Attach(path)
	if err != nil {
		return "", fmt.Errorf("attach %s as a block device: %w", path, err)
	}
	w.loops = append(w.loops, d)
	return d.Path, nil
}

// detachLoops detaches the loop devices of the pod's block volumes.
func (w *podWorker) detachLoops() {
	for _, d := range w.loops {
		_ = d.Detach()
	}
	w.loops = nil
}
