package engine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// workDirNeed is how many bytes the disks may still write under work_dir:
// per disk its capacity for the staged copy, less what is already
// allocated there (nothing once the journal records the copy complete),
// and as much again for a converted image kept beside it (qcow2 with the
// cdi_upload transport). Images written to the http staging folder are
// not counted: that folder is usually another file system, served by
// another program.
func (s Spec) workDirNeed(disks []DiskEvidence) int64 {
	chunk := s.CopyChunkSize
	if chunk == 0 {
		chunk = transfer.DefaultChunkSize
	}
	var need int64
	for i, d := range disks {
		staged := s.stagedPath(i)
		st, err := transfer.Inspect(transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, staged, chunk)
		if err != nil || st.State != transfer.StateComplete {
			need += max(d.SizeBytes-allocated(staged), 0)
		}
		if art := s.artifactPath(i); art != staged && s.Transport.Kind != TransportHTTP {
			if d.ArtifactSHA256 == "" || allocated(art) == 0 {
				need += max(d.SizeBytes-allocated(art), 0)
			}
		}
		if conv := s.convertedPath(i); s.Conversion == ConversionVirtV2V && s.Transport.Kind != TransportHTTP && d.ConvertedSHA256 == "" {
			// The converted copy (at most the disk's size; less where it
			// has holes).
			need += max(d.SizeBytes-allocated(conv), 0)
		}
	}
	return need
}

// allocated is the space a file takes on disk (0 when it is missing).
func allocated(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512 //nolint:unconvert // the field types differ by platform
	}
	return fi.Size()
}

// spaceCheck is the work_dir_space pre-flight check for a migration's
// disks, judged the same way by Preview and by the Validated and
// Preparing checkpoints.
func (s Spec) spaceCheck(disks []DiskEvidence) preflight.Check {
	return preflight.WorkDirSpace(s.WorkDir, s.workDirNeed(disks))
}

// isNoSpace reports an error saying a file system is full or a quota is
// exhausted, as an errno or in a tool's message (qemu-img).
func isNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "No space left on device") || strings.Contains(msg, "Disk quota exceeded")
}

// noSpace turns a full work_dir into a stop for a human that says how much
// room the disks still need and where.
func (r *run) noSpace(what string, err error) error {
	need := r.spec.workDirNeed(r.rec().Disks)
	free := "unknown"
	if fs, ferr := preflight.StatFree(r.spec.WorkDir); ferr == nil {
		free = fmt.Sprintf("%d bytes", fs.Avail)
	}
	return needsHuman("WorkDirFull",
		fmt.Sprintf("the file system of work_dir %s is full (or its quota exhausted) while %s: the disks still need up to %d bytes in %s; %s free now",
			r.spec.WorkDir, what, need, r.spec.stagingDir(), free),
		fmt.Sprintf("free at least %d bytes on the file system of %s, or set work_dir to a larger one, then run apply again; what was copied is kept and the copy resumes where it stopped", need, r.spec.WorkDir),
		err)
}
