package esxi

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// MaxChainLinks bounds a snapshot chain walk (ESXi allows 32 snapshots per
// disk; more links, or a loop, mean corrupt or hostile descriptors).
const MaxChainLinks = 255

// noParentCID is the parentCID of a base disk.
const noParentCID = "ffffffff"

// FileSize is what the inventory learnt about a file on a datastore.
type FileSize struct {
	// Bytes is the file's length (ls -l).
	Bytes int64
	// AllocatedBytes is the space it occupies (ls -s, du), -1 if unknown.
	AllocatedBytes int64
}

// ChainLink is one descriptor of a disk's chain.
type ChainLink struct {
	DescriptorPath string
	// CreateType is "vmfs" for a base, "vmfsSparse" or "seSparse" for a
	// snapshot delta.
	CreateType     string
	CID, ParentCID string
	// ExtentPaths are the resolved host paths of the extent files: what
	// must be copied for this link.
	ExtentPaths []string
	// CapacityBytes is the link's size, summed with checked arithmetic (0
	// when the descriptor's sizes are out of range).
	CapacityBytes int64
	// Thin is ddb.thinProvisioned (meaningful for the base).
	Thin bool
	// ExtentBytes is the extent files' total length on the datastore, -1
	// when a size is unknown.
	ExtentBytes int64
	// AllocatedBytes is the datastore space the extents occupy: the
	// capacity for a thick base, else what FileSize.AllocatedBytes said, -1
	// when unknown.
	AllocatedBytes int64
	// ParentDescriptorPath is the resolved parentFileNameHint ("" for the
	// base).
	ParentDescriptorPath string
}

// IsDelta reports a snapshot delta link.
func (l ChainLink) IsDelta() bool {
	switch strings.ToLower(l.CreateType) {
	case "vmfssparse", "sesparse":
		return true
	}
	return l.ParentDescriptorPath != ""
}

// DiskChain is a disk's chain, from the descriptor the VM runs on down to
// its base.
type DiskChain struct {
	// Links are top first, base last.
	Links []ChainLink
	// CapacityBytes is the disk size the guest sees (the top's).
	CapacityBytes int64
	// BaseThin is the base's ddb.thinProvisioned.
	BaseThin bool
	// Complete is true when the walk reached a base disk and every link is
	// consistent (no Problems).
	Complete bool
	// CopyBytes is the sum of ExtentBytes over the links, -1 if unknown.
	CopyBytes int64
	Problems  []Problem
}

// DescriptorCapacity sums a descriptor's extents with checked arithmetic:
// a negative size or a total past math.MaxInt64 bytes is a problem, and
// the capacity is then 0, never negative or wrapped.
func DescriptorCapacity(d Descriptor) (int64, []Problem) {
	var sectors int64
	for i, e := range d.Extents {
		if e.Sectors < 0 || e.Sectors > math.MaxInt64/SectorSize {
			return 0, []Problem{{Message: fmt.Sprintf("extent %d: %d sectors is out of range", i+1, e.Sectors)}}
		}
		if sectors > math.MaxInt64/SectorSize-e.Sectors {
			return 0, []Problem{{Message: fmt.Sprintf("%d extents: their total size overflows (corrupt or hostile descriptor)", len(d.Extents))}}
		}
		sectors += e.Sectors
	}
	return sectors * SectorSize, nil
}

// readable reports whether descs holds a usable descriptor for p; a failed
// read is recorded as a zero Descriptor.
func readable(descs map[string]Descriptor, p string) (Descriptor, bool, bool) {
	d, ok := descs[p]
	if !ok {
		return d, false, false
	}
	return d, true, d.CreateType != "" || len(d.Extents) > 0
}

// PendingChainDescriptors returns, sorted and without duplicates, the
// descriptor paths the inventory must read next to complete the chains of
// the given top descriptors: each top not yet in descs, and the parent of
// each delta already read whose parent is not. Call it after every batch
// until it returns nothing; record a descriptor that could not be read as
// a zero Descriptor so that it is not asked for again.
func PendingChainDescriptors(tops []string, descs map[string]Descriptor) []string {
	need := map[string]bool{}
	for _, p := range tops {
		seen := map[string]bool{}
		for depth := 0; p != "" && !seen[p] && depth < MaxChainLinks; depth++ {
			seen[p] = true
			d, present, ok := readable(descs, p)
			if !present {
				need[p] = true
				break
			}
			if !ok || d.ParentFileNameHint == "" {
				break
			}
			parent, err := ResolveDiskPath(p, d.ParentFileNameHint)
			if err != nil {
				break
			}
			p = parent
		}
	}
	out := make([]string, 0, len(need))
	for p := range need {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// BuildDiskChain models the chain of the disk whose descriptor is top from
// the descriptors read (by host path) and, when known, the sizes of the
// extent files. It never fails: what is inconsistent (a parentCID that is
// not the parent's CID, a missing or unreadable parent, a delta without a
// parentFileNameHint, a base naming a parent CID, sizes that overflow,
// capacities that differ, a loop) is reported in Problems and leaves the
// chain incomplete.
func BuildDiskChain(top string, descs map[string]Descriptor, sizes map[string]FileSize) DiskChain {
	ch := DiskChain{}
	seen := map[string]bool{}
	p := top
	for {
		if len(ch.Links) >= MaxChainLinks || seen[p] {
			ch.Problems = append(ch.Problems, Problem{Source: p, Message: fmt.Sprintf("the chain loops or has more than %d links", MaxChainLinks)})
			break
		}
		seen[p] = true
		d, present, ok := readable(descs, p)
		if !ok {
			ch.Problems = append(ch.Problems, ch.unreadable(p, present))
			break
		}
		link, probs := chainLink(p, d, sizes)
		ch.Problems = append(ch.Problems, probs...)
		if n := len(ch.Links); n > 0 {
			ch.Problems = append(ch.Problems, parentMismatches(ch.Links[n-1], link)...)
		}
		if d.ParentFileNameHint != "" {
			pp, err := ResolveDiskPath(p, d.ParentFileNameHint)
			if err != nil {
				ch.Problems = append(ch.Problems, Problem{Source: p, Message: "parentFileNameHint: " + err.Error()})
				ch.Links = append(ch.Links, link)
				break
			}
			link.ParentDescriptorPath = pp
		}
		ch.Links = append(ch.Links, link)
		if link.ParentDescriptorPath == "" {
			ch.endAtBase(link, d)
			break
		}
		p = link.ParentDescriptorPath
	}
	ch.sumUp()
	return ch
}

// unreadable is the problem of a descriptor at p that was not read
// (present: read but unusable), naming the child it is the parent of.
func (ch *DiskChain) unreadable(p string, present bool) Problem {
	msg := "descriptor was not read"
	if present {
		msg = "descriptor could not be read or parsed"
	}
	if n := len(ch.Links); n > 0 {
		msg = fmt.Sprintf("parent of %s: %s", ch.Links[n-1].DescriptorPath, msg)
	}
	return Problem{Source: p, Message: msg}
}

// chainLink is the link of descriptor d at p, with its extents' sizes,
// without its parent path.
func chainLink(p string, d Descriptor, sizes map[string]FileSize) (ChainLink, []Problem) {
	link := ChainLink{DescriptorPath: p, CreateType: d.CreateType, CID: strings.ToLower(d.CID),
		ParentCID: strings.ToLower(d.ParentCID), Thin: d.Thin(), ExtentBytes: 0, AllocatedBytes: 0}
	capacity, capProbs := DescriptorCapacity(d)
	probs := withSource(capProbs, p)
	link.CapacityBytes = capacity
	if len(d.Extents) == 0 {
		probs = append(probs, Problem{Source: p, Message: "no extents"})
	}
	probs = append(probs, addExtentSizes(&link, d.Extents, sizes)...)
	delta := link.IsDelta() || d.IsDelta()
	if !delta && !link.Thin && len(capProbs) == 0 {
		link.AllocatedBytes = capacity // thick: every block is allocated
	}
	return link, probs
}

// addExtentSizes records the paths of extents and sums their lengths and
// allocated bytes into link (-1: unknown).
func addExtentSizes(link *ChainLink, extents []Extent, sizes map[string]FileSize) []Problem {
	p := link.DescriptorPath
	var probs []Problem
	allocKnown := true
	for _, e := range extents {
		if e.FileName == "" {
			continue
		}
		ep, err := ResolveDiskPath(p, e.FileName)
		if err != nil {
			probs = append(probs, Problem{Source: p, Message: "extent: " + err.Error()})
			link.ExtentBytes, allocKnown = -1, false
			continue
		}
		link.ExtentPaths = append(link.ExtentPaths, ep)
		fs, known := sizes[ep]
		if !known || fs.Bytes < 0 {
			link.ExtentBytes = -1
		} else if link.ExtentBytes >= 0 {
			link.ExtentBytes = addSaturating(link.ExtentBytes, fs.Bytes)
		}
		if !known || fs.AllocatedBytes < 0 {
			allocKnown = false
		} else {
			link.AllocatedBytes = addSaturating(link.AllocatedBytes, fs.AllocatedBytes)
		}
	}
	if !allocKnown {
		link.AllocatedBytes = -1
	}
	return probs
}

// parentMismatches reports where child and its parent disagree.
func parentMismatches(child, parent ChainLink) []Problem {
	var probs []Problem
	if child.ParentCID != parent.CID {
		probs = append(probs, Problem{Source: child.DescriptorPath, Message: fmt.Sprintf(
			"parentCID=%s but its parent %s has CID=%s: the parent changed after the snapshot was taken; the chain cannot be read consistently", child.ParentCID, parent.DescriptorPath, parent.CID)})
	}
	if child.CapacityBytes != parent.CapacityBytes {
		probs = append(probs, Problem{Source: child.DescriptorPath, Message: fmt.Sprintf(
			"capacity %d bytes differs from its parent %s (%d bytes)", child.CapacityBytes, parent.DescriptorPath, parent.CapacityBytes)})
	}
	return probs
}

// endAtBase judges link, which names no parent: a base disk completes the
// chain; a delta, or a base naming a parent CID, is missing its parent.
func (ch *DiskChain) endAtBase(link ChainLink, d Descriptor) {
	p := link.DescriptorPath
	switch {
	case link.IsDelta() || d.IsDelta():
		ch.Problems = append(ch.Problems, Problem{Source: p, Message: fmt.Sprintf("a %s delta without parentFileNameHint: its parent is unknown", d.CreateType)})
	case link.ParentCID != "" && link.ParentCID != noParentCID:
		ch.Problems = append(ch.Problems, Problem{Source: p, Message: fmt.Sprintf("base disk with parentCID=%s (want ffffffff): a parent is missing", link.ParentCID)})
	default:
		ch.Complete = true
	}
}

// sumUp sets the chain's totals from its links.
func (ch *DiskChain) sumUp() {
	if len(ch.Links) > 0 {
		ch.CapacityBytes = ch.Links[0].CapacityBytes
		last := ch.Links[len(ch.Links)-1]
		if ch.Complete {
			ch.BaseThin = last.Thin
		}
	}
	ch.CopyBytes = 0
	for _, l := range ch.Links {
		if l.ExtentBytes < 0 || ch.CopyBytes < 0 {
			ch.CopyBytes = -1
			continue
		}
		ch.CopyBytes = addSaturating(ch.CopyBytes, l.ExtentBytes)
	}
	if len(ch.Problems) > 0 {
		ch.Complete = false
	}
}

// addSaturating adds non-negative sizes, stopping at math.MaxInt64.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
