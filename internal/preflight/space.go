package preflight

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FreeSpace is what a file system offers an unprivileged writer.
type FreeSpace struct {
	// Dir is the folder asked about; Existing the closest folder that
	// exists (Dir itself, or a parent when Dir is made later).
	Dir, Existing string
	// Avail is the bytes available to unprivileged users (statfs f_bavail).
	Avail int64
}

// StatFree returns the space available in dir's file system. A dir that
// does not exist yet is judged by its closest existing parent, where it
// will be created.
func StatFree(dir string) (FreeSpace, error) {
	fs := FreeSpace{Dir: dir}
	if !filepath.IsAbs(dir) {
		return fs, fmt.Errorf("%q is not an absolute path", dir)
	}
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fs, err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fs, fmt.Errorf("no part of %q exists", dir)
		}
		p = parent
	}
	fs.Existing = p
	avail, err := statfsAvail(p)
	if err != nil {
		return fs, fmt.Errorf("statfs %s: %w", p, err)
	}
	fs.Avail = avail
	return fs, nil
}

// WorkDirSpace is the CheckWorkDirSpace check: the work folder's file
// system must have room for need bytes (what the disks still to be staged
// and converted there take at most: their capacity, less what is already
// written). A Blocker: filling that file system would stop the copy
// halfway and starve everything else writing there. Its message when it
// passes does not mention the free space, which changes from moment to
// moment, so that a plan and the apply after it report the same check.
func WorkDirSpace(dir string, need int64) Check {
	if need <= 0 {
		return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("Nothing more needs to be written to work_dir %s.", dir))
	}
	fs, err := StatFree(dir)
	if err != nil {
		return fail(CheckWorkDirSpace, Blocker, fmt.Sprintf("The free space of work_dir %s cannot be read (%v); the disks need up to %s there.", dir, err, humanBytes(need)))
	}
	if fs.Avail < need {
		return fail(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has %s free but the disks need up to %s there (%d bytes; %d more). Free space on that file system or set work_dir to a larger one.",
			dir, humanBytes(fs.Avail), humanBytes(need), need, need-fs.Avail))
	}
	return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has room for the %s the disks need.", dir, humanBytes(need)))
}
