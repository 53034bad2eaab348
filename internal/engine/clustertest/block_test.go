//go:build linux

package clustertest

import (
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// A VM migrated into Block-mode claims in cluster execution: each copy
// Job writes its disk to the claim's device (a loop device on the node,
// as the kubelet attaches a file-backed block volume) and keeps its
// journal, and a chain's state and delta copies, in the disk's journal
// claim. The disk on snapshots is flattened on the device; the other
// disk's worker is SIGKILLed mid-copy and its next attempt resumes from
// the journal claim, reading at most one chunk per stream again. The
// devices are exactly the disks (no room beside them: a guest sees the
// whole device), hold the sources, and at Completed the journal claims
// are gone with the Jobs and the Secret.
func TestBlockClaimsInCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const size = 32 * mib
	cs, err := esxisim.SnapshotChainSpec("datastore1", "cx-blk", "cx-blk", size, vmdk.SESparse, vmdk.VMFSSparse, "")
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := e.host.AddVM(esxisim.VMSpec{Name: "cx-blk", Snapshots: true,
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: size, Thin: true, Content: cs.Base, Deltas: cs.Deltas},
			{CapacityBytes: 24 * mib, Content: []esxisim.Extent{{Offset: 0, Length: 24 * mib, Seed: 41}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// One dd per chunk, logged by the host; slow enough to kill mid-copy.
	e.host.SetPython("")
	e.host.SetCommandDelay(100 * time.Millisecond)
	spec := e.spec("cx-blk", "cx-blk")
	spec.VolumeMode = string(corev1.PersistentVolumeBlock)

	ci := e.interruptCopy(1, func(_ string, pid int) error { return syscall.Kill(pid, syscall.SIGKILL) })
	rec := e.completeWatching(spec, ci.watch)
	first := ci.check()

	for i, d := range rec.Disks {
		want := files.Disks[i].SHA256()
		if d.SourceSHA256 != want {
			t.Errorf("disk %d: recorded %s, source %s", i, d.SourceSHA256, want)
		}
		img := e.sim.ReceivedPath(e.ns, d.DataVolume)
		if got, err := convert.FileSHA256(img); err != nil || got != want {
			t.Errorf("disk %d: the device of DataVolume %s holds %s (%v), source %s", i, d.DataVolume, got, err, want)
		}
		if fi, err := os.Stat(img); err != nil || fi.Size() != d.SizeBytes {
			t.Errorf("disk %d: the device is %v bytes (%v), the disk %d", i, fi.Size(), err, d.SizeBytes)
		}
	}
	e.checkClaimsHoldDisks(rec)
	if rec.Disks[0].GuestSHA256 != files.Disks[0].SHA256() || len(rec.Disks[0].Chain) == 0 {
		t.Errorf("disk 0: guest-visible %s, chain %d files; want the chain flattened", rec.Disks[0].GuestSHA256, len(rec.Disks[0].Chain))
	}
	if n := len(e.messages("keeps the copy's journal and side files beside the claim")); n != 2 {
		t.Errorf("%d journal claims made, want one per disk", n)
	}
	if got := rec.Disks[1].CopyAttempt; got != 2 {
		t.Errorf("disk 1: attempt %d, want 2 (the killed Job is never run again)", got)
	}
	before, again := e.chunksReadAgain(first, files.Disks[1].Flat, spec.CopyChunkSize)
	t.Logf("%d chunks of disk 1 read by the killed Job; read again: %v", before, again)
	if before == 0 || len(again) > 2 {
		t.Errorf("chunks %v of disk 1 read again after %d were read, want at most one per stream (2)", again, before)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	e.checkCleanedUp("cx-blk")
}
