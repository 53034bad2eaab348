package vmdk

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LinkSpec describes one link of a chain for WriteLink.
type LinkSpec struct {
	// Dir is the local folder; the descriptor is Dir/Name.vmdk and the
	// extent Dir/Name plus the format's suffix (-flat, -delta, -sesparse).
	Dir, Name       string
	Format          Format
	CapacitySectors int64
	// Writes is the content of a Flat base or the changes of a delta.
	Writes []Write
	// CID is the link's content ID; ParentCID must equal the parent's CID
	// (NoParentCID for a base).
	CID, ParentCID     uint32
	ParentFileNameHint string
	// DDB entries, keys with their "ddb." prefix; Thin adds
	// ddb.thinProvisioned = "1" to a base.
	DDB  []KV
	Thin bool
}

// WrittenLink is what WriteLink wrote.
type WrittenLink struct {
	Descriptor, Extent string
	// Stats is set for deltas.
	Stats *ExtentStats
}

// WriteLink writes a link's extent file and descriptor.
func WriteLink(s LinkSpec) (WrittenLink, error) {
	if s.Name == "" || strings.ContainsAny(s.Name, "/\\\x00\"\n") {
		return WrittenLink{}, fmt.Errorf("vmdk: invalid link name %q", s.Name)
	}
	if strings.ContainsAny(s.ParentFileNameHint, "\"\n\x00") {
		return WrittenLink{}, fmt.Errorf("vmdk: invalid parentFileNameHint %q", s.ParentFileNameHint)
	}
	extentName := s.Name + s.Format.ExtentSuffix()
	out := WrittenLink{Descriptor: filepath.Join(s.Dir, s.Name+".vmdk"), Extent: filepath.Join(s.Dir, extentName)}
	switch {
	case s.Format == Flat:
		if s.ParentFileNameHint != "" || s.ParentCID != NoParentCID {
			return WrittenLink{}, fmt.Errorf("vmdk: a base has no parent")
		}
		if err := WriteFlat(out.Extent, s.CapacitySectors*SectorSize, s.Writes); err != nil {
			return WrittenLink{}, err
		}
	case s.Format.IsDelta():
		if s.ParentFileNameHint == "" {
			return WrittenLink{}, fmt.Errorf("vmdk: a %s delta needs a parentFileNameHint", s.Format)
		}
		st, err := WriteExtent(out.Extent, s.Format, s.CapacitySectors, s.Writes)
		if err != nil {
			return WrittenLink{}, err
		}
		out.Stats = &st
	default:
		return WrittenLink{}, fmt.Errorf("vmdk: cannot write format %q", s.Format)
	}
	d := Descriptor{CID: s.CID, ParentCID: s.ParentCID, CreateType: s.Format, ParentFileNameHint: s.ParentFileNameHint,
		Extents: []ExtentLine{{Access: "RW", Sectors: s.CapacitySectors, Type: s.Format.ExtentType(), File: extentName}}}
	d.DDB = append(d.DDB, s.DDB...)
	if s.Format == SESparse {
		d.DDB = append(d.DDB, KV{"ddb.grain", "8"})
	}
	if s.Thin && s.Format == Flat {
		d.DDB = append(d.DDB, KV{"ddb.thinProvisioned", "1"})
	}
	if err := os.WriteFile(out.Descriptor, []byte(d.Text()), 0o644); err != nil {
		return WrittenLink{}, fmt.Errorf("vmdk: %w", err)
	}
	return out, nil
}
