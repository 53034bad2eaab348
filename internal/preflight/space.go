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
// written). See WorkDirSpaceFor.
func WorkDirSpace(dir string, need int64) Check {
	return WorkDirSpaceFor(dir, WorkDirNeed{Folder: dir, Required: need})
}

// WorkDirNeed is what a migration may still write in its folder under
// work_dir.
type WorkDirNeed struct {
	// Folder is where the files are written (the migration's folder under
	// work_dir).
	Folder string
	// Required is what the migration cannot do without; Detail says what
	// it is made of.
	Required int64
	Detail   string
	// Optional is what the migration writes when there is room and does
	// without otherwise; OptionalDetail says what it is and what is done
	// instead.
	Optional       int64
	OptionalDetail string
}

// WorkDirSpaceFor is the CheckWorkDirSpace check of a need. A Blocker when
// the file system has less room than need.Required: filling it would stop
// the copy halfway and starve everything else writing there. The optional
// part never blocks; the message says whether it fits. When everything
// fits, the message does not mention the free space, which changes from
// moment to moment, so that a plan and the apply after it report the same
// check.
func WorkDirSpaceFor(dir string, need WorkDirNeed) Check {
	what := fmt.Sprintf("%s (%d bytes) in %s", humanBytes(need.Required), need.Required, need.Folder)
	if need.Detail != "" {
		what += ": " + need.Detail
	}
	optional := ""
	if need.Optional > 0 {
		optional = fmt.Sprintf("%s (%d bytes) more", humanBytes(need.Optional), need.Optional)
		if need.OptionalDetail != "" {
			optional += " " + need.OptionalDetail
		}
	}
	if need.Required <= 0 && need.Optional <= 0 {
		return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("Nothing more needs to be written to work_dir %s.", dir))
	}
	fs, err := StatFree(dir)
	if err != nil {
		return fail(CheckWorkDirSpace, Blocker, fmt.Sprintf("The free space of work_dir %s cannot be read (%v); the disks need up to %s.", dir, err, what))
	}
	switch {
	case fs.Avail < need.Required:
		return fail(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has %s free but the disks need up to %s (%d bytes more than free). Free space on that file system or set work_dir to a larger one.",
			dir, humanBytes(fs.Avail), what, need.Required-fs.Avail))
	case need.Optional > 0 && fs.Avail-need.Required < need.Optional:
		return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has room for the %s the disks need, but not for the optional %s; without room for them it is done as said.",
			dir, what, optional))
	case need.Optional > 0:
		return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has room for the %s the disks need, and for the optional %s.", dir, what, optional))
	}
	return pass(CheckWorkDirSpace, Blocker, fmt.Sprintf("work_dir %s has room for the %s the disks need.", dir, what))
}
