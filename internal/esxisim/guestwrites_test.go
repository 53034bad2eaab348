package esxisim

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// GuestWrites applies a batch in order, as that many GuestWrite calls
// would: overlapping writes (the later wins), several in one grain,
// unaligned ones over base data and the disk's last partial grain, on a
// delta of either format and on a flat base. qemu-img reads the model.
func TestGuestWritesBatchInOrder(t *testing.T) {
	for _, format := range []vmdk.Format{"flat", vmdk.VMFSSparse, vmdk.SESparse} {
		t.Run(string(format), func(t *testing.T) {
			s := newServer(t, nil)
			if format == vmdk.SESparse {
				s.SetSnapshotFormat(vmdk.SESparse)
			}
			const capacity = 3<<20 + 1536
			id, files, err := s.AddVM(VMSpec{Name: "batch", Disks: []DiskSpec{{CapacityBytes: capacity, Thin: true}}, Power: PoweredOn})
			if err != nil {
				t.Fatal(err)
			}
			model, err := os.ReadFile(files.Disks[0].LocalFlat)
			if err != nil {
				t.Fatal(err)
			}
			model = append(model, make([]byte, capacity-int64(len(model)))...)
			top := "batch.vmdk"
			if format != "flat" {
				mustRun(t, dial(t, s), "vim-cmd vmsvc/snapshot.create "+strconv.Itoa(id)+" mig '' 0 0")
				top = "batch-000001.vmdk"
			}
			var batch []vmdk.Write
			add := func(off int64, n int, seed uint64) {
				b := make([]byte, n)
				PatternBytes(b, seed, off)
				batch = append(batch, vmdk.Write{Offset: off, Data: b})
				copy(model[off:], b)
			}
			add(4096+100, 5000, 1)
			add(4096+200, 300, 2) // inside the previous write: wins
			add(4096+5000, 10, 3) // the same grain as the first's tail
			add(capacity-700, 700, 4)
			add(1<<20, 64<<10, 5)
			add(1<<20+64<<10-1, 2, 6) // spans two grains
			if err := s.GuestWrites(id, "scsi0:0", batch); err != nil {
				t.Fatal(err)
			}
			if got, want := sum(qemuView(t, filepath.Join(files.LocalDir, top))), sum(model); got != want {
				t.Fatalf("qemu-img reads %s from %s after the batch, the model says %s", got, top, want)
			}
			if err := s.GuestWrites(id, "scsi0:0", []vmdk.Write{{Offset: capacity - 1, Data: []byte{1, 2}}}); err == nil {
				t.Fatal("a write past the disk's end was accepted")
			}
		})
	}
}

// A guest writes only while its VM is on: after vim-cmd's power-off a
// write fails and the disk's files are left as the power-off found them,
// so a copy of a powered-off VM reads files that no longer change.
func TestGuestWritesOnlyWhilePoweredOn(t *testing.T) {
	s := newServer(t, nil)
	id, files, err := s.AddVM(VMSpec{Name: "off", Disks: []DiskSpec{{CapacityBytes: 2 << 20, Thin: true}}, Power: PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	mustRun(t, c, "vim-cmd vmsvc/snapshot.create "+strconv.Itoa(id)+" mig '' 0 0")
	if err := s.GuestWrite(id, "scsi0:0", 4096, []byte("while on")); err != nil {
		t.Fatalf("a running guest's write: %v", err)
	}
	mustRun(t, c, "vim-cmd vmsvc/power.off "+strconv.Itoa(id))
	delta := filepath.Join(files.LocalDir, "off-000001-delta.vmdk")
	before, err := os.ReadFile(delta)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.GuestWrite(id, "scsi0:0", 8192, []byte("after off")); err == nil {
		t.Fatal("a powered-off VM's guest wrote")
	}
	after, err := os.ReadFile(delta)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatal("the delta changed after the power-off")
	}
}
