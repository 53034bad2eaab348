package vmdk

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
)

// COWD (vmfsSparse) layout: a 2048-byte header, the grain directory at
// sector 4 (one little-endian uint32 sector offset per grain table, 0 when
// the table is absent), grain tables of 4096 uint32 entries (the sector of
// the grain, 0 when the grain is unallocated: reads fall through to the
// parent), then the grains. ESXi uses one-sector grains.
const (
	cowdMagic        = "COWD"
	cowdHeaderSize   = 2048
	cowdGDSector     = cowdHeaderSize / SectorSize
	cowdGTEntries    = 4096
	cowdGrainSectors = 1
	cowdVersion      = 1
	cowdFlags        = 3
)

// seSparse layout: a 512-byte const header (magic 0xcafebabe) whose fields
// locate every region in sectors, a 512-byte volatile header (0xcafecafe),
// a journal, the grain directory (uint64 entries: 0 for no table, else
// 0x1000000000000000 | table index), grain tables of 4096 uint64 entries,
// a free bitmap, a backmap and the 4 KiB grains. A grain-table entry's top
// nibble is its type: 0 unallocated (falls through), 1 unmapped and 2 zero
// (both read as zeros, hiding the parent), 3 allocated, with the grain's
// index split as bits 48-59 = index bits 0-11 and bits 0-47 = index >> 12.
const (
	seConstMagic    = 0xcafebabe
	seVolatileMagic = 0xcafecafe
	seVersion       = 0x0000000200000001
	seGrainSectors  = 8
	seGTSectors     = 64
	seGTEntries     = seGTSectors * SectorSize / 8
	seGDAllocated   = 0x1000000000000000
	seTypeMask      = 0xf000000000000000
	seTypeUnmapped  = 0x1000000000000000
	seTypeZero      = 0x2000000000000000
	seTypeAllocated = 0x3000000000000000
	// seAlign keeps every region 4 KiB aligned, as on a 4K-native VMFS 6.
	seAlign = 8
)

// maxCOWDSectors: the COWD header holds the capacity in 32 bits (2 TiB).
const maxCOWDSectors = math.MaxUint32

// Write is one change recorded in a delta, at grain granularity.
type Write struct {
	// Offset in the disk, in bytes: a multiple of the format's grain size.
	Offset int64
	// Data is the new content; its length is a multiple of the grain size,
	// or it ends exactly at the end of the disk (the last grain is then
	// padded with zeros in the file).
	Data []byte
	// ZeroLength, with Data nil, marks that many bytes from Offset as
	// explicitly zero (seSparse only): they read as zeros whatever the
	// parent holds. Same alignment rules as Data.
	ZeroLength int64
}

// ExtentStats is what a sparse extent's grain tables say.
type ExtentStats struct {
	Format    Format
	GrainSize int64
	// CapacitySectors is the capacity recorded in the extent's header.
	CapacitySectors int64
	// DataGrains hold content; ZeroGrains are explicit zeros (seSparse).
	DataGrains, ZeroGrains int64
	// GrainTables is the number of grain tables present.
	GrainTables int64
	// FileSize is the extent file's length.
	FileSize int64
}

// AllocatedBytes is the guest data the delta holds.
func (s ExtentStats) AllocatedBytes() int64 { return s.DataGrains * s.GrainSize }

type grain struct {
	zero bool
	data []byte // one grain, padded
}

// collectGrains turns writes into one entry per grain index; later writes
// win.
func collectGrains(format Format, capacitySectors int64, writes []Write) (map[int64]grain, error) {
	gs := format.GrainSize()
	capacity := capacitySectors * SectorSize
	out := map[int64]grain{}
	for i, w := range writes {
		length := int64(len(w.Data))
		zero := w.Data == nil
		if zero {
			length = w.ZeroLength
			if format != SESparse {
				return nil, fmt.Errorf("write %d: %s has no zero grains", i, format)
			}
		}
		if w.Offset < 0 || length <= 0 || w.Offset > capacity || length > capacity-w.Offset {
			return nil, fmt.Errorf("write %d: %d bytes at %d is outside the %d-byte disk", i, length, w.Offset, capacity)
		}
		if w.Offset%gs != 0 || (length%gs != 0 && w.Offset+length != capacity) {
			return nil, fmt.Errorf("write %d: %d bytes at %d is not aligned to the %d-byte grain", i, length, w.Offset, gs)
		}
		for off := int64(0); off < length; off += gs {
			g := grain{zero: zero}
			if !zero {
				g.data = make([]byte, gs)
				copy(g.data, w.Data[off:min(off+gs, length)])
			}
			out[(w.Offset+off)/gs] = g
		}
	}
	return out, nil
}

// WriteExtent creates a vmfsSparse or seSparse extent file at path holding
// the writes over a disk of capacitySectors. Grains not written are
// unallocated: they read from the parent.
func WriteExtent(path string, format Format, capacitySectors int64, writes []Write) (ExtentStats, error) {
	if capacitySectors <= 0 || capacitySectors > maxExtentSectors {
		return ExtentStats{}, fmt.Errorf("vmdk: capacity of %d sectors is out of range", capacitySectors)
	}
	grains, err := collectGrains(format, capacitySectors, writes)
	if err != nil {
		return ExtentStats{}, fmt.Errorf("vmdk: %s: %w", path, err)
	}
	idx := make([]int64, 0, len(grains))
	for k := range grains {
		idx = append(idx, k)
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })

	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return ExtentStats{}, fmt.Errorf("vmdk: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var st ExtentStats
	switch format {
	case VMFSSparse:
		st, err = writeCOWD(w, capacitySectors, grains, idx)
	case SESparse:
		st, err = writeSESparse(w, capacitySectors, grains, idx)
	default:
		err = fmt.Errorf("format %q is not a sparse delta", format)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return ExtentStats{}, fmt.Errorf("vmdk: writing %s: %w", path, err)
	}
	return st, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func roundUp(a, b int64) int64 { return ceilDiv(a, b) * b }

func writeCOWD(w *bufio.Writer, capacity int64, grains map[int64]grain, idx []int64) (ExtentStats, error) {
	if capacity > maxCOWDSectors {
		return ExtentStats{}, fmt.Errorf("vmfsSparse holds at most %d sectors (2 TiB); use seSparse", int64(maxCOWDSectors))
	}
	gtCover := int64(cowdGTEntries * cowdGrainSectors)
	numGD := ceilDiv(capacity, gtCover)
	gdSectors := ceilDiv(numGD*4, SectorSize)
	gtSectors := int64(cowdGTEntries * 4 / SectorSize)

	// Grain tables in order of first use, then grains in disk order.
	gtSlot := map[int64]int64{}
	var gtOrder []int64
	for _, g := range idx {
		t := g / cowdGTEntries
		if _, ok := gtSlot[t]; !ok {
			gtSlot[t] = int64(len(gtOrder))
			gtOrder = append(gtOrder, t)
		}
	}
	gtStart := int64(cowdGDSector) + gdSectors
	grainStart := gtStart + int64(len(gtOrder))*gtSectors
	end := grainStart + int64(len(idx))*cowdGrainSectors
	if end > maxCOWDSectors {
		return ExtentStats{}, errors.New("the delta would exceed the 32-bit sector offsets of vmfsSparse")
	}

	hdr := make([]byte, cowdHeaderSize)
	copy(hdr, cowdMagic)
	le := binary.LittleEndian
	le.PutUint32(hdr[4:], cowdVersion)
	le.PutUint32(hdr[8:], cowdFlags)
	le.PutUint32(hdr[12:], uint32(capacity))
	le.PutUint32(hdr[16:], cowdGrainSectors)
	le.PutUint32(hdr[20:], cowdGDSector)
	le.PutUint32(hdr[24:], uint32(numGD))
	le.PutUint32(hdr[28:], uint32(end)) // next free sector
	if _, err := w.Write(hdr); err != nil {
		return ExtentStats{}, err
	}

	gd := make([]byte, gdSectors*SectorSize)
	for t, slot := range gtSlot {
		le.PutUint32(gd[t*4:], uint32(gtStart+slot*gtSectors))
	}
	if _, err := w.Write(gd); err != nil {
		return ExtentStats{}, err
	}
	gts := make([]byte, int64(len(gtOrder))*gtSectors*SectorSize)
	for i, g := range idx {
		t := g / cowdGTEntries
		pos := gtSlot[t]*gtSectors*SectorSize + (g%cowdGTEntries)*4
		le.PutUint32(gts[pos:], uint32(grainStart+int64(i)*cowdGrainSectors))
	}
	if _, err := w.Write(gts); err != nil {
		return ExtentStats{}, err
	}
	for _, g := range idx {
		if _, err := w.Write(grains[g].data); err != nil {
			return ExtentStats{}, err
		}
	}
	return ExtentStats{Format: VMFSSparse, GrainSize: VMFSSparse.GrainSize(), CapacitySectors: capacity,
		DataGrains: int64(len(idx)), GrainTables: int64(len(gtOrder)), FileSize: end * SectorSize}, nil
}

// seEncodeGrain stores grain index i in an allocated grain-table entry.
func seEncodeGrain(i int64) uint64 {
	u := uint64(i)
	return seTypeAllocated | (u&0xfff)<<48 | (u>>12)&0x0000ffffffffffff
}

// seDecodeGrain is the inverse of seEncodeGrain.
func seDecodeGrain(e uint64) int64 {
	return int64((e&0x0fff000000000000)>>48 | (e&0x0000ffffffffffff)<<12)
}

func writeSESparse(w *bufio.Writer, capacity int64, grains map[int64]grain, idx []int64) (ExtentStats, error) {
	l := layoutSESparse(capacity, grains, idx)
	gts, backmap := l.grainTables(grains, idx)
	for _, b := range [][]byte{l.header(), make([]byte, (seVolatileOff-1)*SectorSize), l.volatileHeader(),
		make([]byte, (seGDOff-seVolatileOff-1)*SectorSize), l.grainDirectory(), gts,
		make([]byte, (l.bitmapSize+l.backmapSize)*SectorSize)} {
		if _, err := w.Write(b); err != nil {
			return ExtentStats{}, err
		}
	}
	for _, g := range backmap {
		if _, err := w.Write(grains[g].data); err != nil {
			return ExtentStats{}, err
		}
	}
	return ExtentStats{Format: SESparse, GrainSize: SESparse.GrainSize(), CapacitySectors: capacity,
		DataGrains: l.dataGrains, ZeroGrains: l.zeroGrains, GrainTables: int64(len(l.gtOrder)),
		FileSize: (l.grainsOff + l.grainsSize) * SectorSize}, nil
}

// Fixed sectors of the seSparse files written here: the volatile header,
// the journal header, the (empty) journal and the grain directory after it.
const (
	seVolatileOff   = 8
	seJournalHdrOff = 16
	seJournalOff    = 24
	seJournalSize   = 8
	seGDOff         = seJournalOff + seJournalSize
)

// seLayout places the parts of an seSparse file (offsets and sizes in
// sectors) for a set of grains.
type seLayout struct {
	capacity                int64
	gdSectors               int64
	gtSlot                  map[int64]int64 // grain table number -> its slot
	gtOrder                 []int64         // grain table numbers by slot
	dataGrains, zeroGrains  int64
	gtOff, gtSize           int64
	bitmapOff, bitmapSize   int64
	backmapOff, backmapSize int64
	grainsOff, grainsSize   int64
}

func layoutSESparse(capacity int64, grains map[int64]grain, idx []int64) seLayout {
	gtCover := int64(seGTEntries * seGrainSectors)
	numGD := ceilDiv(capacity, gtCover)
	l := seLayout{capacity: capacity, gdSectors: roundUp(ceilDiv(numGD*8, SectorSize), seAlign), gtSlot: map[int64]int64{}}
	for _, g := range idx {
		t := g / seGTEntries
		if _, ok := l.gtSlot[t]; !ok {
			l.gtSlot[t] = int64(len(l.gtOrder))
			l.gtOrder = append(l.gtOrder, t)
		}
		if grains[g].zero {
			l.zeroGrains++
		} else {
			l.dataGrains++
		}
	}
	l.gtOff = seGDOff + l.gdSectors
	l.gtSize = int64(len(l.gtOrder)) * seGTSectors
	l.bitmapOff = l.gtOff + l.gtSize
	l.bitmapSize = int64(seAlign)
	l.backmapOff = l.bitmapOff + l.bitmapSize
	l.backmapSize = int64(seAlign)
	l.grainsOff = l.backmapOff + l.backmapSize
	l.grainsSize = l.dataGrains * seGrainSectors
	return l
}

// header is the constant header, sector 0.
func (l seLayout) header() []byte {
	hdr := make([]byte, SectorSize)
	for i, v := range []uint64{seConstMagic, seVersion, uint64(l.capacity), seGrainSectors, seGTSectors, 0, 0, 0, 0, 0,
		seVolatileOff, 1, seJournalHdrOff, seAlign, seJournalOff, seJournalSize,
		seGDOff, uint64(l.gdSectors), uint64(l.gtOff), uint64(l.gtSize), uint64(l.bitmapOff), uint64(l.bitmapSize),
		uint64(l.backmapOff), uint64(l.backmapSize), uint64(l.grainsOff), uint64(l.grainsSize)} {
		binary.LittleEndian.PutUint64(hdr[i*8:], v)
	}
	return hdr
}

// volatileHeader is the volatile header's sector.
func (l seLayout) volatileHeader() []byte {
	vol := make([]byte, SectorSize)
	binary.LittleEndian.PutUint64(vol[0:], seVolatileMagic)
	binary.LittleEndian.PutUint64(vol[8:], uint64(len(l.gtOrder))) // next free grain table
	binary.LittleEndian.PutUint64(vol[16:], 1)                     // next transaction
	// replay_journal (vol[24:]) stays 0: the journal is clean.
	return vol
}

// grainDirectory points each used grain table's entry at its slot.
func (l seLayout) grainDirectory() []byte {
	gd := make([]byte, l.gdSectors*SectorSize)
	for t, slot := range l.gtSlot {
		binary.LittleEndian.PutUint64(gd[t*8:], seGDAllocated|uint64(slot))
	}
	return gd
}

// grainTables returns the grain tables and the backmap: the grains with
// data, in the order they are stored.
func (l seLayout) grainTables(grains map[int64]grain, idx []int64) ([]byte, []int64) {
	gts := make([]byte, l.gtSize*SectorSize)
	backmap := make([]int64, 0, l.dataGrains)
	for _, g := range idx {
		pos := l.gtSlot[g/seGTEntries]*seGTSectors*SectorSize + (g%seGTEntries)*8
		if grains[g].zero {
			binary.LittleEndian.PutUint64(gts[pos:], seTypeZero)
			continue
		}
		binary.LittleEndian.PutUint64(gts[pos:], seEncodeGrain(int64(len(backmap))))
		backmap = append(backmap, g)
	}
	return gts, backmap
}

// WriteFlat creates a flat extent of capacityBytes at path holding the
// writes (sector aligned), leaving everything else as holes, as a thin
// disk on VMFS reads.
func WriteFlat(path string, capacityBytes int64, writes []Write) error {
	if capacityBytes <= 0 || capacityBytes%SectorSize != 0 {
		return fmt.Errorf("vmdk: flat capacity %d is not a positive multiple of %d", capacityBytes, SectorSize)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("vmdk: %w", err)
	}
	err = f.Truncate(capacityBytes)
	for i, w := range writes {
		if err != nil {
			break
		}
		switch {
		case w.Data == nil:
			err = fmt.Errorf("write %d: a flat extent has no zero grains", i)
		case w.Offset < 0 || w.Offset%SectorSize != 0 || w.Offset > capacityBytes || int64(len(w.Data)) > capacityBytes-w.Offset:
			err = fmt.Errorf("write %d: %d bytes at %d does not fit the %d-byte disk in whole sectors", i, len(w.Data), w.Offset, capacityBytes)
		default:
			_, err = f.WriteAt(w.Data, w.Offset)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("vmdk: writing %s: %w", path, err)
	}
	return nil
}

// Apply applies writes to content (the guest view of a disk) as a delta
// holding them would: data replaces, explicit zeros clear. It models what
// a reader must see, for tests and fixtures.
func Apply(content []byte, writes []Write) {
	for _, w := range writes {
		if w.Data != nil {
			copy(content[w.Offset:], w.Data)
			continue
		}
		clear(content[w.Offset:min(w.Offset+w.ZeroLength, int64(len(content)))])
	}
}
