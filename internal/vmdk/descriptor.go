// Package vmdk reads and writes the VMDK files an ESXi host leaves behind
// when a VM runs on snapshots: text descriptors, flat (vmfs) extents and the
// two snapshot delta formats, vmfsSparse ("COWD" grain directory, the
// -delta.vmdk of VMFS 5 and small disks) and seSparse (the -sesparse.vmdk of
// VMFS 6 and disks over 2 TB).
//
// The writer lays out delta extents the way qemu's vmdk driver and ESXi
// read them; the reader computes a chain's guest-visible content in Go,
// independently of qemu, so that a conversion can be checked against it;
// the chain model links descriptors through parentFileNameHint and checks
// CID/parentCID.
package vmdk

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// SectorSize is the unit of VMDK sizes and offsets.
const SectorSize = 512

// NoParentCID is the parentCID of a disk without a parent.
const NoParentCID uint32 = 0xffffffff

// Format is a descriptor's createType.
type Format string

// Formats this package writes and reads.
const (
	// Flat is a base disk: a VMFS extent holding the raw content (thin or
	// thick on the datastore; the content is the same).
	Flat Format = "vmfs"
	// VMFSSparse is a snapshot delta in the COWD format (-delta.vmdk).
	VMFSSparse Format = "vmfsSparse"
	// SESparse is a snapshot delta in the space-efficient sparse format
	// (-sesparse.vmdk).
	SESparse Format = "seSparse"
)

// ExtentType is the extent-line type of the format's extent file.
func (f Format) ExtentType() string {
	switch f {
	case Flat:
		return "VMFS"
	case VMFSSparse:
		return "VMFSSPARSE"
	case SESparse:
		return "SESPARSE"
	}
	return ""
}

// ExtentSuffix is how ESXi names the format's extent file after the
// descriptor's base name.
func (f Format) ExtentSuffix() string {
	switch f {
	case Flat:
		return "-flat.vmdk"
	case VMFSSparse:
		return "-delta.vmdk"
	case SESparse:
		return "-sesparse.vmdk"
	}
	return ""
}

// GrainSize is the format's grain in bytes (0 for Flat).
func (f Format) GrainSize() int64 {
	switch f {
	case VMFSSparse:
		return cowdGrainSectors * SectorSize
	case SESparse:
		return seGrainSectors * SectorSize
	}
	return 0
}

// IsDelta reports a snapshot delta format.
func (f Format) IsDelta() bool { return f == VMFSSparse || f == SESparse }

// ExtentLine is one extent line, e.g. `RW 83886080 VMFS "vm-flat.vmdk"`.
type ExtentLine struct {
	Access  string // RW, RDONLY, NOACCESS
	Sectors int64
	Type    string // VMFS, VMFSSPARSE, SESPARSE, FLAT, ...
	File    string
	// Offset is the start sector in File (FLAT extents only).
	Offset int64
}

// KV is one ddb entry; Key keeps its "ddb." prefix.
type KV struct{ Key, Value string }

// Descriptor is a VMDK text descriptor.
type Descriptor struct {
	CID, ParentCID     uint32
	CreateType         Format
	ParentFileNameHint string
	Extents            []ExtentLine
	DDB                []KV
}

// MaxDescriptorBytes bounds a descriptor file; ESXi descriptors are about a
// kilobyte and qemu reads at most 1 MiB of one.
const MaxDescriptorBytes = 1 << 20

// maxExtentSectors is the largest extent any ESXi format can describe
// (seSparse: 64 TiB); larger values are corrupt or hostile.
const maxExtentSectors = 64 << 40 / SectorSize

// Text renders the descriptor as ESXi writes it. qemu finds CID,
// parentCID and parentFileNameHint by their first occurrence, so they come
// first and are written exactly as key="value" without spaces.
func (d Descriptor) Text() string {
	var b strings.Builder
	b.WriteString("# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\n")
	fmt.Fprintf(&b, "CID=%08x\nparentCID=%08x\n", d.CID, d.ParentCID)
	b.WriteString("isNativeSnapshot=\"no\"\n")
	fmt.Fprintf(&b, "createType=\"%s\"\n", d.CreateType)
	if d.ParentFileNameHint != "" {
		fmt.Fprintf(&b, "parentFileNameHint=\"%s\"\n", d.ParentFileNameHint)
	}
	b.WriteString("# Extent description\n")
	for _, e := range d.Extents {
		access := e.Access
		if access == "" {
			access = "RW"
		}
		fmt.Fprintf(&b, "%s %d %s \"%s\"", access, e.Sectors, e.Type, e.File)
		if e.Type == "FLAT" {
			fmt.Fprintf(&b, " %d", e.Offset)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n# The Disk Data Base\n#DDB\n\n")
	for _, kv := range d.DDB {
		fmt.Fprintf(&b, "%s = \"%s\"\n", kv.Key, kv.Value)
	}
	return b.String()
}

// DDBValue returns the value of ddb key (with or without the "ddb."
// prefix, case-insensitive).
func (d Descriptor) DDBValue(key string) (string, bool) {
	if !strings.HasPrefix(strings.ToLower(key), "ddb.") {
		key = "ddb." + key
	}
	for _, kv := range d.DDB {
		if strings.EqualFold(kv.Key, key) {
			return kv.Value, true
		}
	}
	return "", false
}

// CapacitySectors sums the extents with checked arithmetic.
func (d Descriptor) CapacitySectors() (int64, error) {
	var n int64
	for i, e := range d.Extents {
		if e.Sectors <= 0 || e.Sectors > maxExtentSectors {
			return 0, fmt.Errorf("extent %d: %d sectors is out of range", i+1, e.Sectors)
		}
		if n > math.MaxInt64/SectorSize-e.Sectors || n+e.Sectors > maxExtentSectors {
			return 0, fmt.Errorf("extent %d: the extents' total size overflows the 64 TiB a VMDK can hold", i+1)
		}
		n += e.Sectors
	}
	if n == 0 {
		return 0, errors.New("no extents: capacity unknown")
	}
	return n, nil
}

var extentLineRE = regexp.MustCompile(`^(RW|RDONLY|NOACCESS)\s+(\d+)\s+([A-Z]+)(?:\s+"([^"]*)")?(?:\s+(\d+))?\s*$`)

// ParseDescriptor parses a descriptor strictly enough to rebuild a chain
// from it: CID and parentCID must be 32-bit hex numbers, createType must be
// present, and every extent line must be well formed.
func ParseDescriptor(text string) (Descriptor, error) {
	var d Descriptor
	if len(text) > MaxDescriptorBytes {
		return d, fmt.Errorf("descriptor of %d bytes is larger than %d", len(text), MaxDescriptorBytes)
	}
	if strings.ContainsRune(text, 0) || strings.HasPrefix(text, "KDMV") || strings.HasPrefix(text, "COWD") {
		return d, errors.New("binary data, not a text descriptor")
	}
	var haveCID, haveParent bool
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := extentLineRE.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil || n <= 0 || n > maxExtentSectors {
				return d, fmt.Errorf("line %d: extent size %q is out of range", i+1, m[2])
			}
			e := ExtentLine{Access: m[1], Sectors: n, Type: m[3], File: m[4]}
			if m[5] != "" {
				if e.Offset, err = strconv.ParseInt(m[5], 10, 64); err != nil {
					return d, fmt.Errorf("line %d: extent offset %q is out of range", i+1, m[5])
				}
			}
			if e.File == "" && e.Type != "ZERO" {
				return d, fmt.Errorf("line %d: %s extent without a file name", i+1, e.Type)
			}
			d.Extents = append(d.Extents, e)
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return d, fmt.Errorf("line %d: unrecognised line %q", i+1, truncate(line, 80))
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		switch lk := strings.ToLower(key); {
		case strings.HasPrefix(lk, "ddb."):
			d.DDB = append(d.DDB, KV{Key: key, Value: val})
		case lk == "cid":
			v, err := parseCID(val)
			if err != nil {
				return d, fmt.Errorf("line %d: CID: %w", i+1, err)
			}
			d.CID, haveCID = v, true
		case lk == "parentcid":
			v, err := parseCID(val)
			if err != nil {
				return d, fmt.Errorf("line %d: parentCID: %w", i+1, err)
			}
			d.ParentCID, haveParent = v, true
		case lk == "createtype":
			d.CreateType = Format(val)
		case lk == "parentfilenamehint":
			d.ParentFileNameHint = val
		}
	}
	switch {
	case d.CreateType == "":
		return d, errors.New("no createType: not a VMDK descriptor")
	case !haveCID:
		return d, errors.New("no CID")
	case !haveParent:
		return d, errors.New("no parentCID")
	case len(d.Extents) == 0:
		return d, errors.New("no extent lines")
	}
	if _, err := d.CapacitySectors(); err != nil {
		return d, err
	}
	return d, nil
}

func parseCID(s string) (uint32, error) {
	if s == "" || len(s) > 8 {
		return 0, fmt.Errorf("%q is not a 32-bit hex number", s)
	}
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a 32-bit hex number", s)
	}
	return uint32(v), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
