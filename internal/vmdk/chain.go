package vmdk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// Errors matched with errors.Is.
var (
	// ErrCIDMismatch: a delta's parentCID is not its parent's CID (the
	// parent changed after the snapshot, or the files are from different
	// chains); qemu refuses to read through such a link.
	ErrCIDMismatch = errors.New("CID mismatch")
	// ErrParentMissing: a parentFileNameHint names no readable descriptor.
	ErrParentMissing = errors.New("parent descriptor missing")
	// ErrChainTooDeep: more links than any ESXi chain can have, or a loop.
	ErrChainTooDeep = errors.New("snapshot chain too deep")
)

// MaxChainDepth bounds a chain (ESXi allows 32 snapshots per disk).
const MaxChainDepth = 255

// Resolver maps a file name found in a descriptor (an extent file name or
// a parentFileNameHint, relative or absolute) to a local path.
type Resolver func(descriptorPath, name string) (string, error)

// LocalResolver resolves relative names against the descriptor's folder
// and uses absolute names as they are.
func LocalResolver(descriptorPath, name string) (string, error) {
	if filepath.IsAbs(name) {
		return filepath.Clean(name), nil
	}
	return filepath.Join(filepath.Dir(descriptorPath), filepath.FromSlash(name)), nil
}

// LinkExtent is one extent of a link.
type LinkExtent struct {
	Path    string
	Type    string
	Sectors int64
	// Stats is set for sparse (delta) extents.
	Stats *ExtentStats
}

// Link is one descriptor of a chain.
type Link struct {
	DescriptorPath string
	Descriptor     Descriptor
	Format         Format
	CapacityBytes  int64
	Extents        []LinkExtent
	// AllocatedBytes is the data a delta's grain tables hold; -1 for flat
	// links, whose allocation the format does not record.
	AllocatedBytes int64
	// ZeroBytes is what a seSparse delta explicitly zeroes.
	ZeroBytes int64
	// ParentPath is the resolved parent descriptor ("" for the base).
	ParentPath string
}

// Chain is an open chain of descriptors, top (what the VM runs on) first,
// base last. It reads the guest-visible content without qemu.
type Chain struct {
	Links  []Link
	layers []*layer
}

type layerExtent struct {
	start, end int64 // bytes in the disk
	flat       *os.File
	flatOff    int64
	sparse     *sparseExtent
}

type layer struct {
	capacity int64
	extents  []layerExtent
}

// OpenChain reads the descriptor at top and every parent it names, checks
// each link's parentCID against its parent's CID and opens the extents.
func OpenChain(top string, resolve Resolver) (*Chain, error) {
	if resolve == nil {
		resolve = LocalResolver
	}
	c := &Chain{}
	seen := map[string]bool{}
	path := top
	for {
		if len(c.Links) >= MaxChainDepth || seen[path] {
			c.Close()
			return nil, fmt.Errorf("vmdk: %w: %s is reached again or the chain has more than %d links", ErrChainTooDeep, path, MaxChainDepth)
		}
		seen[path] = true
		link, l, err := openLink(path, resolve)
		if err != nil {
			c.Close()
			if len(c.Links) > 0 && errors.Is(err, fs.ErrNotExist) {
				child := c.Links[len(c.Links)-1]
				return nil, fmt.Errorf("vmdk: %w: %s names parent %q (%s): %v", ErrParentMissing, child.DescriptorPath, child.Descriptor.ParentFileNameHint, path, err)
			}
			return nil, fmt.Errorf("vmdk: %w", err)
		}
		if n := len(c.Links); n > 0 {
			child := c.Links[n-1]
			if child.Descriptor.ParentCID != link.Descriptor.CID {
				c.Close()
				l.close()
				return nil, fmt.Errorf("vmdk: %w: %s has parentCID=%08x but its parent %s has CID=%08x: the parent changed after the snapshot was taken, or the files are from different disks",
					ErrCIDMismatch, child.DescriptorPath, child.Descriptor.ParentCID, path, link.Descriptor.CID)
			}
		}
		c.Links = append(c.Links, link)
		c.layers = append(c.layers, l)
		hint := link.Descriptor.ParentFileNameHint
		if !link.Format.IsDelta() {
			if hint != "" {
				c.Close()
				return nil, fmt.Errorf("vmdk: %s: a %s disk names a parent %q", path, link.Format, hint)
			}
			if link.Descriptor.ParentCID != NoParentCID {
				c.Close()
				return nil, fmt.Errorf("vmdk: %w: base %s has parentCID=%08x, not ffffffff", ErrCIDMismatch, path, link.Descriptor.ParentCID)
			}
			return c, nil
		}
		if hint == "" {
			c.Close()
			return nil, fmt.Errorf("vmdk: %w: %s is a %s delta without parentFileNameHint", ErrParentMissing, path, link.Format)
		}
		parent, err := resolve(path, hint)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("vmdk: %w: %s: parentFileNameHint %q: %v", ErrParentMissing, path, hint, err)
		}
		c.Links[len(c.Links)-1].ParentPath = parent
		path = parent
	}
}

func openLink(path string, resolve Resolver) (Link, *layer, error) {
	d, err := readDescriptorFile(path)
	if err != nil {
		return Link{}, nil, err
	}
	link := Link{DescriptorPath: path, Descriptor: d, Format: d.CreateType}
	switch d.CreateType {
	case Flat, VMFSSparse, SESparse, "monolithicFlat":
	default:
		return Link{}, nil, fmt.Errorf("%s: createType %q is not supported in a snapshot chain", path, d.CreateType)
	}
	l := &layer{}
	var pos int64
	for i, x := range d.Extents {
		ep, err := resolve(path, x.File)
		if err != nil {
			l.close()
			return Link{}, nil, fmt.Errorf("%s: extent %q: %w", path, x.File, err)
		}
		le, lx, err := openLinkExtent(path, d.CreateType, i, x, ep)
		if err != nil {
			l.close()
			return Link{}, nil, err
		}
		le.start, le.end = pos, pos+x.Sectors*SectorSize
		if lx.Stats != nil {
			link.AllocatedBytes += lx.Stats.AllocatedBytes()
			link.ZeroBytes += lx.Stats.ZeroGrains * lx.Stats.GrainSize
		}
		l.extents = append(l.extents, le)
		link.Extents = append(link.Extents, lx)
		pos = le.end
	}
	if !d.CreateType.IsDelta() {
		link.AllocatedBytes = -1
	}
	l.capacity = pos
	link.CapacityBytes = pos
	return link, l, nil
}

// readDescriptorFile reads and parses the descriptor at path.
func readDescriptorFile(path string) (Descriptor, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Descriptor{}, err
	}
	if fi.Size() > MaxDescriptorBytes {
		return Descriptor{}, fmt.Errorf("%s: %d bytes is too large for a descriptor", path, fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Descriptor{}, err
	}
	d, err := ParseDescriptor(string(b))
	if err != nil {
		return Descriptor{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// openLinkExtent opens extent i (x, at ep) of the descriptor at path,
// whose createType is ct. The layer extent's range is left to the caller.
func openLinkExtent(path string, ct Format, i int, x ExtentLine, ep string) (layerExtent, LinkExtent, error) {
	lx := LinkExtent{Path: ep, Type: x.Type, Sectors: x.Sectors}
	switch x.Type {
	case "VMFS", "FLAT":
		if ct.IsDelta() {
			return layerExtent{}, lx, fmt.Errorf("%s: a %s delta with a %s extent", path, ct, x.Type)
		}
		f, err := os.Open(ep)
		if err != nil {
			return layerExtent{}, lx, fmt.Errorf("%s: extent %d: %w", path, i+1, err)
		}
		return layerExtent{flat: f, flatOff: x.Offset * SectorSize}, lx, nil
	case "VMFSSPARSE", "SESPARSE":
		want := VMFSSparse
		if x.Type == "SESPARSE" {
			want = SESparse
		}
		if ct != want {
			return layerExtent{}, lx, fmt.Errorf("%s: createType %s with a %s extent", path, ct, x.Type)
		}
		se, err := openSparse(ep, want)
		if err != nil {
			return layerExtent{}, lx, fmt.Errorf("%s: extent %d: %w", path, i+1, err)
		}
		if se.capacity != x.Sectors {
			se.f.Close()
			return layerExtent{}, lx, fmt.Errorf("%s: extent %q holds %d sectors but the descriptor says %d", path, x.File, se.capacity, x.Sectors)
		}
		st, err := se.stats()
		if err != nil {
			se.f.Close()
			return layerExtent{}, lx, fmt.Errorf("%s: extent %q: %w", path, x.File, err)
		}
		lx.Stats = &st
		return layerExtent{sparse: se}, lx, nil
	default:
		return layerExtent{}, lx, fmt.Errorf("%s: extent type %s is not supported", path, x.Type)
	}
}

func (l *layer) close() {
	for _, e := range l.extents {
		if e.flat != nil {
			e.flat.Close()
		}
		if e.sparse != nil {
			e.sparse.f.Close()
		}
	}
}

// extentAt is the extent holding byte off of the layer (off < capacity).
func (l *layer) extentAt(off int64) *layerExtent {
	for k := range l.extents {
		if off < l.extents[k].end {
			return &l.extents[k]
		}
	}
	return nil
}

// Close closes every extent file.
func (c *Chain) Close() error {
	for _, l := range c.layers {
		l.close()
	}
	c.layers = nil
	return nil
}

// CapacityBytes is the size of the disk the guest sees (the top's).
func (c *Chain) CapacityBytes() int64 {
	if len(c.Links) == 0 {
		return 0
	}
	return c.Links[0].CapacityBytes
}

// ReadAt reads the guest-visible content: each grain from the first link
// that allocates it or zeroes it, zeros where no link has it.
func (c *Chain) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("vmdk: negative offset")
	}
	capacity := c.CapacityBytes()
	if off >= capacity {
		return 0, io.EOF
	}
	want := len(p)
	p = p[:min(int64(len(p)), capacity-off)]
	if err := c.read(0, p, off); err != nil {
		return 0, err
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

func (c *Chain) read(i int, p []byte, off int64) error {
	for len(p) > 0 {
		if i >= len(c.layers) || off >= c.layers[i].capacity {
			clear(p)
			return nil
		}
		x := c.layers[i].extentAt(off)
		n := min(int64(len(p)), x.end-off)
		if x.flat != nil {
			if err := readFull(x.flat, p[:n], x.flatOff+off-x.start); err != nil {
				return err
			}
		} else {
			st, foff, run, err := x.sparse.lookup(off - x.start)
			if err != nil {
				return err
			}
			n = min(n, run)
			switch st {
			case stateData:
				if err := readFull(x.sparse.f, p[:n], foff); err != nil {
					return err
				}
			case stateZero:
				clear(p[:n])
			case stateUnallocated:
				if err := c.read(i+1, p[:n], off); err != nil {
					return err
				}
			}
		}
		p = p[n:]
		off += n
	}
	return nil
}

// ZeroRun returns how many bytes from off, at most limit, read as zeros
// without reading any data: grains no link allocates, grains a delta
// zeroes, holes of a flat extent, and past the disk's end. 0 means the
// content at off may hold data; ReadAt tells.
func (c *Chain) ZeroRun(off, limit int64) (int64, error) {
	if off < 0 || limit <= 0 {
		return 0, nil
	}
	return c.zeroRun(0, off, limit)
}

func (c *Chain) zeroRun(i int, off, limit int64) (int64, error) {
	var done int64
	for done < limit {
		if i >= len(c.layers) || off >= c.layers[i].capacity {
			return limit, nil // read as zeros, as read does
		}
		x := c.layers[i].extentAt(off)
		n := min(limit-done, x.end-off)
		var z int64
		if x.flat != nil {
			pos := x.flatOff + off - x.start
			z = sparsefile.HoleLen(x.flat, pos, pos+n)
		} else {
			st, _, run, err := x.sparse.lookup(off - x.start)
			if err != nil {
				return done, err
			}
			n = min(n, run)
			switch st {
			case stateZero:
				z = n
			case stateUnallocated:
				if z, err = c.zeroRun(i+1, off, n); err != nil {
					return done, err
				}
			}
		}
		done += z
		off += z
		if z < n {
			return done, nil
		}
	}
	return done, nil
}

// WriteTo streams the guest-visible content to w.
func (c *Chain) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 1<<20)
	var total int64
	for off := int64(0); off < c.CapacityBytes(); {
		n := min(int64(len(buf)), c.CapacityBytes()-off)
		if err := c.read(0, buf[:n], off); err != nil {
			return total, err
		}
		m, err := w.Write(buf[:n])
		total += int64(m)
		if err != nil {
			return total, err
		}
		off += n
	}
	return total, nil
}

// SHA256 is the hex disk digest (package diskdigest) of the
// guest-visible content.
func (c *Chain) SHA256() (string, error) {
	h := diskdigest.New()
	if _, err := c.WriteTo(h); err != nil {
		return "", fmt.Errorf("vmdk: reading the chain: %w", err)
	}
	return h.Hex(), nil
}
