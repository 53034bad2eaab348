package vmdk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// grainState is what a delta says about one grain.
type grainState int

const (
	stateUnallocated grainState = iota // read the parent
	stateData                          // read the extent file
	stateZero                          // zeros, whatever the parent holds
)

// maxGrainTables bounds what a header may make the reader allocate (the
// 64 TiB seSparse maximum needs 4 Mi tables of 16 MiB).
const maxGrainTables = 4 << 20

// sparseExtent is an open vmfsSparse or seSparse extent file.
type sparseExtent struct {
	f            *os.File
	size         int64
	format       Format
	capacity     int64 // sectors
	grainSectors int64
	gtEntries    int64
	entrySize    int64
	gd           []int64 // sector of each grain table, 0 if absent
	seGTBase     int64   // seSparse: sector of grain table 0
	seGrains     int64   // seSparse: sector of grain 0
	gtCache      map[int64][]uint64
}

// openSparse opens an extent file of the given format and reads its header
// and grain directory, checking them as strictly as qemu does.
func openSparse(path string, format Format) (*sparseExtent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	e := &sparseExtent{f: f, format: format, gtCache: map[int64][]uint64{}}
	if err := e.init(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

func (e *sparseExtent) init() error {
	fi, err := e.f.Stat()
	if err != nil {
		return err
	}
	e.size = fi.Size()
	var gdOff, numGD int64
	switch e.format {
	case VMFSSparse:
		gdOff, numGD, err = e.readCOWDHeader()
	case SESparse:
		gdOff, numGD, err = e.readSESparseHeaders()
	default:
		err = fmt.Errorf("format %q is not a sparse delta", e.format)
	}
	if err != nil {
		return err
	}
	if numGD > maxGrainTables || numGD*e.gtEntries*e.grainSectors < e.capacity {
		return fmt.Errorf("grain directory of %d entries does not fit a %d-sector disk", numGD, e.capacity)
	}
	return e.readGrainDirectory(gdOff, numGD)
}

// readCOWDHeader reads a vmfsSparse header and returns where its grain
// directory is (sector) and how many entries it has.
func (e *sparseExtent) readCOWDHeader() (gdOff, numGD int64, err error) {
	le := binary.LittleEndian
	hdr := make([]byte, 32)
	if _, err := e.f.ReadAt(hdr, 0); err != nil {
		return 0, 0, fmt.Errorf("reading the COWD header: %w", err)
	}
	if string(hdr[:4]) != cowdMagic {
		return 0, 0, fmt.Errorf("not a vmfsSparse (COWD) extent: magic %q", hdr[:4])
	}
	e.capacity = int64(le.Uint32(hdr[12:]))
	e.grainSectors = int64(le.Uint32(hdr[16:]))
	gdOff = int64(le.Uint32(hdr[20:]))
	numGD = int64(le.Uint32(hdr[24:]))
	e.gtEntries, e.entrySize = cowdGTEntries, 4
	if e.grainSectors <= 0 || e.grainSectors > 0x200000 {
		return 0, 0, fmt.Errorf("grain of %d sectors is invalid", e.grainSectors)
	}
	return gdOff, numGD, nil
}

// readSESparseHeaders reads and checks an seSparse's const and volatile
// headers and returns where its grain directory is (sector) and how many
// entries it has.
func (e *sparseExtent) readSESparseHeaders() (gdOff, numGD int64, err error) {
	le := binary.LittleEndian
	hdr := make([]byte, SectorSize)
	if _, err := e.f.ReadAt(hdr, 0); err != nil {
		return 0, 0, fmt.Errorf("reading the seSparse const header: %w", err)
	}
	v := func(i int) uint64 { return le.Uint64(hdr[i*8:]) }
	switch {
	case v(0) != seConstMagic:
		return 0, 0, fmt.Errorf("not a seSparse extent: const header magic %#x", v(0))
	case v(1) != seVersion:
		return 0, 0, fmt.Errorf("seSparse version %#x is not supported", v(1))
	case v(3) != seGrainSectors || v(4) != seGTSectors:
		return 0, 0, fmt.Errorf("seSparse grain %d / grain table %d sectors are not supported", v(3), v(4))
	case v(5) != 0:
		return 0, 0, fmt.Errorf("seSparse flags %#x are not supported", v(5))
	}
	if err := e.checkSEVolatileHeader(v(10)); err != nil {
		return 0, 0, err
	}
	if v(2) > maxExtentSectors || v(16) > uint64(e.size) || v(17) > maxGrainTables*8/SectorSize || v(18) > uint64(e.size) || v(24) > uint64(e.size) {
		return 0, 0, errors.New("seSparse header fields are out of range")
	}
	e.capacity = int64(v(2))
	e.grainSectors = seGrainSectors
	gdOff, numGD = int64(v(16)), int64(v(17))*SectorSize/8
	e.gtEntries, e.entrySize = seGTEntries, 8
	e.seGTBase = int64(v(18))
	e.seGrains = int64(v(24))
	if e.seGTBase == 0 {
		return 0, 0, errors.New("seSparse grain tables offset is 0")
	}
	return gdOff, numGD, nil
}

// checkSEVolatileHeader checks the seSparse volatile header at sector
// off: its magic, and a journal that needs no replaying.
func (e *sparseExtent) checkSEVolatileHeader(off uint64) error {
	le := binary.LittleEndian
	vol := make([]byte, 32)
	if off > uint64(e.size/SectorSize) {
		return errors.New("seSparse volatile header is past the end of the file")
	}
	if _, err := e.f.ReadAt(vol, int64(off)*SectorSize); err != nil {
		return fmt.Errorf("reading the seSparse volatile header: %w", err)
	}
	if le.Uint64(vol) != seVolatileMagic {
		return fmt.Errorf("seSparse volatile header magic %#x", le.Uint64(vol))
	}
	if le.Uint64(vol[24:]) != 0 {
		return errors.New("seSparse journal needs replaying: the delta was not closed cleanly")
	}
	return nil
}

// readGrainDirectory reads the numGD entries of the grain directory at
// sector gdOff into e.gd.
func (e *sparseExtent) readGrainDirectory(gdOff, numGD int64) error {
	le := binary.LittleEndian
	raw := make([]byte, numGD*e.entrySize)
	if _, err := e.f.ReadAt(raw, gdOff*SectorSize); err != nil {
		return fmt.Errorf("reading the grain directory: %w", err)
	}
	e.gd = make([]int64, numGD)
	for i := range e.gd {
		if e.entrySize == 4 {
			e.gd[i] = int64(le.Uint32(raw[i*4:]))
			continue
		}
		d := le.Uint64(raw[i*8:])
		switch {
		case d == 0:
		case d&0xffffffff00000000 == seGDAllocated:
			e.gd[i] = e.seGTBase + int64(d&0xffffffff)*seGTSectors
		default:
			return fmt.Errorf("grain directory entry %d is invalid: %#x", i, d)
		}
	}
	return nil
}

func (e *sparseExtent) table(t int64) ([]uint64, error) {
	if gt, ok := e.gtCache[t]; ok {
		return gt, nil
	}
	raw := make([]byte, e.gtEntries*e.entrySize)
	if _, err := e.f.ReadAt(raw, e.gd[t]*SectorSize); err != nil {
		return nil, fmt.Errorf("reading grain table %d: %w", t, err)
	}
	gt := make([]uint64, e.gtEntries)
	for i := range gt {
		if e.entrySize == 4 {
			gt[i] = uint64(binary.LittleEndian.Uint32(raw[i*4:]))
		} else {
			gt[i] = binary.LittleEndian.Uint64(raw[i*8:])
		}
	}
	if len(e.gtCache) > 64 {
		clear(e.gtCache)
	}
	e.gtCache[t] = gt
	return gt, nil
}

// lookup returns the state at byte offset off, the file offset of the data
// (stateData) and how many bytes from off share that state: the following
// grains of the same table join the run while their state is the same (and,
// for data, while it continues in the file), so that a reader makes one
// call per run instead of one per grain.
func (e *sparseExtent) lookup(off int64) (grainState, int64, int64, error) {
	gsz := e.grainSectors * SectorSize
	g := off / gsz
	t := g / e.gtEntries
	if t >= int64(len(e.gd)) {
		return 0, 0, 0, fmt.Errorf("offset %d is past the grain directory", off)
	}
	if e.gd[t] == 0 {
		return stateUnallocated, 0, (t+1)*e.gtEntries*gsz - off, nil
	}
	gt, err := e.table(t)
	if err != nil {
		return 0, 0, 0, err
	}
	st, foff, err := e.entry(gt[g%e.gtEntries], g)
	if err != nil {
		return 0, 0, 0, err
	}
	end := g + 1
	for ; end < (t+1)*e.gtEntries; end++ {
		st2, foff2, err := e.entry(gt[end%e.gtEntries], end)
		if err != nil || st2 != st || (st == stateData && foff2 != foff+(end-g)*gsz) {
			break
		}
	}
	inGrain := off - g*gsz
	if st == stateData {
		foff += inGrain
	}
	return st, foff, end*gsz - off, nil
}

// entry decodes grain g's table entry: its state and, for data, the file
// offset of the grain.
func (e *sparseExtent) entry(ent uint64, g int64) (grainState, int64, error) {
	if e.format == VMFSSparse {
		if ent == 0 {
			return stateUnallocated, 0, nil
		}
		return stateData, int64(ent) * SectorSize, nil
	}
	switch ent & seTypeMask {
	case 0:
		if ent != 0 {
			return 0, 0, fmt.Errorf("grain table entry %#x for grain %d is invalid", ent, g)
		}
		return stateUnallocated, 0, nil
	case seTypeUnmapped, seTypeZero:
		return stateZero, 0, nil
	case seTypeAllocated:
		return stateData, (e.seGrains + seDecodeGrain(ent)*seGrainSectors) * SectorSize, nil
	}
	return 0, 0, fmt.Errorf("grain table entry %#x for grain %d has an unknown type", ent, g)
}

// stats counts the grains the tables record.
func (e *sparseExtent) stats() (ExtentStats, error) {
	st := ExtentStats{Format: e.format, GrainSize: e.grainSectors * SectorSize, CapacitySectors: e.capacity, FileSize: e.size}
	for t, off := range e.gd {
		if off == 0 {
			continue
		}
		st.GrainTables++
		gt, err := e.table(int64(t))
		if err != nil {
			return st, err
		}
		for _, ent := range gt {
			switch {
			case ent == 0:
			case e.format == VMFSSparse, ent&seTypeMask == seTypeAllocated:
				st.DataGrains++
			case ent&seTypeMask == seTypeZero, ent&seTypeMask == seTypeUnmapped:
				st.ZeroGrains++
			default:
				return st, fmt.Errorf("grain table %d holds an invalid entry %#x", t, ent)
			}
		}
	}
	return st, nil
}

// ReadExtentStats reads a delta extent file's headers and grain tables.
func ReadExtentStats(path string, format Format) (ExtentStats, error) {
	e, err := openSparse(path, format)
	if err != nil {
		return ExtentStats{}, fmt.Errorf("vmdk: %w", err)
	}
	defer e.f.Close()
	st, err := e.stats()
	if err != nil {
		return st, fmt.Errorf("vmdk: %s: %w", path, err)
	}
	return st, nil
}

// readFull reads len(p) bytes at off, zero-filling past the end of f (a
// thin base shorter than its capacity reads as zeros).
func readFull(f io.ReaderAt, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if err == io.EOF {
		clear(p[n:])
		return nil
	}
	return err
}
