package esxisim

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// DeltaSpec is one snapshot delta of a disk chain, oldest first.
type DeltaSpec struct {
	// Format is vmdk.VMFSSparse (-delta.vmdk) or vmdk.SESparse
	// (-sesparse.vmdk).
	Format vmdk.Format
	// Writes are the grains the delta holds (aligned to the format's
	// grain); everything else falls through to the parent. ZeroLength
	// writes (seSparse only) hide the parent's data.
	Writes []vmdk.Write
}

// DiskChainSpec describes a disk that runs on a chain of snapshot deltas
// over a flat base.
type DiskChainSpec struct {
	// Datastore and Folder hold the deltas (the VM folder), default
	// "datastore1" and Name.
	Datastore, Folder string
	// Name is the base descriptor's name without ".vmdk"; deltas are
	// Name-000001, Name-000002, ...
	Name string
	// CapacityBytes is the disk size, a multiple of 512.
	CapacityBytes int64
	// Thin marks the base ddb.thinProvisioned = "1".
	Thin bool
	// Base is the base disk's content (nil: DefaultContent).
	Base []Extent
	// BaseDatastore and BaseFolder place the base elsewhere; the first
	// delta then names it by its absolute /vmfs/volumes path.
	BaseDatastore, BaseFolder string
	Deltas                    []DeltaSpec
}

// ChainLinkFiles are one link's files.
type ChainLinkFiles struct {
	Format vmdk.Format
	// Descriptor and Extent are host paths (/vmfs/volumes/...);
	// LocalDescriptor and LocalExtent the same files on this machine.
	Descriptor, Extent           string
	LocalDescriptor, LocalExtent string
	CID                          uint32
	// ParentFileNameHint is what the descriptor says ("" for the base).
	ParentFileNameHint string
	// Stats is what a delta's grain tables hold.
	Stats *vmdk.ExtentStats
}

// DiskChainFiles are the files written for a chain.
type DiskChainFiles struct {
	// Top is the host path of the descriptor the VM runs on.
	Top string
	// Links are top first, base last.
	Links         []ChainLinkFiles
	CapacityBytes int64
	// SHA256 is the guest-visible content's hex SHA-256, computed from
	// the spec (base content with each delta applied in order), not from
	// the files.
	SHA256 string
}

// WriteDiskChain lays out a disk as ESXi leaves it after snapshots: a flat
// base (sparse file, thin or not) and one descriptor plus extent per delta,
// each delta's parentFileNameHint naming its parent (relative in the same
// folder, absolute across folders or datastores) and its parentCID equal
// to the parent's CID. Nothing is registered; the caller names Top in a
// .vmx.
func WriteDiskChain(root string, spec DiskChainSpec) (*DiskChainFiles, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	baseLocal, baseHost, err := chainDir(root, spec.baseDatastore(), spec.baseFolder())
	if err != nil {
		return nil, err
	}
	vmLocal, vmHost, err := chainDir(root, spec.Datastore, spec.Folder)
	if err != nil {
		return nil, err
	}
	base, err := spec.writeBase(baseLocal, baseHost)
	if err != nil {
		return nil, err
	}
	links := []ChainLinkFiles{base}
	for i, d := range spec.Deltas {
		l, err := spec.writeDelta(vmLocal, vmHost, i, d, links[len(links)-1])
		if err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	out := &DiskChainFiles{CapacityBytes: spec.CapacityBytes}
	for i := len(links) - 1; i >= 0; i-- {
		out.Links = append(out.Links, links[i])
	}
	out.Top = out.Links[0].Descriptor
	out.SHA256 = ChainSHA256(spec.CapacityBytes, spec.Base, spec.Deltas)
	return out, nil
}

// withDefaults checks the spec and fills in its defaults.
func (spec DiskChainSpec) withDefaults() (DiskChainSpec, error) {
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00\"") {
		return spec, fmt.Errorf("esxisim: invalid disk name %q", spec.Name)
	}
	if spec.CapacityBytes <= 0 || spec.CapacityBytes%512 != 0 {
		return spec, fmt.Errorf("esxisim: capacity %d is not a positive multiple of 512", spec.CapacityBytes)
	}
	if spec.Datastore == "" {
		spec.Datastore = "datastore1"
	}
	if spec.Folder == "" {
		spec.Folder = spec.Name
	}
	for _, p := range []string{spec.Datastore, spec.Folder, spec.baseDatastore(), spec.baseFolder()} {
		if !validRelPath(p) {
			return spec, fmt.Errorf("esxisim: invalid datastore or folder %q", p)
		}
	}
	if spec.Base == nil {
		spec.Base = DefaultContent(spec.CapacityBytes, 1)
	}
	spec.Base = normalizeExtents(spec.CapacityBytes, spec.Base)
	return spec, nil
}

func (spec DiskChainSpec) baseDatastore() string { return cmp.Or(spec.BaseDatastore, spec.Datastore) }
func (spec DiskChainSpec) baseFolder() string    { return cmp.Or(spec.BaseFolder, spec.Folder) }

// chainDir makes the folder of a datastore and returns its local and host
// paths.
func chainDir(root, ds, folder string) (local, host string, err error) {
	local = filepath.Join(root, ds, filepath.FromSlash(folder))
	if err := os.MkdirAll(local, 0o755); err != nil {
		return "", "", fmt.Errorf("esxisim: %w", err)
	}
	return local, volumesDir + "/" + ds + "/" + folder, nil
}

// cid is link i's CID (0: the base), derived from the disk's identity;
// never the no-parent value.
func (spec DiskChainSpec) cid(i int) uint32 {
	id := idBytes("chain", spec.Datastore, spec.Folder, spec.Name, fmt.Sprint(i))
	c := binary.BigEndian.Uint32(id)
	if c == vmdk.NoParentCID {
		c--
	}
	return c
}

// writeBase writes the base: a sparse -flat.vmdk written like every
// simulator disk, and its descriptor.
func (spec DiskChainSpec) writeBase(local, host string) (ChainLinkFiles, error) {
	sectors := spec.CapacityBytes / vmdk.SectorSize
	base := ChainLinkFiles{Format: vmdk.Flat, CID: spec.cid(0),
		Descriptor: host + "/" + spec.Name + ".vmdk", Extent: host + "/" + spec.Name + "-flat.vmdk",
		LocalDescriptor: filepath.Join(local, spec.Name+".vmdk"), LocalExtent: filepath.Join(local, spec.Name+"-flat.vmdk")}
	if err := writeSparse(base.LocalExtent, spec.CapacityBytes, spec.Base); err != nil {
		return ChainLinkFiles{}, err
	}
	bd := vmdk.Descriptor{CID: base.CID, ParentCID: vmdk.NoParentCID, CreateType: vmdk.Flat,
		Extents: []vmdk.ExtentLine{{Access: "RW", Sectors: sectors, Type: "VMFS", File: spec.Name + "-flat.vmdk"}},
		DDB: []vmdk.KV{{Key: "ddb.adapterType", Value: "lsilogic"},
			{Key: "ddb.geometry.cylinders", Value: fmt.Sprint(min(sectors/(255*63), 65535))},
			{Key: "ddb.geometry.heads", Value: "255"}, {Key: "ddb.geometry.sectors", Value: "63"}}}
	if spec.Thin {
		bd.DDB = append(bd.DDB, vmdk.KV{Key: "ddb.thinProvisioned", Value: "1"})
	}
	bd.DDB = append(bd.DDB, vmdk.KV{Key: "ddb.virtualHWVersion", Value: "19"})
	if err := os.WriteFile(base.LocalDescriptor, []byte(bd.Text()), 0o644); err != nil {
		return ChainLinkFiles{}, fmt.Errorf("esxisim: %w", err)
	}
	return base, nil
}

// writeDelta writes delta i (d) on parent in the VM's folder (local and
// host paths).
func (spec DiskChainSpec) writeDelta(local, host string, i int, d DeltaSpec, parent ChainLinkFiles) (ChainLinkFiles, error) {
	if !d.Format.IsDelta() {
		return ChainLinkFiles{}, fmt.Errorf("esxisim: delta %d: format %q is not a snapshot delta", i+1, d.Format)
	}
	hint := path.Base(parent.Descriptor)
	if path.Dir(parent.Descriptor) != host {
		hint = parent.Descriptor
	}
	name := fmt.Sprintf("%s-%06d", spec.Name, i+1)
	w, err := vmdk.WriteLink(vmdk.LinkSpec{Dir: local, Name: name, Format: d.Format, CapacitySectors: spec.CapacityBytes / vmdk.SectorSize,
		Writes: d.Writes, CID: spec.cid(i + 1), ParentCID: parent.CID, ParentFileNameHint: hint})
	if err != nil {
		return ChainLinkFiles{}, fmt.Errorf("esxisim: delta %d: %w", i+1, err)
	}
	return ChainLinkFiles{Format: d.Format, CID: spec.cid(i + 1), ParentFileNameHint: hint,
		Descriptor: host + "/" + name + ".vmdk", Extent: host + "/" + filepath.Base(w.Extent),
		LocalDescriptor: w.Descriptor, LocalExtent: w.Extent, Stats: w.Stats}, nil
}

// ChainSHA256 is the hex disk digest (package diskdigest) of the
// guest-visible content of a disk with the given base content and deltas
// (oldest first), streamed.
func ChainSHA256(capacity int64, baseContent []Extent, deltas []DeltaSpec) string {
	h := diskdigest.New()
	r := &contentReader{capacity: capacity, exts: normalizeExtents(capacity, baseContent)}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < capacity; {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), capacity-off)])
		if err != nil {
			panic(err) // contentReader never fails within capacity
		}
		chunk := buf[:n]
		for _, d := range deltas {
			for _, w := range d.Writes {
				length := int64(len(w.Data))
				if w.Data == nil {
					length = w.ZeroLength
				}
				s, e := max(w.Offset, off), min(w.Offset+length, off+int64(n))
				if s >= e {
					continue
				}
				if w.Data != nil {
					copy(chunk[s-off:e-off], w.Data[s-w.Offset:])
				} else {
					clear(chunk[s-off : e-off])
				}
			}
		}
		h.Write(chunk)
		off += int64(n)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// HostResolver maps names in descriptors written under root to local
// files: absolute /vmfs/volumes paths to root, relative names to the
// referring descriptor's folder.
func HostResolver(root string) vmdk.Resolver {
	return func(descriptorPath, name string) (string, error) {
		if !strings.HasPrefix(name, "/") {
			return filepath.Join(filepath.Dir(descriptorPath), filepath.FromSlash(name)), nil
		}
		rel, ok := rootRel(name)
		if !ok || rel == "." {
			return "", fmt.Errorf("%q is not a file under %s", name, volumesDir)
		}
		return filepath.Join(root, filepath.FromSlash(rel)), nil
	}
}

func validRelPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\"\\") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// SnapshotChainSpec is the standard three-level chain: a thin base, a
// first delta in format mid and a second in format top, exercising every
// grain case: new data over base data, new data over zeros, a delta's data
// overwritten by the next, grains falling through both deltas, the disk's
// last grain (partial when capacity is not a multiple of 4 KiB), writes
// across a grain-table boundary, and for seSparse deltas grains explicitly
// zeroed over base data and over the older delta's data. capacity must be
// at least 24 MiB and a multiple of 512. With baseDatastore set, the base
// lives in the folder "base-"+name on that datastore and the first delta
// names it by its absolute path.
func SnapshotChainSpec(datastore, folder, name string, capacity int64, mid, top vmdk.Format, baseDatastore string) (DiskChainSpec, error) {
	const kib, mib = 1 << 10, 1 << 20
	if capacity < 24*mib || capacity%512 != 0 {
		return DiskChainSpec{}, errors.New("esxisim: a snapshot chain needs at least 24 MiB, in whole sectors")
	}
	third := capacity / 3 &^ (4*kib - 1)
	base := []Extent{
		{Offset: 0, Length: mib, Seed: 11},
		{Offset: third, Length: 2 * mib, Seed: 12},
		{Offset: capacity - mib - 512, Length: mib + 512, Seed: 13},
	}
	data := func(off, n int64, seed uint64) vmdk.Write {
		b := make([]byte, n)
		PatternBytes(b, seed, off)
		return vmdk.Write{Offset: off, Data: b}
	}
	last := (capacity - 1) &^ (4*kib - 1)
	midW := []vmdk.Write{
		data(64*kib, 8*kib, 21),       // over base data
		data(5*mib, 12*kib, 22),       // over zeros
		data(16*mib-4*kib, 8*kib, 23), // across a grain-table boundary
		data(last, capacity-last, 24), // the disk's last grain
		data(third+mib, 4*kib, 25),    // over base data, kept by top
	}
	if mid == vmdk.SESparse {
		midW = append(midW, vmdk.Write{Offset: third + 8*kib, ZeroLength: 16 * kib}) // zeros over base data
	}
	topW := []vmdk.Write{
		data(64*kib+4*kib, 4*kib, 31), // over the older delta's data
		data(7*mib, 4*kib, 32),        // over zeros
		data(third+64*kib, 8*kib, 33), // over base data
	}
	if top == vmdk.SESparse {
		topW = append(topW,
			vmdk.Write{Offset: 5 * mib, ZeroLength: 4 * kib},  // zeros over the older delta's data
			vmdk.Write{Offset: 12 * kib, ZeroLength: 8 * kib}) // zeros over base data
	}
	spec := DiskChainSpec{Datastore: datastore, Folder: folder, Name: name, CapacityBytes: capacity, Thin: true,
		Base: base, Deltas: []DeltaSpec{{Format: mid, Writes: midW}, {Format: top, Writes: topW}}}
	if baseDatastore != "" {
		spec.BaseDatastore, spec.BaseFolder = baseDatastore, "base-"+name
	}
	return spec, nil
}
