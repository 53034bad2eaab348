package convert

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// scatteredWrites returns n writes at random sector-aligned places of a
// disk of capacity bytes, some adjacent to the one before (so that grains
// run on in the file and across), and for seSparse some explicit zero
// grains.
func scatteredWrites(rng *rand.Rand, capacity int64, n int, format vmdk.Format) []vmdk.Write {
	var out []vmdk.Write
	gs := format.GrainSize()
	next := int64(-1)
	for i := 0; i < n; i++ {
		off := rng.Int64N(capacity/gs) * gs
		if next >= 0 && next < capacity && rng.IntN(3) == 0 {
			off = next // continues the previous write
		}
		length := min(gs*int64(1+rng.IntN(int(20<<10/gs))), capacity-off)
		if format == vmdk.SESparse && rng.IntN(5) == 0 {
			out = append(out, vmdk.Write{Offset: off, ZeroLength: min(gs, capacity-off)})
			next = -1
			continue
		}
		b := make([]byte, length)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		out = append(out, vmdk.Write{Offset: off, Data: b})
		next = off + length
	}
	return out
}

// The raw image FlattenChain writes with its own chain reader is exactly
// what qemu-img convert reads from the same rebuilt chain, on chains of
// either delta format over either, with hundreds of scattered, adjacent
// and zeroed grains over a base that holds data, holes and the disk's
// last partial grain.
func TestFlattenRawMatchesQemuImg(t *testing.T) {
	needQemuImg(t)
	for _, order := range [][2]vmdk.Format{{vmdk.VMFSSparse, vmdk.SESparse}, {vmdk.SESparse, vmdk.VMFSSparse}, {vmdk.VMFSSparse, vmdk.VMFSSparse}} {
		t.Run(fmt.Sprintf("%s_over_%s", order[1], order[0]), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(len(order[0])), uint64(len(order[1]))))
			const capacity = 24<<20 + 1536
			sectors := int64(capacity / 512)
			src := t.TempDir()
			baseW := []vmdk.Write{{Offset: 0, Data: chainPattern(3<<20, 1)}, {Offset: 10 << 20, Data: chainPattern(1<<20, 2)},
				{Offset: capacity - 1536, Data: chainPattern(1536, 3)}}
			if _, err := vmdk.WriteLink(vmdk.LinkSpec{Dir: src, Name: "base", Format: vmdk.Flat, CapacitySectors: sectors, Writes: baseW,
				CID: 1, ParentCID: vmdk.NoParentCID, Thin: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := vmdk.WriteLink(vmdk.LinkSpec{Dir: src, Name: "mid", Format: order[0], CapacitySectors: sectors,
				Writes: scatteredWrites(rng, capacity, 300, order[0]), CID: 2, ParentCID: 1, ParentFileNameHint: "base.vmdk"}); err != nil {
				t.Fatal(err)
			}
			if _, err := vmdk.WriteLink(vmdk.LinkSpec{Dir: src, Name: "top", Format: order[1], CapacitySectors: sectors,
				Writes: scatteredWrites(rng, capacity, 300, order[1]), CID: 3, ParentCID: 2, ParentFileNameHint: "mid.vmdk"}); err != nil {
				t.Fatal(err)
			}
			var links []ChainLink
			for _, name := range []string{"top", "mid", "base"} {
				desc, err := os.ReadFile(filepath.Join(src, name+".vmdk"))
				if err != nil {
					t.Fatal(err)
				}
				d, err := vmdk.ParseDescriptor(string(desc))
				if err != nil {
					t.Fatal(err)
				}
				links = append(links, ChainLink{Descriptor: string(desc), DescriptorName: name + ".vmdk", ExtentNames: []string{d.Extents[0].File}})
			}
			// The extents stay where they are; the descriptors are rebuilt
			// beside them.
			dst := filepath.Join(t.TempDir(), "flat.raw")
			a, err := (&Tool{}).FlattenChain(ctxT(t), src, links, dst, Raw)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			ref := filepath.Join(t.TempDir(), "qemu.raw")
			if out, err := exec.Command("qemu-img", "convert", "-f", "vmdk", "-O", "raw", a.Chain.Top, ref).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img convert: %v\n%s", err, out)
			}
			theirs, err := os.ReadFile(ref)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ours, theirs) {
				i := 0
				for i < len(ours) && i < len(theirs) && ours[i] == theirs[i] {
					i++
				}
				t.Fatalf("the flattened image differs from qemu-img's at byte %d (lengths %d and %d)", i, len(ours), len(theirs))
			}
			if fileSHA(t, dst) != a.SHA256 || a.GuestSHA256 != a.SHA256 {
				t.Fatalf("artifact %+v, guest %s", a.Artifact, a.GuestSHA256)
			}
			var blocks int64
			for i := 0; i < len(ours); i += zeroBlockSize {
				if !bytes.Equal(ours[i:min(i+zeroBlockSize, len(ours))], zeroBlock[:min(zeroBlockSize, len(ours)-i)]) {
					blocks++
				}
			}
			if data, err := DataBytes(dst); err != nil || data > blocks*zeroBlockSize || blocks*zeroBlockSize >= capacity {
				t.Fatalf("the flattened image holds %d bytes of data (%v) for %d blocks that are not all zero: zeros were not left as holes", data, err, blocks)
			}
		})
	}
}
