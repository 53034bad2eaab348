package esxi

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func mustDescriptor(t *testing.T, text string) Descriptor {
	t.Helper()
	d, probs := ParseDescriptor(text)
	if len(probs) > 0 {
		t.Fatalf("parse: %v", probs)
	}
	return d
}

func chainProblems(ps []Problem) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, "\n")
}

func TestBuildDiskChainRealSamples(t *testing.T) {
	const dir = "/vmfs/volumes/datastore1/Base_R91"
	top, base := dir+"/Base_R91-000001.vmdk", dir+"/Base_R91.vmdk"
	descs := map[string]Descriptor{top: mustDescriptor(t, loadSample(t, "vmdk_sesparse_child_intel_mfd_esxi.vmdk"))}

	if got := PendingChainDescriptors([]string{top}, map[string]Descriptor{}); !reflect.DeepEqual(got, []string{top}) {
		t.Fatalf("pending before any read: %v", got)
	}
	if got := PendingChainDescriptors([]string{top}, descs); !reflect.DeepEqual(got, []string{base}) {
		t.Fatalf("pending after the top: %v", got)
	}
	incomplete := BuildDiskChain(top, descs, nil)
	if incomplete.Complete || !strings.Contains(chainProblems(incomplete.Problems), "parent of "+top+": descriptor was not read") {
		t.Fatalf("chain without its base: %+v", incomplete)
	}

	descs[base] = mustDescriptor(t, loadSample(t, "vmdk_vmfs_thin_parent_intel_mfd_esxi.vmdk"))
	if got := PendingChainDescriptors([]string{top}, descs); len(got) != 0 {
		t.Fatalf("pending after the base: %v", got)
	}
	sizes := map[string]FileSize{
		dir + "/Base_R91-000001-sesparse.vmdk": {Bytes: 3 << 20, AllocatedBytes: 2 << 20},
		dir + "/Base_R91-flat.vmdk":            {Bytes: 20 << 30, AllocatedBytes: 5 << 30},
	}
	ch := BuildDiskChain(top, descs, sizes)
	if !ch.Complete || len(ch.Problems) > 0 {
		t.Fatalf("problems: %s", chainProblems(ch.Problems))
	}
	if ch.CapacityBytes != 41943040*512 || !ch.BaseThin || ch.CopyBytes != 3<<20+20<<30 || len(ch.Links) != 2 {
		t.Fatalf("chain %+v", ch)
	}
	want := []ChainLink{
		{DescriptorPath: top, CreateType: "seSparse", CID: "3729b687", ParentCID: "3729b687", ExtentPaths: []string{dir + "/Base_R91-000001-sesparse.vmdk"},
			CapacityBytes: 41943040 * 512, ExtentBytes: 3 << 20, AllocatedBytes: 2 << 20, ParentDescriptorPath: base},
		{DescriptorPath: base, CreateType: "vmfs", CID: "3729b687", ParentCID: "ffffffff", ExtentPaths: []string{dir + "/Base_R91-flat.vmdk"},
			CapacityBytes: 41943040 * 512, Thin: true, ExtentBytes: 20 << 30, AllocatedBytes: 5 << 30},
	}
	if !reflect.DeepEqual(ch.Links, want) {
		t.Fatalf("links\n got %+v\nwant %+v", ch.Links, want)
	}
	// Without sizes, what is not known says so.
	ch = BuildDiskChain(top, descs, nil)
	if ch.CopyBytes != -1 || ch.Links[0].AllocatedBytes != -1 || ch.Links[1].ExtentBytes != -1 || !ch.Complete {
		t.Fatalf("no sizes: %+v", ch)
	}
}

func TestBuildDiskChainThickBaseAbsoluteParent(t *testing.T) {
	top := "/vmfs/volumes/ds1/sql/sql-000001.vmdk"
	base := "/vmfs/volumes/ds2/golden/sql.vmdk"
	child := strings.Replace(loadSample(t, "vmdk_vmfssparse_delta_virtuallyhyper_sql_000005.vmdk"), `"sql-000004.vmdk"`, `"`+base+`"`, 1)
	child = strings.Replace(child, "parentCID=fffffffe", "parentCID=5352cace", 1)
	child = strings.Replace(child, "RW 16777216", "RW 268435456", 1)
	descs := map[string]Descriptor{top: mustDescriptor(t, child), base: mustDescriptor(t, loadSample(t, "vmdk_vmfs_thick_virtuallyhyper_sql.vmdk"))}
	ch := BuildDiskChain(top, descs, nil)
	if !ch.Complete || ch.BaseThin || ch.Links[0].ParentDescriptorPath != base || ch.Links[1].AllocatedBytes != 268435456*512 {
		t.Fatalf("chain %+v: %s", ch, chainProblems(ch.Problems))
	}
	if ch.Links[0].ExtentPaths[0] != "/vmfs/volumes/ds1/sql/sql-000005-delta.vmdk" || ch.Links[1].ExtentPaths[0] != "/vmfs/volumes/ds2/golden/sql-flat.vmdk" {
		t.Fatalf("extents %v %v", ch.Links[0].ExtentPaths, ch.Links[1].ExtentPaths)
	}
}

func TestBuildDiskChainProblems(t *testing.T) {
	const dir = "/vmfs/volumes/ds1/vm/"
	base := mustDescriptor(t, loadSample(t, "vmdk_vmfs_thin_parent_intel_mfd_esxi.vmdk"))
	delta := mustDescriptor(t, loadSample(t, "vmdk_sesparse_child_intel_mfd_esxi.vmdk"))
	for name, c := range map[string]struct {
		descs map[string]Descriptor
		want  string
	}{
		"CID mismatch": {map[string]Descriptor{dir + "top.vmdk": delta, dir + "Base_R91.vmdk": func() Descriptor { d := base; d.CID = "0badc0de"; return d }()},
			"parentCID=3729b687 but its parent " + dir + "Base_R91.vmdk has CID=0badc0de"},
		"unreadable parent": {map[string]Descriptor{dir + "top.vmdk": delta, dir + "Base_R91.vmdk": {}},
			"descriptor could not be read or parsed"},
		"delta without a hint": {map[string]Descriptor{dir + "top.vmdk": func() Descriptor { d := delta; d.ParentFileNameHint = ""; return d }()},
			"seSparse delta without parentFileNameHint"},
		"hint leaving the datastore": {map[string]Descriptor{dir + "top.vmdk": func() Descriptor { d := delta; d.ParentFileNameHint = "../../../etc/x.vmdk"; return d }()},
			"parentFileNameHint"},
		"base naming a parent CID": {map[string]Descriptor{dir + "top.vmdk": func() Descriptor { d := base; d.ParentCID = "12345678"; return d }()},
			"base disk with parentCID=12345678"},
		"loop": {map[string]Descriptor{dir + "top.vmdk": func() Descriptor { d := delta; d.ParentFileNameHint = "top.vmdk"; d.CID = d.ParentCID; return d }()},
			"loops"},
		"capacity differs": {map[string]Descriptor{dir + "top.vmdk": delta, dir + "Base_R91.vmdk": func() Descriptor {
			d := base
			d.Extents = []Extent{{Access: "RW", Sectors: 8, Type: "VMFS", FileName: "Base_R91-flat.vmdk"}}
			return d
		}()}, "differs from its parent"},
	} {
		t.Run(name, func(t *testing.T) {
			ch := BuildDiskChain(dir+"top.vmdk", c.descs, nil)
			if ch.Complete || !strings.Contains(chainProblems(ch.Problems), c.want) {
				t.Fatalf("complete=%v, problems:\n%s\nwant %q", ch.Complete, chainProblems(ch.Problems), c.want)
			}
			if ch.CapacityBytes < 0 {
				t.Fatalf("negative capacity %d", ch.CapacityBytes)
			}
		})
	}
}

// A descriptor with 65 extents of the largest size ParseDescriptor accepts
// would overflow a plain sum; the chain model refuses it.
func TestBuildDiskChainHugeExtentsDoNotOverflow(t *testing.T) {
	var b strings.Builder
	b.WriteString("version=1\nCID=11111111\nparentCID=ffffffff\ncreateType=\"vmfs\"\n")
	for range 65 {
		fmt.Fprintf(&b, "RW %d VMFS \"x-flat.vmdk\"\n", int64(math.MaxInt64/SectorSize/64))
	}
	d, probs := ParseDescriptor(b.String())
	if len(probs) > 0 || len(d.Extents) != 65 {
		t.Fatalf("parse: %d extents, %v", len(d.Extents), probs)
	}
	if d.CapacityBytes() != 0 {
		t.Fatalf("Descriptor.CapacityBytes = %d, want 0 for an overflowing sum", d.CapacityBytes())
	}
	const p = "/vmfs/volumes/ds1/vm/x.vmdk"
	sizes := map[string]FileSize{"/vmfs/volumes/ds1/vm/x-flat.vmdk": {Bytes: math.MaxInt64 / 2, AllocatedBytes: math.MaxInt64 / 2}}
	ch := BuildDiskChain(p, map[string]Descriptor{p: d}, sizes)
	if ch.CapacityBytes != 0 || ch.Complete || !strings.Contains(chainProblems(ch.Problems), "overflows") {
		t.Fatalf("capacity %d complete %v problems %s", ch.CapacityBytes, ch.Complete, chainProblems(ch.Problems))
	}
	if ch.CopyBytes < 0 || ch.Links[0].AllocatedBytes < 0 || ch.Links[0].ExtentBytes < 0 {
		t.Fatalf("sizes went negative: %+v", ch)
	}
	if c, probs := DescriptorCapacity(Descriptor{Extents: []Extent{{Sectors: -1}}}); c != 0 || len(probs) == 0 {
		t.Fatalf("negative sectors: %d %v", c, probs)
	}
	if c, probs := DescriptorCapacity(Descriptor{Extents: []Extent{{Sectors: math.MaxInt64/SectorSize + 1}}}); c != 0 || len(probs) == 0 {
		t.Fatalf("sectors past MaxInt64 bytes: %d %v", c, probs)
	}
}

func TestPendingChainDescriptorsBatchesDisks(t *testing.T) {
	delta := mustDescriptor(t, loadSample(t, "vmdk_sesparse_child_intel_mfd_esxi.vmdk"))
	a, b := "/vmfs/volumes/ds1/a/a-000001.vmdk", "/vmfs/volumes/ds1/b/b-000001.vmdk"
	descs := map[string]Descriptor{a: delta}
	got := PendingChainDescriptors([]string{b, a, a}, descs)
	if want := []string{"/vmfs/volumes/ds1/a/Base_R91.vmdk", b}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	loop := delta
	loop.ParentFileNameHint = "a-000001.vmdk"
	if got := PendingChainDescriptors([]string{a}, map[string]Descriptor{a: loop}); len(got) != 0 {
		t.Fatalf("a loop asks for %v", got)
	}
}
