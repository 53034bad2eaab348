package provider_test

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// smallChainDeltas are two deltas over a small base: a seSparse delta with
// data over the base's data and over zeros, and explicit zeros over the
// base's data; a vmfsSparse delta over it with data over the older
// delta's data, over the zeros the older delta wrote and in the disk's
// last sector.
func smallChainDeltas(capacity int64) []esxisim.DeltaSpec {
	data := func(off, n int64, seed uint64) vmdk.Write {
		b := make([]byte, n)
		esxisim.PatternBytes(b, seed, off)
		return vmdk.Write{Offset: off, Data: b}
	}
	return []esxisim.DeltaSpec{
		{Format: vmdk.SESparse, Writes: []vmdk.Write{
			data(64<<10, 8<<10, 41),
			data(2*mib, 12<<10, 42),
			{Offset: 256 << 10, ZeroLength: 16 << 10},
			data(capacity-4<<10, 4<<10, 43),
		}},
		{Format: vmdk.VMFSSparse, Writes: []vmdk.Write{
			data(68<<10, 2<<10, 51),
			data(256<<10+4<<10, 1<<10, 52),
			data(capacity-512, 512, 53),
		}},
	}
}

// qemuGuestSHA256 flattens a chain with qemu-img, independently of the
// provider's reader: the files are copied into one directory, the
// absolute parent hint made relative, and qemu-img follows the chain from
// the top. It returns the hex SHA-256 of the raw image.
func qemuGuestSHA256(t *testing.T, ch *esxisim.DiskChainFiles) string {
	t.Helper()
	qemu, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Fatalf("qemu-img is required (apt-get install qemu-utils): %v", err)
	}
	dir := t.TempDir()
	for _, l := range ch.Links {
		b, err := os.ReadFile(l.LocalDescriptor)
		if err != nil {
			t.Fatal(err)
		}
		if h := l.ParentFileNameHint; h != "" {
			b = []byte(strings.Replace(string(b), fmt.Sprintf("parentFileNameHint=%q", h), fmt.Sprintf("parentFileNameHint=%q", filepath.Base(h)), 1))
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(l.LocalDescriptor)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(l.LocalExtent, filepath.Join(dir, filepath.Base(l.LocalExtent))); err != nil {
			copyFile(t, l.LocalExtent, filepath.Join(dir, filepath.Base(l.LocalExtent)))
		}
	}
	raw := filepath.Join(dir, "guest.raw")
	top := filepath.Join(dir, filepath.Base(ch.Links[0].LocalDescriptor))
	if out, err := exec.Command(qemu, "convert", "-f", "vmdk", "-O", "raw", top, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	return fileSHA256(t, raw)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := diskdigest.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// chainFileSums hashes every file of a chain as it is on the host.
func chainFileSums(t *testing.T, ch *esxisim.DiskChainFiles) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range ch.Links {
		out[l.Descriptor] = fileSHA256(t, l.LocalDescriptor)
		out[l.Extent] = fileSHA256(t, l.LocalExtent)
	}
	return out
}

// TestAccChainMigratesCold applies, through the Terraform CLI, a cold
// migration of a running VM whose disk runs on a three-level chain
// (vmfsSparse over seSparse over a thin base on another datastore, named
// by its absolute path). It completes; the DataVolume receives what the
// guest sees, as qemu-img reads the chain; the migration's evidence holds
// one SHA-256 per chain file, each the host file's; the esxi_vm data
// source tells the grains the seSparse delta holds; the source chain is
// left byte for byte as it was, and no snapshot was taken or removed.
func TestAccChainMigratesCold(t *testing.T) {
	e := newMigrationEnv(t)
	const capacity = 4 * mib
	base := []esxisim.Extent{{Offset: 0, Length: 512 << 10, Seed: 61}, {Offset: 3 * mib, Length: mib, Seed: 62}}
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "chained", GuestOS: "rhel9-64", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: capacity, Thin: true, Content: base,
			Deltas: smallChainDeltas(capacity), BaseDatastore: "datastore2"}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:60:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.60"}})
	ch := files.Disks[0].Chain
	if ch == nil || len(ch.Links) != 3 || ch.Links[0].Format != vmdk.VMFSSparse || ch.Links[1].Format != vmdk.SESparse ||
		!strings.HasPrefix(ch.Links[1].ParentFileNameHint, "/vmfs/volumes/datastore2/") {
		t.Fatalf("chain %+v: want vmfsSparse over seSparse over a base named by an absolute path", ch)
	}
	guest := qemuGuestSHA256(t, ch)
	if guest != ch.SHA256 {
		t.Fatalf("qemu-img reads %s from the chain, its spec says %s", guest, ch.SHA256)
	}
	before := chainFileSums(t, ch)

	const addr = "vmmigration_migration.chained"
	cfg := acctest.ProviderConfig(e.providerBlock()) + e.migration("chained", "chained", `{ "VM Network" = "pod" }`, `
  power_off_policy = "graceful"`) + `
data "vmmigration_esxi_vm" "chained" {
  host = "esxi-a"
  name = "chained"
}
`
	const ds = "data.vmmigration_esxi_vm.chained"
	midGrains := ch.Links[1].Stats.DataGrains * vmdk.SESparse.GrainSize()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(addr, map[string]string{"phase": "Completed", "mode": "cold", "disks.#": "1", "disks.0.source_sha256": guest}),
				// The inventory tells the grains the seSparse delta holds
				// from its header; a thin base's use is unknown.
				attrs(ds, map[string]string{"disks.0.snapshot_chain.#": "3",
					"disks.0.snapshot_chain.1.format":          "seSparse",
					"disks.0.snapshot_chain.1.allocated_bytes": fmt.Sprint(midGrains),
					"disks.0.snapshot_chain.2.allocated_bytes": "-1"}),
				func(*terraform.State) error {
					if got, ok := e.sim.ReceivedSHA256(e.namespace, "chained-disk-0"); !ok || got != guest {
						return fmt.Errorf("the DataVolume received %q (%v), want the guest-visible content %s", got, ok, guest)
					}
					rec, ok := e.records(t)["chained"]
					if !ok || len(rec.Disks) != 1 {
						return fmt.Errorf("migration record %+v: want one disk", rec)
					}
					d := rec.Disks[0]
					if d.GuestSHA256 != guest {
						return fmt.Errorf("recorded guest content %s, want %s", d.GuestSHA256, guest)
					}
					seen := map[string]bool{}
					for _, f := range d.Chain {
						if f.SHA256 == "" || f.SHA256 != before[f.SourcePath] {
							return fmt.Errorf("%s %s: recorded SHA-256 %q, the host file's is %s", f.Kind, f.SourcePath, f.SHA256, before[f.SourcePath])
						}
						if seen[f.SourcePath] {
							return fmt.Errorf("%s recorded twice", f.SourcePath)
						}
						seen[f.SourcePath] = true
						if f.Kind == record.ChainFileDescriptor && f.CID != fmt.Sprintf("%08x", ch.Links[f.Link].CID) {
							return fmt.Errorf("descriptor %s: recorded CID %s, want %08x", f.SourcePath, f.CID, ch.Links[f.Link].CID)
						}
					}
					if len(seen) != len(before) {
						return fmt.Errorf("chain evidence for %d files %v, want one per chain file (%d)", len(seen), seen, len(before))
					}
					return nil
				},
				// The state carries the same evidence, file by file.
				func(st *terraform.State) error {
					rs := st.RootModule().Resources[addr]
					if rs == nil {
						return fmt.Errorf("%s not in state", addr)
					}
					a := rs.Primary.Attributes
					if a["disks.0.chain.#"] != fmt.Sprint(len(before)) {
						return fmt.Errorf("state has %s chain files, want %d", a["disks.0.chain.#"], len(before))
					}
					for i := 0; i < len(before); i++ {
						p := fmt.Sprintf("disks.0.chain.%d.", i)
						src := a[p+"source_path"]
						if a[p+"sha256"] == "" || a[p+"sha256"] != before[src] {
							return fmt.Errorf("state %ssha256 = %q for %s, the host file's is %q", p, a[p+"sha256"], src, before[src])
						}
					}
					return nil
				},
				func(*terraform.State) error {
					if after := chainFileSums(t, ch); fmt.Sprint(after) != fmt.Sprint(before) {
						return fmt.Errorf("the source chain changed:\nbefore %v\nafter  %v", before, after)
					}
					for _, c := range e.host.Commands() {
						if strings.Contains(c, "snapshot.create") || strings.Contains(c, "snapshot.remove") || strings.Contains(c, "vmkfstools") {
							return fmt.Errorf("the migration ran %q on the source", c)
						}
					}
					return nil
				},
			),
		}},
	})
}
