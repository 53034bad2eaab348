package convert

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

func chainPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+int(seed)*31) | 0x80
	}
	return b
}

// hostChain writes a three-level chain as a host would hold it (the base
// in another folder, named by an absolute parentFileNameHint), copies it
// into a staging directory under derived local names and returns the
// links to rebuild plus the expected guest content.
func hostChain(t *testing.T, mid, top vmdk.Format) (string, []ChainLink, []byte) {
	t.Helper()
	host := t.TempDir()
	baseDir := filepath.Join(host, "ds2", "base")
	vmDir := filepath.Join(host, "ds1", "vm")
	os.MkdirAll(baseDir, 0o755)
	os.MkdirAll(vmDir, 0o755)
	const capacity = 20*mib + 1536
	sectors := int64(capacity / 512)
	last := int64(capacity-1) &^ 4095
	baseW := []vmdk.Write{{Offset: 0, Data: chainPattern(mib, 1)}, {Offset: last, Data: chainPattern(int(capacity-last), 2)}}
	midW := []vmdk.Write{{Offset: 4096, Data: chainPattern(8192, 3)}, {Offset: 3 * mib, Data: chainPattern(4096, 4)}}
	topW := []vmdk.Write{{Offset: 8192, Data: chainPattern(4096, 5)}, {Offset: last, Data: chainPattern(int(capacity-last), 6)}}
	if top == vmdk.SESparse {
		topW = append(topW, vmdk.Write{Offset: 3 * mib, ZeroLength: 4096}, vmdk.Write{Offset: 65536, ZeroLength: 4096})
	}
	if mid == vmdk.SESparse {
		midW = append(midW, vmdk.Write{Offset: 131072, ZeroLength: 8192})
	}
	model := make([]byte, capacity)
	vmdk.Apply(model, baseW)
	vmdk.Apply(model, midW)
	vmdk.Apply(model, topW)
	must := func(_ vmdk.WrittenLink, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(vmdk.WriteLink(vmdk.LinkSpec{Dir: baseDir, Name: "disk", Format: vmdk.Flat, CapacitySectors: sectors, Writes: baseW,
		CID: 0xa, ParentCID: vmdk.NoParentCID, Thin: true}))
	must(vmdk.WriteLink(vmdk.LinkSpec{Dir: vmDir, Name: "disk-000001", Format: mid, CapacitySectors: sectors, Writes: midW,
		CID: 0xb, ParentCID: 0xa, ParentFileNameHint: "/vmfs/volumes/ds2/base/disk.vmdk"}))
	must(vmdk.WriteLink(vmdk.LinkSpec{Dir: vmDir, Name: "disk-000002", Format: top, CapacitySectors: sectors, Writes: topW,
		CID: 0xc, ParentCID: 0xb, ParentFileNameHint: "disk-000001.vmdk"}))

	stage := t.TempDir()
	var links []ChainLink
	for i, src := range []struct{ dir, name string }{{vmDir, "disk-000002"}, {vmDir, "disk-000001"}, {baseDir, "disk"}} {
		desc, err := os.ReadFile(filepath.Join(src.dir, src.name+".vmdk"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := vmdk.ParseDescriptor(string(desc))
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(src.dir, d.Extents[0].File))
		if err != nil {
			t.Fatal(err)
		}
		local := fmt.Sprintf("l%d-extent.bin", i)
		if err := os.WriteFile(filepath.Join(stage, local), data, 0o600); err != nil {
			t.Fatal(err)
		}
		links = append(links, ChainLink{Descriptor: string(desc), DescriptorName: fmt.Sprintf("l%d.vmdk", i), ExtentNames: []string{local}})
	}
	return stage, links, model
}

func TestFlattenChain(t *testing.T) {
	needQemuImg(t)
	for _, c := range []struct {
		mid, top vmdk.Format
		out      Format
	}{
		{vmdk.SESparse, vmdk.VMFSSparse, Raw},
		{vmdk.VMFSSparse, vmdk.SESparse, Raw},
		{vmdk.VMFSSparse, vmdk.SESparse, QCOW2},
	} {
		t.Run(fmt.Sprintf("%s_%s_%s", c.mid, c.top, c.out), func(t *testing.T) {
			stage, links, model := hostChain(t, c.mid, c.top)
			dst := filepath.Join(t.TempDir(), "disk."+string(c.out))
			a, err := (&Tool{}).FlattenChain(ctxT(t), stage, links, dst, c.out)
			if err != nil {
				t.Fatal(err)
			}
			want := diskdigest.Bytes(model)
			if a.GuestSHA256 != want {
				t.Fatalf("guest sha %s, want %s", a.GuestSHA256, want)
			}
			if a.VirtualSize != int64(len(model)) || fileSHA(t, dst) != a.SHA256 {
				t.Fatalf("artifact %+v", a.Artifact)
			}
			if c.out == Raw && a.SHA256 != want {
				t.Fatalf("raw file sha %s, want %s", a.SHA256, want)
			}
			if _, err := os.Stat(dst + SidecarSuffix); err != nil {
				t.Fatal(err)
			}
			if len(a.Chain.Links) != 3 || a.Chain.Links[0].Format != c.top || a.Chain.Links[1].Format != c.mid || a.Chain.Links[2].Format != vmdk.Flat {
				t.Fatalf("links %+v", a.Chain.Links)
			}
			for _, l := range links {
				b, _ := os.ReadFile(filepath.Join(stage, l.DescriptorName))
				if strings.Contains(string(b), "/vmfs") || strings.Contains(string(b), "disk-0000") {
					t.Fatalf("rebuilt descriptor still names host files:\n%s", b)
				}
			}
		})
	}
}

func TestPrepareChainRejects(t *testing.T) {
	stage, links, _ := hostChain(t, vmdk.SESparse, vmdk.VMFSSparse)
	clone := func() []ChainLink {
		out := make([]ChainLink, len(links))
		for i, l := range links {
			out[i] = l
			out[i].ExtentNames = append([]string(nil), l.ExtentNames...)
		}
		return out
	}
	if _, err := PrepareChain(stage, links); err != nil {
		t.Fatalf("the good chain: %v", err)
	}

	bad := clone()
	bad[1].Descriptor = strings.Replace(bad[1].Descriptor, "CID=0000000b", "CID=0000beef", 1)
	_, err := PrepareChain(stage, bad)
	if !errors.Is(err, vmdk.ErrCIDMismatch) || !strings.Contains(err.Error(), "parentCID=0000000b") || !strings.Contains(err.Error(), "CID=0000beef") {
		t.Fatalf("CID mismatch: %v", err)
	}

	_, err = PrepareChain(stage, clone()[:2])
	if !errors.Is(err, vmdk.ErrParentMissing) || !strings.Contains(err.Error(), "/vmfs/volumes/ds2/base/disk.vmdk") {
		t.Fatalf("missing parent: %v", err)
	}

	for _, name := range []string{"", ".", "..", "../l0.vmdk", "sub/l0.vmdk", "/tmp/x.vmdk", "a\"b", "l2-extent.bin"} {
		bad := clone()
		bad[0].DescriptorName = name
		if _, err := PrepareChain(stage, bad); err == nil {
			t.Errorf("descriptor name %q accepted", name)
		}
	}
	bad = clone()
	bad[0].ExtentNames = []string{"../../etc/passwd"}
	if _, err := PrepareChain(stage, bad); !errors.Is(err, ErrUnsafeName) {
		t.Fatalf("extent escaping the staging dir: %v", err)
	}
	bad = clone()
	os.Symlink(filepath.Join(stage, "l0-extent.bin"), filepath.Join(stage, "link.bin"))
	bad[0].ExtentNames = []string{"link.bin"}
	if _, err := PrepareChain(stage, bad); err == nil {
		t.Fatal("symlinked extent accepted")
	}
	bad = clone()
	bad[0].ExtentNames = append(bad[0].ExtentNames, "l1-extent.bin")
	if _, err := PrepareChain(stage, bad); err == nil {
		t.Fatal("extent count mismatch accepted")
	}
}
