package vmdk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x) | 1 // never a zero byte: zeroed data is visible
	}
	return b
}

func shaHex(b []byte) string { return diskdigest.Bytes(b) }

const mib = 1 << 20

// testChain writes base <- mid <- top in dir and returns the top
// descriptor and the expected content.
func testChain(t *testing.T, dir string, capacity int64, mid, top Format) (string, []byte) {
	t.Helper()
	sectors := capacity / SectorSize
	last := (capacity - 1) / 4096 * 4096
	baseW := []Write{
		{Offset: 0, Data: pattern(mib, 1)},
		{Offset: 17 * mib, Data: pattern(2*mib, 2)},
		{Offset: last, Data: pattern(int(capacity-last), 3)},
	}
	midW := []Write{
		{Offset: 64 * 1024, Data: pattern(8192, 4)},          // data over base data
		{Offset: 5 * mib, Data: pattern(3*4096, 5)},          // data over zeros
		{Offset: 16*mib - 4096, Data: pattern(2*4096, 6)},    // across a grain table boundary
		{Offset: last, Data: pattern(int(capacity-last), 7)}, // the last, partial grain
	}
	topW := []Write{
		{Offset: 64*1024 + 4096, Data: pattern(4096, 8)}, // over the mid delta's data
		{Offset: 30 * mib, Data: pattern(4096, 9)},
	}
	if mid == SESparse {
		midW = append(midW, Write{Offset: 17*mib + 8192, ZeroLength: 4 * 4096}) // zeros over base data
	}
	if top == SESparse {
		topW = append(topW, Write{Offset: 5 * mib, ZeroLength: 4096}, // zeros over the mid delta's data
			Write{Offset: 12288, ZeroLength: 4096}) // zeros over base data
	}
	model := make([]byte, capacity)
	Apply(model, baseW)
	Apply(model, midW)
	Apply(model, topW)
	if _, err := WriteLink(LinkSpec{Dir: dir, Name: "disk", Format: Flat, CapacitySectors: sectors, Writes: baseW,
		CID: 0x11111111, ParentCID: NoParentCID, Thin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLink(LinkSpec{Dir: dir, Name: "disk-000001", Format: mid, CapacitySectors: sectors, Writes: midW,
		CID: 0x22222222, ParentCID: 0x11111111, ParentFileNameHint: "disk.vmdk"}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLink(LinkSpec{Dir: dir, Name: "disk-000002", Format: top, CapacitySectors: sectors, Writes: topW,
		CID: 0x33333333, ParentCID: 0x22222222, ParentFileNameHint: filepath.Join(dir, "disk-000001.vmdk")}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "disk-000002.vmdk"), model
}

func qemuImg(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img is required (apt-get install qemu-utils): %v", err)
	}
	return p
}

func TestChainReaderMatchesModelAndQemu(t *testing.T) {
	bin := qemuImg(t)
	const capacity = 40*mib + 1536 // the last seSparse grain is partial
	for _, order := range [][2]Format{{SESparse, VMFSSparse}, {VMFSSparse, SESparse}, {SESparse, SESparse}, {VMFSSparse, VMFSSparse}} {
		t.Run(fmt.Sprintf("%s_under_%s", order[0], order[1]), func(t *testing.T) {
			dir := t.TempDir()
			top, model := testChain(t, dir, capacity, order[0], order[1])
			c, err := OpenChain(top, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if len(c.Links) != 3 || c.Links[0].Format != order[1] || c.Links[1].Format != order[0] || c.Links[2].Format != Flat {
				t.Fatalf("links: %+v", c.Links)
			}
			got, err := c.SHA256()
			if err != nil {
				t.Fatal(err)
			}
			if want := shaHex(model); got != want {
				t.Fatalf("Go reader: sha %s, model %s", got, want)
			}
			out := filepath.Join(dir, "out.raw")
			if b, err := exec.Command(bin, "convert", "-f", "vmdk", "-O", "raw", top, out).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img convert: %v: %s", err, b)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(raw)) != capacity || shaHex(raw) != got {
				t.Fatalf("qemu-img: %d bytes sha %s; Go reader: %d bytes sha %s", len(raw), shaHex(raw), capacity, got)
			}
			checkZeroRuns(t, c, model)
		})
	}
}

// checkZeroRuns walks the chain as a flattening copy does: every run
// ZeroRun reports reads as zeros in the model, runs end where data may
// begin, and the runs cover what no link holds (here all but the grains
// and flat blocks the links write: less than 4 MiB of the disk).
func checkZeroRuns(t *testing.T, c *Chain, model []byte) {
	t.Helper()
	capacity := int64(len(model))
	var covered int64
	for off := int64(0); off < capacity; {
		z, err := c.ZeroRun(off, capacity-off)
		if err != nil {
			t.Fatal(err)
		}
		if z < 0 || off+z > capacity {
			t.Fatalf("ZeroRun(%d) = %d, past the disk's %d bytes", off, z, capacity)
		}
		if z == 0 {
			off = min(off+4096, capacity)
			continue
		}
		if !bytes.Equal(model[off:off+z], make([]byte, z)) {
			t.Fatalf("ZeroRun(%d) = %d covers data", off, z)
		}
		covered += z
		off += z
	}
	if covered < capacity-4*mib {
		t.Fatalf("zero runs cover %d of %d bytes: the reader would read most holes", covered, capacity)
	}
	// A limit bounds the run; data ends it.
	if z, _ := c.ZeroRun(30*mib+64*1024, 4096); z != 4096 {
		t.Fatalf("ZeroRun with a limit of 4096 in unwritten space = %d", z)
	}
	if z, _ := c.ZeroRun(0, capacity); z != 0 {
		t.Fatalf("ZeroRun at the base's data = %d", z)
	}
}

func TestExtentStatsFromGrainTables(t *testing.T) {
	dir := t.TempDir()
	const sectors = 40 * mib / SectorSize
	w := []Write{{Offset: 0, Data: pattern(3*4096, 1)}, {Offset: 20 * mib, ZeroLength: 2 * 4096}, {Offset: 4096, Data: pattern(4096, 2)}}
	p := filepath.Join(dir, "x-sesparse.vmdk")
	st, err := WriteExtent(p, SESparse, sectors, w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadExtentStats(p, SESparse)
	if err != nil {
		t.Fatal(err)
	}
	if got.DataGrains != 3 || got.ZeroGrains != 2 || got.GrainTables != 2 || got.AllocatedBytes() != 3*4096 {
		t.Fatalf("seSparse stats %+v", got)
	}
	if got.DataGrains != st.DataGrains || got.FileSize != st.FileSize {
		t.Fatalf("written %+v, read %+v", st, got)
	}
	p = filepath.Join(dir, "x-delta.vmdk")
	if _, err := WriteExtent(p, VMFSSparse, sectors, w[:1]); err != nil {
		t.Fatal(err)
	}
	got, err = ReadExtentStats(p, VMFSSparse)
	if err != nil {
		t.Fatal(err)
	}
	if got.DataGrains != 24 || got.GrainTables != 1 || got.AllocatedBytes() != 3*4096 {
		t.Fatalf("vmfsSparse stats %+v", got)
	}
	if _, err := WriteExtent(p, VMFSSparse, sectors, w[1:2]); err == nil {
		t.Fatal("vmfsSparse accepted an explicit zero grain")
	}
	if _, err := WriteExtent(p, SESparse, sectors, []Write{{Offset: 512, Data: pattern(4096, 1)}}); err == nil {
		t.Fatal("seSparse accepted a write not aligned to its grain")
	}
}

func TestSESparseGrainEncoding(t *testing.T) {
	for _, i := range []int64{0, 1, 0xfff, 0x1000, 0x123456789} {
		e := seEncodeGrain(i)
		if e&seTypeMask != seTypeAllocated || seDecodeGrain(e) != i {
			t.Fatalf("grain %#x encodes as %#x, decodes as %#x", i, e, seDecodeGrain(e))
		}
	}
	// qemu's layout: index bits 0-11 in bits 48-59, the rest in bits 0-47.
	if got := seEncodeGrain(0x1002); got != 0x3002000000000001 {
		t.Fatalf("grain 0x1002 encodes as %#x", got)
	}
}

func TestCIDMismatchAndMissingParent(t *testing.T) {
	dir := t.TempDir()
	top, _ := testChain(t, dir, 32*mib, SESparse, VMFSSparse)

	b, _ := os.ReadFile(filepath.Join(dir, "disk-000001.vmdk"))
	os.WriteFile(filepath.Join(dir, "disk-000001.vmdk"), bytes.Replace(b, []byte("CID=22222222"), []byte("CID=2222abcd"), 1), 0o644)
	_, err := OpenChain(top, nil)
	if !errors.Is(err, ErrCIDMismatch) || !strings.Contains(err.Error(), "parentCID=22222222") || !strings.Contains(err.Error(), "CID=2222abcd") {
		t.Fatalf("CID mismatch: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "disk-000001.vmdk"), b, 0o644)
	if c, err := OpenChain(top, nil); err != nil {
		t.Fatalf("restored chain: %v", err)
	} else {
		c.Close()
	}

	os.Remove(filepath.Join(dir, "disk.vmdk"))
	_, err = OpenChain(top, nil)
	if !errors.Is(err, ErrParentMissing) || !strings.Contains(err.Error(), `"disk.vmdk"`) {
		t.Fatalf("missing parent: %v", err)
	}
}

func TestCorruptExtentsAreRejected(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x-sesparse.vmdk")
	if _, err := WriteExtent(p, SESparse, 8192, []Write{{Offset: 0, Data: pattern(4096, 1)}}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	corrupt := func(name string, f func(b []byte)) {
		b := bytes.Clone(good)
		f(b)
		os.WriteFile(p, b, 0o600)
		if _, err := ReadExtentStats(p, SESparse); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	le := binary.LittleEndian
	corrupt("magic", func(b []byte) { b[0] = 0 })
	corrupt("dirty journal", func(b []byte) { le.PutUint64(b[8*SectorSize+24:], 1) })
	corrupt("huge grain directory", func(b []byte) { le.PutUint64(b[17*8:], 1<<40) })
	corrupt("directory past the file", func(b []byte) { le.PutUint64(b[16*8:], 1<<40) })
	corrupt("bad directory entry", func(b []byte) { le.PutUint64(b[32*SectorSize:], 0x2000000000000000) })
	corrupt("bad table entry", func(b []byte) { le.PutUint64(b[40*SectorSize:], 0x5000000000000000) })
}

func TestParseDescriptorRealSamples(t *testing.T) {
	for name, want := range map[string]struct {
		format     Format
		cid, pcid  uint32
		hint       string
		extentType string
		sectors    int64
	}{
		"vmdk_sesparse_child_intel_mfd_esxi.vmdk":              {SESparse, 0x3729b687, 0x3729b687, "Base_R91.vmdk", "SESPARSE", 41943040},
		"vmdk_vmfssparse_delta_virtuallyhyper_sql_000005.vmdk": {VMFSSparse, 0xfffffffe, 0xfffffffe, "sql-000004.vmdk", "VMFSSPARSE", 16777216},
		"vmdk_vmfs_thin_parent_intel_mfd_esxi.vmdk":            {Flat, 0x3729b687, NoParentCID, "", "VMFS", 41943040},
		"vmdk_vmfs_thick_virtuallyhyper_sql.vmdk":              {Flat, 0x5352cace, NoParentCID, "", "VMFS", 268435456},
		"vmdk-descriptor-thin-sample.txt":                      {Flat, 0xfffffffe, NoParentCID, "", "VMFS", 83886080},
	} {
		b, err := os.ReadFile(filepath.Join("..", "esxi", "testdata", "samples", name))
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseDescriptor(string(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.CreateType != want.format || d.CID != want.cid || d.ParentCID != want.pcid || d.ParentFileNameHint != want.hint ||
			len(d.Extents) != 1 || d.Extents[0].Type != want.extentType || d.Extents[0].Sectors != want.sectors {
			t.Errorf("%s: got %+v", name, d)
		}
		// Rendering and parsing again keeps what a chain depends on.
		d2, err := ParseDescriptor(d.Text())
		if err != nil || d2.CID != d.CID || d2.ParentCID != d.ParentCID || d2.ParentFileNameHint != d.ParentFileNameHint || d2.Extents[0] != d.Extents[0] {
			t.Errorf("%s: round trip: %+v, %v", name, d2, err)
		}
	}
}

func TestParseDescriptorHostile(t *testing.T) {
	var b strings.Builder
	b.WriteString("version=1\nCID=1\nparentCID=ffffffff\ncreateType=\"vmfs\"\n")
	for range 65 {
		fmt.Fprintf(&b, "RW %d VMFS \"x-flat.vmdk\"\n", int64(math.MaxInt64/SectorSize/64))
	}
	if _, err := ParseDescriptor(b.String()); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("65 huge extents: %v", err)
	}
	b.Reset()
	b.WriteString("version=1\nCID=1\nparentCID=ffffffff\ncreateType=\"vmfs\"\n")
	for range 65 {
		fmt.Fprintf(&b, "RW %d VMFS \"x-flat.vmdk\"\n", int64(maxExtentSectors))
	}
	if _, err := ParseDescriptor(b.String()); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Fatalf("65 extents of 64 TiB: %v", err)
	}
	for _, s := range []string{
		"CID=1\nparentCID=ffffffff\ncreateType=\"vmfs\"\nRW 99999999999999999999 VMFS \"x\"\n",
		"CID=1\nparentCID=ffffffff\ncreateType=\"vmfs\"\nRW 0 VMFS \"x\"\n",
		"CID=xyz\nparentCID=ffffffff\ncreateType=\"vmfs\"\nRW 8 VMFS \"x\"\n",
		"CID=1\nparentCID=1ffffffff\ncreateType=\"vmfs\"\nRW 8 VMFS \"x\"\n",
		"CID=1\nparentCID=ffffffff\nRW 8 VMFS \"x\"\n",
		"COWD\x01\x00",
	} {
		if _, err := ParseDescriptor(s); err == nil {
			t.Errorf("accepted %q", s)
		}
	}
}

// BenchmarkChainSHA256 reads a 256 MiB three-level chain (thin base,
// seSparse, vmfsSparse) through the Go reader.
func BenchmarkChainSHA256(b *testing.B) {
	dir := b.TempDir()
	const capacity = 256 * mib
	sectors := int64(capacity / SectorSize)
	base := []Write{{Offset: 0, Data: pattern(64*mib, 1)}}
	var midW, topW []Write
	for off := int64(0); off < capacity; off += 4 * mib {
		midW = append(midW, Write{Offset: off, Data: pattern(mib, 2)})
		topW = append(topW, Write{Offset: off + 2*mib, Data: pattern(mib, 3)})
	}
	WriteLink(LinkSpec{Dir: dir, Name: "d", Format: Flat, CapacitySectors: sectors, Writes: base, CID: 1, ParentCID: NoParentCID})
	WriteLink(LinkSpec{Dir: dir, Name: "d-1", Format: SESparse, CapacitySectors: sectors, Writes: midW, CID: 2, ParentCID: 1, ParentFileNameHint: "d.vmdk"})
	WriteLink(LinkSpec{Dir: dir, Name: "d-2", Format: VMFSSparse, CapacitySectors: sectors, Writes: topW, CID: 3, ParentCID: 2, ParentFileNameHint: "d-1.vmdk"})
	b.SetBytes(capacity)
	for b.Loop() {
		c, err := OpenChain(filepath.Join(dir, "d-2.vmdk"), nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.SHA256(); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
