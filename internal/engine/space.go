package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// workDirNeed is how many bytes the disks may still write under work_dir
// that the migration cannot do without (workDirNeeds' Required).
func (s Spec) workDirNeed(disks []record.DiskEvidence) int64 {
	return s.workDirNeeds(disks, nil).Required
}

// workDirNeeds is what the disks may still write in the migration's
// folder under work_dir, less what is already allocated there (nothing
// for a file the record or its journal says is complete):
//
//   - per disk its capacity for the staged copy;
//   - for a disk on a snapshot chain, every chain file as long as it is on
//     the host (the link's extent bytes as vm tells them, else as recorded
//     once copied, else the capacity), and the flattened raw image
//     (capacity) that the staged copy is made from, until it is;
//   - for a warm migration of a disk on no snapshot yet, its base (the
//     capacity) and each precopy round's delta (WarmDeltaGrowthPercent of
//     its allocated bytes, as for the datastore), and the flattened image;
//   - as much again as the capacity for a converted image kept beside the
//     staged copy (qcow2 with the cdi_upload transport; a virt-v2v copy).
//
// Optional is the qcow2 copy made of a raw image just before it is sent
// to CDI's upload proxy (cdi_upload): at most the disk's allocated bytes,
// and sent as raw instead when there is no room for it. Images written to
// the http staging folder are not counted: that folder is usually another
// file system, served by another program. vm, when known, is the source
// as observed; nil uses the record only.
func (s Spec) workDirNeeds(disks []record.DiskEvidence, vm *esxi.VM) preflight.WorkDirNeed {
	chunk := s.chunkSize()
	// A disk on a snapshot chain is flattened into its staged copy, which
	// staged counts.
	var staged, chain, conv, upload int64
	for i, d := range disks {
		var src *esxi.Disk
		if vm != nil && i < len(vm.Disks) {
			src = &vm.Disks[i]
		}
		stagedFile := s.stagedPath(i)
		st, err := transfer.Inspect(transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, stagedFile, chunk)
		stagedDone := err == nil && st.State == transfer.StateComplete
		if !stagedDone {
			staged = addSat(staged, max(d.SizeBytes-allocated(stagedFile), 0))
		}
		switch {
		case d.OnChain() && d.GuestSHA256 == "":
			chain = addSat(chain, s.chainCopyNeed(i, d, src))
		case s.warm() && !d.OnChain() && !stagedDone && (vm == nil || vm.PowerState == esxi.PoweredOn):
			// The precopy copies the base and the deltas as a chain (a
			// source found off is copied as it is, without snapshots).
			want := d.SizeBytes
			if src != nil {
				one := *src
				delta, _ := WarmDeltaEstimate(&esxi.VM{Disks: []esxi.Disk{one}}, s.PrecopyRounds)
				want = addSat(want, delta)
			}
			chain = addSat(chain, max(want-s.localChainAllocated(i), 0))
		}
		// The http staging folder is not counted, so neither is the token
		// that names a folder in it.
		if art := s.artifactPath(i, ""); art != stagedFile && s.Transport.Kind != TransportHTTP {
			if d.ArtifactSHA256 == "" || allocated(art) == 0 {
				conv = addSat(conv, max(d.SizeBytes-allocated(art), 0))
			}
		}
		if c := s.convertedPath(i, ""); s.Conversion == ConversionVirtV2V && s.Transport.Kind != TransportHTTP && d.ConvertedSHA256 == "" {
			// The converted copy (at most the disk's size; less where it
			// has holes).
			conv = addSat(conv, max(d.SizeBytes-allocated(c), 0))
		}
		if s.Transport.Kind != TransportHTTP && s.TargetFormat == "raw" && !d.Uploaded {
			upload = addSat(upload, max(diskAllocated(d, src, stagedFile, stagedDone)-allocated(s.uploadPath(i)), 0))
		}
	}
	need := preflight.WorkDirNeed{Folder: s.stagingDir(), Required: addSat(addSat(staged, chain), conv), Optional: upload}
	var parts []string
	for _, p := range []struct {
		n    int64
		what string
	}{{staged, "staged raw copies"}, {chain, "snapshot chain copies"}, {conv, "converted images"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d bytes of %s", p.n, p.what))
		}
	}
	need.Detail = strings.Join(parts, ", ")
	if upload > 0 {
		need.OptionalDetail = fmt.Sprintf("for the qcow2 copies (%s) that keep zero runs off the wire to CDI's upload proxy; without room for them the raw images are uploaded",
			filepath.Join(s.stagingDir(), "disk-N.upload.qcow2"))
	}
	return need
}

// chainCopyNeed is what disk i's chain files still take locally: each
// link's extent bytes on the host (src's chain when it is the recorded
// one, else the recorded copies' lengths, else the disk's capacity), less
// what the local copies already hold.
func (s Spec) chainCopyNeed(i int, d record.DiskEvidence, src *esxi.Disk) int64 {
	hostLinks := map[string]int64{}
	if src != nil && src.Chain != nil {
		for _, l := range src.Chain.Links {
			hostLinks[l.DescriptorPath] = l.ExtentBytes
		}
	}
	descriptor := map[int]string{}
	recorded := map[int]int64{}
	known := map[int]bool{}
	local := map[int]int64{}
	for _, f := range d.Chain {
		if f.Kind == record.ChainFileDescriptor {
			descriptor[f.Link] = f.SourcePath
			continue
		}
		if _, ok := known[f.Link]; !ok {
			known[f.Link] = true
		}
		if f.Bytes > 0 {
			recorded[f.Link] = addSat(recorded[f.Link], f.Bytes)
		} else {
			known[f.Link] = false
		}
		local[f.Link] = addSat(local[f.Link], allocated(s.chainLocalPath(i, f)))
	}
	var need int64
	for link, ok := range known {
		size := d.SizeBytes
		if b, found := hostLinks[descriptor[link]]; found && b >= 0 {
			size = b
		} else if ok {
			size = recorded[link]
		}
		need = addSat(need, max(size-local[link], 0))
	}
	return need
}

// localChainAllocated is what disk i's precopied chain files take in the
// work folder (their journals aside).
func (s Spec) localChainAllocated(i int) int64 {
	names, _ := filepath.Glob(filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d-link-*-extent-*", i)))
	var n int64
	for _, p := range names {
		if !strings.HasSuffix(p, transfer.JournalSuffix) {
			n = addSat(n, allocated(p))
		}
	}
	return n
}

// diskAllocated is the most a qcow2 copy of disk d's raw image takes: the
// staged copy's allocation once complete (it keeps the guest's holes),
// else what the host says the disk occupies, else its capacity.
func diskAllocated(d record.DiskEvidence, src *esxi.Disk, staged string, stagedDone bool) int64 {
	if stagedDone {
		return min(allocated(staged), d.SizeBytes)
	}
	if src != nil {
		if _, a := WarmDeltaEstimate(&esxi.VM{Disks: []esxi.Disk{*src}}, 0); a > 0 {
			return min(a, d.SizeBytes)
		}
	}
	return d.SizeBytes
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
func (s Spec) spaceCheck(disks []record.DiskEvidence, vm *esxi.VM) preflight.Check {
	return preflight.WorkDirSpaceFor(s.WorkDir, s.workDirNeeds(disks, vm))
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
