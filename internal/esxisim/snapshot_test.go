package esxisim

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// qemuView is what qemu-img reads from the descriptor at local path desc.
func qemuView(t *testing.T, desc string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "view.raw")
	if b, err := exec.Command(qemuImgPath(t), "convert", "-f", "vmdk", "-O", "raw", desc, out).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert %s: %v\n%s", desc, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestSnapshotCreateWriteRemove takes two snapshots of a running VM with
// guest writes before, between and after them, then removes both: after
// every step qemu-img reads from the descriptor the .vmx names exactly the
// content the model says, the .vmx, .vmsd and snapshot.get agree, and in
// the end the VM runs on its base again with no delta left.
func TestSnapshotCreateWriteRemove(t *testing.T) {
	for _, format := range []vmdk.Format{vmdk.VMFSSparse, vmdk.SESparse} {
		t.Run(string(format), func(t *testing.T) {
			s := newServer(t, nil)
			if format == vmdk.SESparse {
				s.SetSnapshotFormat(vmdk.SESparse)
			}
			const capacity = 6<<20 + 1536
			id, files, err := s.AddVM(VMSpec{Name: "web it's", Disks: []DiskSpec{{CapacityBytes: capacity, Thin: true}}, Power: PoweredOn})
			if err != nil {
				t.Fatal(err)
			}
			model, err := os.ReadFile(files.Disks[0].LocalFlat)
			if err != nil {
				t.Fatal(err)
			}
			model = append(model, make([]byte, capacity-int64(len(model)))...)
			write := func(off int64, n int, seed uint64) {
				t.Helper()
				b := make([]byte, n)
				PatternBytes(b, seed, off)
				if err := s.GuestWrite(id, "scsi0:0", off, b); err != nil {
					t.Fatal(err)
				}
				copy(model[off:], b)
			}
			c := dial(t, s)
			vmxLocal := filepath.Join(files.LocalDir, "web it's.vmx")
			check := func(wantTop string, wantSnaps int) []esxi.Snapshot {
				t.Helper()
				v := parseVMX(mustRead(t, vmxLocal))
				name := v.get("scsi0:0.fileName")
				if !strings.HasSuffix(name, wantTop) {
					t.Fatalf(".vmx runs on %q, want …%s", name, wantTop)
				}
				if got := sum(qemuView(t, filepath.Join(files.LocalDir, name))); got != sum(model) {
					t.Fatalf("qemu-img reads %s from %s, the model says %s", got, name, sum(model))
				}
				r := mustRun(t, c, "vim-cmd vmsvc/snapshot.get "+strconv.Itoa(id))
				tree, probs := esxi.ParseSnapshotGet(r.out)
				if len(probs) > 0 {
					t.Fatalf("snapshot.get: %v\n%s", probs, r.out)
				}
				all := esxi.FindSnapshots(tree, func(esxi.Snapshot) bool { return true })
				if len(all) != wantSnaps {
					t.Fatalf("snapshot.get shows %d snapshots, want %d:\n%s", len(all), wantSnaps, r.out)
				}
				return all
			}
			write(4096, 8192, 1) // on the base
			check(".vmdk", 0)
			r := mustRun(t, c, `vim-cmd vmsvc/snapshot.create `+strconv.Itoa(id)+` 'mig '\''1'\''' 'first' 0 0`)
			if r.code != 0 || r.out != "Create Snapshot:\n" {
				t.Fatalf("snapshot.create: %d %q", r.code, r.out)
			}
			check("-000001.vmdk", 1)
			write(4096+512, 1000, 2)    // unaligned, over base data
			write(capacity-700, 700, 3) // the last, partial grain
			write(2<<20, 64<<10, 4)     // over zeros
			mustRun(t, c, `vim-cmd vmsvc/snapshot.create `+strconv.Itoa(id)+` 'mig 2' '' 0 0`)
			snaps := check("-000002.vmdk", 2)
			if snaps[0].Name != "mig '1'" || snaps[0].Description != "first" || snaps[1].Name != "mig 2" || snaps[1].ID <= snaps[0].ID {
				t.Fatalf("snapshots %+v", snaps)
			}
			ext := filepath.Join(files.LocalDir, "web it's-000002"+format.ExtentSuffix())
			if st, err := vmdk.ReadExtentStats(ext, format); err != nil || st.DataGrains != 0 {
				t.Fatalf("a new delta holds %+v (%v), want no grain", st, err)
			}
			write(2<<20+4096, 4096, 5) // over the older delta's data
			write(5<<20, 3, 6)
			if st, err := vmdk.ReadExtentStats(ext, format); err != nil || st.DataGrains*st.GrainSize < 4096+3 {
				t.Fatalf("the top delta holds %+v (%v) after the writes", st, err)
			}
			r = mustRun(t, c, "vim-cmd vmsvc/snapshot.remove "+strconv.Itoa(id)+" "+strconv.Itoa(snaps[0].ID))
			if r.code != 0 || !strings.HasPrefix(r.out, "Remove Snapshot:\n") {
				t.Fatalf("snapshot.remove: %d %q", r.code, r.out)
			}
			left := check("-000002.vmdk", 1)
			if left[0].ID != snaps[1].ID {
				t.Fatalf("left %+v, want snapshot %d", left, snaps[1].ID)
			}
			if _, err := os.Stat(filepath.Join(files.LocalDir, "web it's-000001.vmdk")); !os.IsNotExist(err) {
				t.Fatalf("the consolidated delta's descriptor is still there: %v", err)
			}
			write(100<<10, 4096, 7)
			mustRun(t, c, "vim-cmd vmsvc/snapshot.remove "+strconv.Itoa(id)+" "+strconv.Itoa(snaps[1].ID))
			check("web it's.vmdk", 0)
			names, _ := filepath.Glob(filepath.Join(files.LocalDir, "*-00000*"))
			if len(names) != 0 {
				t.Fatalf("delta files left: %v", names)
			}
			flat, _ := os.ReadFile(files.Disks[0].LocalFlat)
			flat = append(flat, make([]byte, capacity-int64(len(flat)))...)
			if sum(flat) != sum(model) {
				t.Fatal("the base does not hold the guest's content after both removals")
			}
			r = run(t, c, "vim-cmd vmsvc/snapshot.remove "+strconv.Itoa(id)+" "+strconv.Itoa(snaps[1].ID))
			if r.code == 0 || !strings.Contains(r.out, "vim.fault.NotFound") {
				t.Fatalf("removing a removed snapshot: %d %q", r.code, r.out)
			}
		})
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
