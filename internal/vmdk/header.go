package vmdk

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// DeltaHeaderBytes is how much of a delta extent [DeltaGrainBytes] needs:
// its first sector, which holds the vmfsSparse (COWD) header or the
// seSparse const header.
const DeltaHeaderBytes = SectorSize

// cowdGTBytes is the size of one vmfsSparse grain table (4096 uint32).
const cowdGTBytes = cowdGTEntries * 4

// ExtentFormat maps a descriptor extent line's type (VMFSSPARSE,
// SESPARSE, any case) to the delta format, or "" for any other type.
func ExtentFormat(extentType string) Format {
	switch strings.ToUpper(extentType) {
	case "VMFSSPARSE":
		return VMFSSparse
	case "SESPARSE":
		return SESparse
	}
	return ""
}

// DeltaGrainBytes returns the bytes of the grain area a snapshot delta
// extent holds, from its first sector (header, at least
// [DeltaHeaderBytes] bytes), the extent file's length and the extent's
// capacity in sectors as its descriptor states it:
//
//   - vmfsSparse: from the end of the grain directory (gdOffset +
//     numGDEntries*4 bytes, in whole sectors) to the header's freeSector.
//     ESXi appends both the grains and the 16 KiB grain tables that index
//     them there, so this is the data written to the delta plus its
//     grain tables; nothing is counted twice. At most capacity plus one
//     grain table per grain directory entry, and the file's length.
//   - seSparse: the file's length past the header's grains_offset: the 4
//     KiB grains the delta has appended, including grains freed but not
//     yet reclaimed; explicitly zeroed grains take none. At most the
//     capacity rounded up to a grain.
//
// Every number read is checked: a header that is not the format's, or
// whose fields are out of range or contradict the descriptor or the file,
// is an error (the disk's problem), never a panic or a wrapped value.
func DeltaGrainBytes(format Format, header []byte, fileSize, capacitySectors int64) (int64, error) {
	if len(header) < DeltaHeaderBytes {
		return 0, fmt.Errorf("%s header: %d bytes read, want %d (the file is shorter than its header)", format, len(header), DeltaHeaderBytes)
	}
	if fileSize < DeltaHeaderBytes {
		return 0, fmt.Errorf("%s extent of %d bytes is shorter than its header", format, fileSize)
	}
	if capacitySectors <= 0 || capacitySectors > maxExtentSectors {
		return 0, fmt.Errorf("%s extent capacity of %d sectors is out of range", format, capacitySectors)
	}
	le := binary.LittleEndian
	switch format {
	case VMFSSparse:
		if string(header[:4]) != cowdMagic {
			return 0, fmt.Errorf("not a vmfsSparse (COWD) extent: magic %q", header[:4])
		}
		numSectors := int64(le.Uint32(header[12:]))
		grainSectors := int64(le.Uint32(header[16:]))
		gdOffset := int64(le.Uint32(header[20:]))
		numGD := int64(le.Uint32(header[24:]))
		freeSector := int64(le.Uint32(header[28:]))
		if numSectors != capacitySectors {
			return 0, fmt.Errorf("vmfsSparse header capacity of %d sectors differs from the descriptor's %d", numSectors, capacitySectors)
		}
		if grainSectors <= 0 || grainSectors > 0x200000 {
			return 0, fmt.Errorf("vmfsSparse grain of %d sectors is invalid", grainSectors)
		}
		// The directory must cover the capacity, and no more than one
		// entry past it.
		cover := grainSectors * cowdGTEntries
		if need := ceilDiv(capacitySectors, cover); numGD < need || numGD > need+1 {
			return 0, fmt.Errorf("vmfsSparse grain directory of %d entries does not match %d sectors of %d-sector grains", numGD, capacitySectors, grainSectors)
		}
		if gdOffset < cowdGDSector {
			return 0, fmt.Errorf("vmfsSparse grain directory at sector %d overlaps the header", gdOffset)
		}
		gdEnd := gdOffset + ceilDiv(numGD*4, SectorSize) // all terms < 2^34: no overflow
		if freeSector < gdEnd {
			return 0, fmt.Errorf("vmfsSparse next free sector %d is inside the header or grain directory (ends at %d)", freeSector, gdEnd)
		}
		if freeSector*SectorSize-(SectorSize-1) > fileSize {
			return 0, fmt.Errorf("vmfsSparse next free sector %d is past the end of the %d-byte file", freeSector, fileSize)
		}
		n := (freeSector - gdEnd) * SectorSize
		if limit := roundUp(capacitySectors, grainSectors)*SectorSize + numGD*cowdGTBytes; n > limit {
			return 0, fmt.Errorf("vmfsSparse delta claims %d bytes of grains and grain tables, more than a %d-sector disk can hold", n, capacitySectors)
		}
		return n, nil
	case SESparse:
		v := func(i int) uint64 { return le.Uint64(header[i*8:]) }
		switch {
		case v(0) != seConstMagic:
			return 0, fmt.Errorf("not a seSparse extent: const header magic %#x", v(0))
		case v(1) != seVersion:
			return 0, fmt.Errorf("seSparse version %#x is not supported", v(1))
		case v(3) != seGrainSectors || v(4) != seGTSectors:
			return 0, fmt.Errorf("seSparse grain of %d / grain table of %d sectors is not supported", v(3), v(4))
		case v(2) != uint64(capacitySectors):
			return 0, fmt.Errorf("seSparse header capacity of %d sectors differs from the descriptor's %d", v(2), capacitySectors)
		}
		grainsOffset := v(24)
		// Every metadata region precedes the grains.
		for _, r := range [][2]int{{10, 11}, {12, 13}, {14, 15}, {16, 17}, {18, 19}, {20, 21}, {22, 23}} {
			off, size := v(r[0]), v(r[1])
			if off > grainsOffset || size > grainsOffset-off {
				return 0, fmt.Errorf("seSparse region at sector %d (%d sectors) overlaps the grains at sector %d", off, size, grainsOffset)
			}
		}
		if grainsOffset == 0 || grainsOffset > uint64(fileSize)/SectorSize {
			return 0, fmt.Errorf("seSparse grains offset %d sectors is not inside the %d-byte file", grainsOffset, fileSize)
		}
		n := fileSize - int64(grainsOffset)*SectorSize
		if limit := roundUp(capacitySectors, seGrainSectors) * SectorSize; n > limit {
			return 0, fmt.Errorf("seSparse delta holds %d bytes of grains, more than a %d-sector disk can hold", n, capacitySectors)
		}
		return n, nil
	}
	return 0, fmt.Errorf("format %q is not a sparse delta", format)
}
