package engine_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// plainSHA256 is the checksum records from before the disk digest hold:
// a plain SHA-256 of the whole file.
func plainSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A record from before the disk digest, stopped in Importing with its
// checksums plain SHA-256s, is not stuck on checksums no step computes
// any more: its disks are copied again with the digest (the power-off
// stands, one power command in all) and the migration completes with the
// digest's evidence. A Completed one keeps its plain SHA-256s, named so.
func TestRecordFromBeforeTheDiskDigest(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, smallVM("dg1", esxisim.PoweredOn))
	spec := e.spec("dg1", "dg1")
	ctx, cancel := contextWithCancel(e.ctx(60e9))
	e.runInterrupted(ctx, spec, record.PhaseImporting, func(ev engine.Event) {
		if ev.Kind == engine.EventPhase && ev.Phase == record.PhaseImporting {
			cancel()
		}
	})
	plain := plainSHA256(t, files.Disks[0].LocalFlat)
	e.editRecord("dg1", func(r *record.Record) {
		if r.DiskDigest != record.DigestTree1MiB {
			t.Errorf("a new record names digest %q, want %q", r.DiskDigest, record.DigestTree1MiB)
		}
		r.DiskDigest = ""
		d := &r.Disks[0]
		d.SourceSHA256, d.ArtifactSHA256 = plain, plain
		if d.UploadSHA256 != "" {
			d.UploadSHA256 = plain
		}
	})
	rec := e.mustComplete(e.engine(), spec)
	if rec.DiskDigest != record.DigestTree1MiB || rec.DigestOf() != record.DigestTree1MiB {
		t.Errorf("upgraded record names digest %q", rec.DiskDigest)
	}
	if got, want := rec.Disks[0].SourceSHA256, files.Disks[0].SHA256(); got != want || got == plain {
		t.Errorf("source digest %s, want %s (the plain SHA-256 was %s)", got, want, plain)
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "dg1-disk-0"); got != files.Disks[0].SHA256() {
		t.Errorf("the DataVolume received %s, want %s", got, files.Disks[0].SHA256())
	}
	upgraded := 0
	for _, h := range rec.Errors {
		if h.Reason == "DigestUpgraded" {
			upgraded++
			if !strings.Contains(h.Message, "copied again") || !strings.Contains(h.Message, "power-off decision stands") {
				t.Errorf("history entry %q", h.Message)
			}
		}
	}
	if upgraded != 1 {
		t.Errorf("%d DigestUpgraded entries in the history, want 1: %+v", upgraded, rec.Errors)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power commands, want 1", n)
	}
	if len(e.dataVolumes()) != 1 || len(e.vms()) != 1 {
		t.Errorf("%d DataVolumes, %d VMs", len(e.dataVolumes()), len(e.vms()))
	}

	// Completed with plain SHA-256s: nothing is copied again, and the
	// record keeps saying what its checksums are.
	e.editRecord("dg1", func(r *record.Record) {
		r.DiskDigest = ""
		r.Disks[0].SourceSHA256, r.Disks[0].ArtifactSHA256 = plain, plain
	})
	mark := len(e.host.CommandLog())
	rec = e.mustComplete(e.engine(), spec)
	if rec.DiskDigest != "" || rec.DigestOf() != record.DigestPlainSHA256 || rec.Disks[0].SourceSHA256 != plain {
		t.Errorf("a completed record from before the digest became digest %q, source %s", rec.DiskDigest, rec.Disks[0].SourceSHA256)
	}
	if reads := e.ddReads(mark); len(reads) != 0 {
		t.Errorf("a completed record read the source again: %v", reads)
	}
}
