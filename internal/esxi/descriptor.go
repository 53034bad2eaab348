package esxi

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// SectorSize is the unit of VMDK extent sizes.
const SectorSize = 512

// Extent is one extent line of a VMDK descriptor, e.g.
// `RW 83886080 VMFS "vm-flat.vmdk"`.
type Extent struct {
	Access   string // RW, RDONLY, NOACCESS
	Sectors  int64
	Type     string // VMFS, VMFSSPARSE, SESPARSE, VMFSRDM, VMFSRAW, FLAT, ...
	FileName string
	Offset   int64
}

// Descriptor is a parsed VMDK text descriptor.
type Descriptor struct {
	Version   int
	CID       string
	ParentCID string
	// CreateType: "vmfs" (base disk), "vmfsSparse"/"seSparse" (snapshot
	// delta), "vmfsRawDeviceMap"/"vmfsPassthroughRawDeviceMap" (RDM), ...
	CreateType         string
	ParentFileNameHint string
	Extents            []Extent
	// DDB holds the ddb.* entries without the "ddb." prefix.
	DDB map[string]string
}

// CapacityBytes is the sum of the extents' sizes, or 0 when a size is
// negative or the sum overflows (never a negative or wrapped number); use
// [DescriptorCapacity] to learn why.
func (d Descriptor) CapacityBytes() int64 {
	n, _ := DescriptorCapacity(d)
	return n
}

// Thin reports ddb.thinProvisioned = "1".
func (d Descriptor) Thin() bool { return d.DDB["thinprovisioned"] == "1" }

// IsDelta reports a snapshot delta (vmfsSparse, seSparse, or any
// descriptor naming a parent).
func (d Descriptor) IsDelta() bool {
	switch strings.ToLower(d.CreateType) {
	case "vmfssparse", "sesparse":
		return true
	}
	return d.ParentFileNameHint != ""
}

// RDM reports a raw device mapping; Passthrough is true for physical mode.
func (d Descriptor) RDM() (rdm, passthrough bool) {
	switch strings.ToLower(d.CreateType) {
	case "vmfsrawdevicemap":
		return true, false
	case "vmfspassthroughrawdevicemap":
		return true, true
	}
	return false, false
}

var extentRE = regexp.MustCompile(`^(RW|RDONLY|NOACCESS)\s+(\d+)\s+([A-Z]+)(?:\s+"([^"]*)")?(?:\s+(\d+))?\s*$`)

// maxSectors keeps CapacityBytes from overflowing.
const maxSectors = math.MaxInt64 / SectorSize / 64

// ParseDescriptor parses a VMDK text descriptor.
func ParseDescriptor(s string) (Descriptor, []Problem) {
	d := Descriptor{DDB: map[string]string{}}
	var probs []Problem
	if strings.ContainsRune(s, 0) || strings.HasPrefix(s, "KDMV") || strings.HasPrefix(s, "COWD") {
		return d, []Problem{{Message: "binary data, not a text descriptor (a monolithic sparse disk or a -flat file)"}}
	}
	for i, raw := range strings.Split(s, "\n") {
		ln := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := extentRE.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil || n > maxSectors {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("extent size %q is out of range", m[2])})
				continue
			}
			e := Extent{Access: m[1], Sectors: n, Type: m[3], FileName: m[4]}
			if m[5] != "" {
				off, err := strconv.ParseInt(m[5], 10, 64)
				if err != nil || off > maxSectors {
					probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("extent offset %q is out of range", m[5])})
					continue
				}
				e.Offset = off
			}
			if e.FileName == "" && e.Type != "ZERO" {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("%s extent without a file name", e.Type)})
			}
			d.Extents = append(d.Extents, e)
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("unrecognised line %q", truncate(line, 120))})
			continue
		}
		key := strings.TrimSpace(line[:eq])
		val := strings.TrimSpace(line[eq+1:])
		if len(val) >= 2 && strings.HasPrefix(val, `"`) && strings.HasSuffix(val, `"`) {
			val = val[1 : len(val)-1]
		}
		lk := strings.ToLower(key)
		switch {
		case strings.HasPrefix(lk, "ddb."):
			d.DDB[lk[len("ddb."):]] = val
		case lk == "version":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				n = 0
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("version %q is not a number", val)})
			}
			d.Version = n
		case lk == "cid":
			d.CID = val
		case lk == "parentcid":
			d.ParentCID = val
		case lk == "createtype":
			d.CreateType = val
		case lk == "parentfilenamehint":
			d.ParentFileNameHint = val
		}
	}
	if d.CreateType == "" {
		probs = append(probs, Problem{Message: "no createType: not a VMDK descriptor"})
	}
	if len(d.Extents) == 0 {
		probs = append(probs, Problem{Message: "no extent lines: capacity unknown"})
	}
	return d, probs
}
