package engine

import (
	"fmt"
	"path/filepath"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// A disk that runs on snapshots is migrated as the guest sees it now:
// Preparing copies every file of its chain (descriptors read whole, extent
// files with the chunked, resumable, verified copy and its journal) into
// the migration's folder; Converting rebuilds the chain there with
// descriptors naming only the local copies, checks CID/parentCID, flattens
// it with qemu-img and stages the flattened image as the disk's raw copy.
// The guest-visible SHA-256 becomes the disk's SourceSHA256: what the
// destination must hold. The source is only read: its snapshots are never
// removed or consolidated.
//
// Local file names are derived from the disk's index and the link's and
// extent's positions, never read from the record:
//
//	disk-<i>-link-<k>.source.vmdk   descriptor as read from the host
//	disk-<i>-link-<k>.vmdk          descriptor rewritten for the local chain
//	disk-<i>-link-<k>-extent-<e>    extent file copy (with its journal)
//	disk-<i>-flattened.raw          qemu-img's output, until staged

// chainPlan lists the files of a disk's chain, top first, each link's
// descriptor before its extents; nil when the disk runs on no snapshot.
func chainPlan(ch *esxi.DiskChain) []record.ChainFileEvidence {
	if ch == nil {
		return nil
	}
	var out []record.ChainFileEvidence
	for k, l := range ch.Links {
		out = append(out, record.ChainFileEvidence{Link: k, Kind: record.ChainFileDescriptor, Format: l.CreateType, SourcePath: l.DescriptorPath, CID: l.CID, ParentCID: l.ParentCID})
		for e, p := range l.ExtentPaths {
			out = append(out, record.ChainFileEvidence{Link: k, Extent: e, Kind: record.ChainFileExtent, Format: l.CreateType, SourcePath: p})
		}
	}
	return out
}

// sameChain reports whether two plans name the same files in the same
// places.
func sameChain(a, b []record.ChainFileEvidence) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Link != b[i].Link || a[i].Extent != b[i].Extent || a[i].Kind != b[i].Kind || a[i].SourcePath != b[i].SourcePath {
			return false
		}
	}
	return true
}

// chainLocalPath is where a chain file of disk i is copied.
func (s Spec) chainLocalPath(i int, f record.ChainFileEvidence) string {
	if f.Kind == record.ChainFileDescriptor {
		return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d-link-%d.source.vmdk", i, f.Link))
	}
	return filepath.Join(s.stagingDir(), chainExtentName(i, f.Link, f.Extent))
}

func chainDescriptorName(i, link int) string { return fmt.Sprintf("disk-%d-link-%d.vmdk", i, link) }

func chainExtentName(i, link, extent int) string {
	return fmt.Sprintf("disk-%d-link-%d-extent-%d", i, link, extent)
}

// flattenedPath is where earlier versions flattened disk i's chain before
// staging it; it is removed when found.
func (s Spec) flattenedPath(i int) string {
	return filepath.Join(s.stagingDir(), fmt.Sprintf("disk-%d-flattened.raw", i))
}
