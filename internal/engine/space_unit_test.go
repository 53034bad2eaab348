package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

const mib = int64(1) << 20

// spaceSpec is a cold migration of raw images through CDI's upload proxy
// into a fresh work_dir.
func spaceSpec(t *testing.T) Spec {
	return Spec{Namespace: "ns", Name: "web", WorkDir: t.TempDir(), TargetFormat: "raw", Mode: ModeCold, PrecopyRounds: 1,
		Conversion: ConversionNone, Transport: Transport{Kind: TransportCDIUpload, UploadProxyURL: "https://proxy"}}
}

// chainVM is a VM whose one disk of 8 MiB runs on one snapshot: a 1 MiB
// delta on a base whose extent is 8 MiB, of which 3 MiB are allocated.
func chainVM() *esxi.VM {
	return &esxi.VM{Name: "web", PowerState: esxi.PoweredOff, Disks: []esxi.Disk{{CapacityBytes: 8 * mib, DataPath: "/vmfs/volumes/ds/web/web-000001-sesparse.vmdk",
		Chain: &esxi.DiskChain{Links: []esxi.ChainLink{
			{DescriptorPath: "/vmfs/volumes/ds/web/web-000001.vmdk", CreateType: "seSparse", ExtentPaths: []string{"/vmfs/volumes/ds/web/web-000001-sesparse.vmdk"}, ExtentBytes: 1 * mib, AllocatedBytes: 1 * mib},
			{DescriptorPath: "/vmfs/volumes/ds/web/web.vmdk", CreateType: "vmfs", ExtentPaths: []string{"/vmfs/volumes/ds/web/web-flat.vmdk"}, ExtentBytes: 8 * mib, AllocatedBytes: 2 * mib},
		}}}}}
}

func diskOf(vm *esxi.VM) []record.DiskEvidence {
	d := vm.Disks[0]
	return []record.DiskEvidence{{Index: 0, SourcePath: d.DataPath, SizeBytes: d.CapacityBytes, Chain: chainPlan(d.Chain)}}
}

func TestWorkDirNeeds(t *testing.T) {
	t.Run("plain disk", func(t *testing.T) {
		s := spaceSpec(t)
		vm := chainVM()
		vm.Disks[0].Chain = nil
		n := s.workDirNeeds(diskOf(vm), vm)
		// The staged copy; the upload qcow2 at most the capacity (the host
		// tells no allocation of a disk on no snapshot).
		if n.Required != 8*mib || n.Optional != 8*mib || n.Folder != s.stagingDir() {
			t.Errorf("need %+v, want 8 MiB required and 8 MiB optional in %s", n, s.stagingDir())
		}
	})
	t.Run("chain", func(t *testing.T) {
		s := spaceSpec(t)
		vm := chainVM()
		disks := diskOf(vm)
		n := s.workDirNeeds(disks, vm)
		// staged 8 (the chain is flattened into it) + chain 1+8; the
		// upload copy at most the chain's 3 MiB allocated.
		if n.Required != 17*mib || n.Optional != 3*mib {
			t.Errorf("need %+v, want 17 MiB required, 3 MiB optional", n)
		}
		for _, w := range []string{fmt.Sprint(9 * mib), "snapshot chain copies", fmt.Sprint(8 * mib), "staged raw copies"} {
			if !strings.Contains(n.Detail, w) {
				t.Errorf("detail %q lacks %q", n.Detail, w)
			}
		}
		// What the local copy of the base holds already is not needed again.
		if err := os.MkdirAll(s.stagingDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		base := disks[0].Chain[3]
		if base.Kind != record.ChainFileExtent || base.Link != 1 {
			t.Fatalf("chain file %+v is not the base's extent", base)
		}
		if err := os.WriteFile(s.chainLocalPath(0, base), make([]byte, 2*mib), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := s.workDirNeeds(disks, vm).Required; got != 15*mib {
			t.Errorf("with 2 MiB of the base copied: %d, want %d", got, 15*mib)
		}
		// Without the source, the recorded copies' lengths; the capacity
		// for a link not copied yet.
		disks[0].Chain[1].Bytes = mib / 2
		if got := s.workDirNeeds(disks, nil).Required; got != 8*mib+(mib/2)+(8*mib-2*mib) {
			t.Errorf("from the record: %d", got)
		}
		// Once flattened (its guest SHA-256 recorded) only the staged copy.
		disks[0].GuestSHA256 = "x"
		if got := s.workDirNeeds(disks, vm).Required; got != 8*mib {
			t.Errorf("flattened: %d, want %d", got, 8*mib)
		}
	})
	t.Run("http and qcow2 have no upload copy", func(t *testing.T) {
		s := spaceSpec(t)
		s.TargetFormat = "qcow2"
		vm := chainVM()
		if n := s.workDirNeeds(diskOf(vm), vm); n.Optional != 0 || n.Required != 25*mib {
			t.Errorf("qcow2: %+v, want 25 MiB (with the qcow2 image) and nothing optional", n)
		}
		s = spaceSpec(t)
		s.Transport = Transport{Kind: TransportHTTP, StagingDir: t.TempDir(), StagingURL: "http://x"}
		if n := s.workDirNeeds(diskOf(vm), vm); n.Optional != 0 || n.Required != 17*mib {
			t.Errorf("http: %+v", n)
		}
	})
	t.Run("warm", func(t *testing.T) {
		s := spaceSpec(t)
		s.Mode, s.PrecopyRounds = ModeWarm, 2
		vm := chainVM()
		vm.PowerState = esxi.PoweredOn
		vm.Disks[0].Chain = nil
		// staged 8 (flattened into) + base 8 + 2 deltas of 10% of 8 MiB.
		per := 8 * mib / 100 * WarmDeltaGrowthPercent
		if got := s.workDirNeeds(diskOf(vm), vm).Required; got != 16*mib+2*per {
			t.Errorf("warm: %d, want %d", got, 16*mib+2*per)
		}
		vm.PowerState = esxi.PoweredOff
		if got := s.workDirNeeds(diskOf(vm), vm).Required; got != 8*mib {
			t.Errorf("warm of a source that is off: %d, want %d", got, 8*mib)
		}
	})
}

// The check through Preview-style judging: a chain whose copies do not
// fit blocks, naming the bytes and the folder, where the staged copy alone
// would have fitted.
func TestSpaceCheckCountsTheChain(t *testing.T) {
	s := spaceSpec(t)
	fs, err := preflight.StatFree(s.WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	// A disk a little larger than half the free space: its staged copy
	// fits, staged + chain do not.
	size := (fs.Avail/2 + 1<<20) &^ (1<<20 - 1)
	vm := chainVM()
	vm.Disks[0].CapacityBytes = size
	vm.Disks[0].Chain.Links[1].ExtentBytes = size
	c := s.spaceCheck(diskOf(vm), vm)
	if c.Passed || !strings.Contains(c.Message, s.stagingDir()) || !strings.Contains(c.Message, fmt.Sprint(size)) {
		t.Errorf("check %+v, want a blocker naming %s and %d", c, s.stagingDir(), size)
	}
	vm.Disks[0].Chain = nil
	if c := s.spaceCheck(diskOf(vm), vm); !c.Passed || !strings.Contains(c.Message, filepath.Join(s.stagingDir(), "disk-N.upload.qcow2")) {
		t.Errorf("without the chain: %+v", c)
	}
}
