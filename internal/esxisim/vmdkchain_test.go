package esxisim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

func qemuImgPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img is required (apt-get install qemu-utils): %v", err)
	}
	return p
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return diskdigest.Bytes(b)
}

// flattenCopies copies every link's files into a staging directory under
// derived names, as the copy step does, and flattens them with qemu-img.
func flattenCopies(t *testing.T, files *DiskChainFiles, out convert.Format) convert.ChainArtifact {
	t.Helper()
	stage := t.TempDir()
	var links []convert.ChainLink
	for i, l := range files.Links {
		desc, err := os.ReadFile(l.LocalDescriptor)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(l.LocalExtent)
		if err != nil {
			t.Fatal(err)
		}
		ext := fmt.Sprintf("disk0-l%d.extent", i)
		if err := os.WriteFile(filepath.Join(stage, ext), data, 0o600); err != nil {
			t.Fatal(err)
		}
		links = append(links, convert.ChainLink{Descriptor: string(desc), DescriptorName: fmt.Sprintf("disk0-l%d.vmdk", i), ExtentNames: []string{ext}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := (&convert.Tool{}).FlattenChain(ctx, stage, links, filepath.Join(t.TempDir(), "disk0."+string(out)), out)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWriteDiskChainMatchesQemu(t *testing.T) {
	bin := qemuImgPath(t)
	const capacity = 40<<20 + 1536 // the last 4 KiB grain is partial
	for _, c := range []struct {
		name, baseDS string
		mid, top     vmdk.Format
	}{
		{"vmfsSparse_over_seSparse", "", vmdk.SESparse, vmdk.VMFSSparse},
		{"seSparse_over_vmfsSparse", "", vmdk.VMFSSparse, vmdk.SESparse},
		{"vmfsSparse_over_seSparse_base_elsewhere", "datastore2", vmdk.SESparse, vmdk.VMFSSparse},
		{"seSparse_over_vmfsSparse_base_elsewhere", "datastore2", vmdk.VMFSSparse, vmdk.SESparse},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			spec, err := SnapshotChainSpec("datastore1", "vm1", "vm1", capacity, c.mid, c.top, c.baseDS)
			if err != nil {
				t.Fatal(err)
			}
			files, err := WriteDiskChain(root, spec)
			if err != nil {
				t.Fatal(err)
			}
			if len(files.Links) != 3 || files.Top != "/vmfs/volumes/datastore1/vm1/vm1-000002.vmdk" {
				t.Fatalf("files %+v", files)
			}
			if c.baseDS != "" {
				want := "/vmfs/volumes/datastore2/base-vm1/vm1.vmdk"
				if files.Links[1].ParentFileNameHint != want || files.Links[2].Descriptor != want {
					t.Fatalf("base elsewhere: hint %q, base %q", files.Links[1].ParentFileNameHint, files.Links[2].Descriptor)
				}
			}
			for _, l := range files.Links[:2] {
				if l.Stats == nil || l.Stats.DataGrains == 0 {
					t.Fatalf("%s: no data grains: %+v", l.Descriptor, l.Stats)
				}
				if l.Format == vmdk.SESparse && l.Stats.ZeroGrains == 0 {
					t.Fatalf("%s: no zero grains", l.Descriptor)
				}
			}

			// The Go reader, resolving host paths into the datastore root.
			local := files.Links[0].LocalDescriptor
			ch, err := vmdk.OpenChain(local, HostResolver(root))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ch.SHA256()
			ch.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got != files.SHA256 {
				t.Fatalf("Go reader %s, spec %s", got, files.SHA256)
			}
			// The content is not the base's: the deltas matter.
			if base := ExpectedSHA256(capacity, spec.Base); base == files.SHA256 {
				t.Fatal("the deltas do not change the content")
			}

			// qemu-img on the simulator's own files (relative hints only).
			if c.baseDS == "" {
				out := filepath.Join(t.TempDir(), "direct.raw")
				if b, err := exec.Command(bin, "convert", "-f", "vmdk", "-O", "raw", local, out).CombinedOutput(); err != nil {
					t.Fatalf("qemu-img convert: %v: %s", err, b)
				}
				if s := fileSHA256(t, out); s != files.SHA256 {
					t.Fatalf("qemu-img on the simulator's files %s, want %s", s, files.SHA256)
				}
			}
			// qemu-img on copies rebuilt locally, as a migration does.
			a := flattenCopies(t, files, convert.Raw)
			if a.GuestSHA256 != files.SHA256 || a.SHA256 != files.SHA256 {
				t.Fatalf("flattened copies %s (file %s), want %s", a.GuestSHA256, a.SHA256, files.SHA256)
			}
		})
	}
}

func TestWriteDiskChainDeep(t *testing.T) {
	const capacity = 24 << 20
	formats := []vmdk.Format{vmdk.SESparse, vmdk.VMFSSparse, vmdk.SESparse, vmdk.VMFSSparse, vmdk.SESparse}
	spec := DiskChainSpec{Datastore: "datastore1", Name: "deep", CapacityBytes: capacity, Thin: true, BaseDatastore: "datastore3", BaseFolder: "templates"}
	for i, f := range formats {
		b := make([]byte, 8192)
		PatternBytes(b, uint64(100+i), 0)
		w := []vmdk.Write{{Offset: int64(i) * 4096, Data: b}, {Offset: int64(i+1) << 20, Data: b[:4096]}}
		if f == vmdk.SESparse {
			w = append(w, vmdk.Write{Offset: int64(i) << 20, ZeroLength: 4096}) // hides the older delta's data
		}
		spec.Deltas = append(spec.Deltas, DeltaSpec{Format: f, Writes: w})
	}
	root := t.TempDir()
	files, err := WriteDiskChain(root, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(files.Links) != 6 {
		t.Fatalf("%d links", len(files.Links))
	}
	for _, out := range []convert.Format{convert.Raw, convert.QCOW2} {
		a := flattenCopies(t, files, out)
		if a.GuestSHA256 != files.SHA256 || len(a.Chain.Links) != 6 {
			t.Fatalf("%s: flattened %s, want %s", out, a.GuestSHA256, files.SHA256)
		}
	}
}

func TestWriteDiskChainServedAtHostPaths(t *testing.T) {
	s := newServer(t, nil)
	spec, err := SnapshotChainSpec("datastore1", "vm2", "vm2", 24<<20, vmdk.SESparse, vmdk.VMFSSparse, "datastore2")
	if err != nil {
		t.Fatal(err)
	}
	files, err := WriteDiskChain(s.opts.Root, spec)
	if err != nil {
		t.Fatal(err)
	}
	// A base and two deltas: the loop below must have links to check.
	if len(files.Links) != 3 {
		t.Fatalf("%d links, want 3", len(files.Links))
	}
	for _, l := range files.Links {
		b, err := s.readHostFile(l.Descriptor)
		if err != nil {
			t.Fatalf("%s: %v", l.Descriptor, err)
		}
		if !strings.Contains(string(b), fmt.Sprintf("CID=%08x", l.CID)) {
			t.Fatalf("%s:\n%s", l.Descriptor, b)
		}
		if _, err := s.statPath(l.Extent); err != nil {
			t.Fatalf("%s: %v", l.Extent, err)
		}
	}
}

func TestWriteDiskChainRejects(t *testing.T) {
	root := t.TempDir()
	for name, spec := range map[string]DiskChainSpec{
		"name with slash":     {Name: "a/b", CapacityBytes: 1 << 20},
		"unaligned capacity":  {Name: "a", CapacityBytes: 1000},
		"folder escaping":     {Name: "a", CapacityBytes: 1 << 20, Folder: "../x"},
		"flat delta":          {Name: "a", CapacityBytes: 1 << 20, Deltas: []DeltaSpec{{Format: vmdk.Flat}}},
		"zero in vmfsSparse":  {Name: "a", CapacityBytes: 1 << 20, Deltas: []DeltaSpec{{Format: vmdk.VMFSSparse, Writes: []vmdk.Write{{Offset: 0, ZeroLength: 4096}}}}},
		"write past the disk": {Name: "a", CapacityBytes: 1 << 20, Deltas: []DeltaSpec{{Format: vmdk.SESparse, Writes: []vmdk.Write{{Offset: 1 << 20, Data: make([]byte, 4096)}}}}},
	} {
		if _, err := WriteDiskChain(root, spec); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := HostResolver(root)("/x/y.vmdk", "/etc/passwd"); err == nil {
		t.Error("resolver accepted a path outside /vmfs/volumes")
	}
}
