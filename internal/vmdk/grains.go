package vmdk

import "fmt"

// ReadWrites returns what a vmfsSparse or seSparse extent file holds as one
// Write per grain, in disk order: Data for allocated grains (the last one
// cut at the disk's end), ZeroLength for grains marked zero (seSparse).
// Unallocated grains are absent. Written back with WriteExtent, the writes
// give an extent that reads the same; a host consolidating snapshots
// merges deltas this way.
func ReadWrites(path string, format Format) ([]Write, error) {
	e, err := openSparse(path, format)
	if err != nil {
		return nil, fmt.Errorf("vmdk: %w", err)
	}
	defer e.f.Close()
	capacity := e.capacity * SectorSize
	gsz := e.grainSectors * SectorSize
	var out []Write
	for off := int64(0); off < capacity; {
		st, at, run, err := e.lookup(off)
		if err != nil {
			return nil, fmt.Errorf("vmdk: %s: %w", path, err)
		}
		if run <= 0 {
			return nil, fmt.Errorf("vmdk: %s: no progress at offset %d", path, off)
		}
		// A run of several grains becomes one Write per grain.
		end := min(off+run, capacity)
		for g := off; g < end; g += gsz {
			n := min(gsz, capacity-g)
			switch st {
			case stateData:
				b := make([]byte, n)
				if err := readFull(e.f, b, at+(g-off)); err != nil {
					return nil, fmt.Errorf("vmdk: %s: reading the grain at %d: %w", path, g, err)
				}
				out = append(out, Write{Offset: g, Data: b})
			case stateZero:
				out = append(out, Write{Offset: g, ZeroLength: n})
			}
		}
		off += run
	}
	return out, nil
}
