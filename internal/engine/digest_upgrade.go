package engine

import (
	"context"
	"fmt"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// upgradeDigest brings a record from before the disk digest
// (record.DigestTree1MiB) to it. Such a record's checksums are plain
// SHA-256s, which no step computes any more, so none of them could be
// checked again:
//   - a record that holds no disk checksum yet just takes the digest;
//   - one with checksums, before CreatingVM, has every disk copied again
//     (its staged copies, or in cluster execution its DataVolumes,
//     discarded) from Preparing: the power-off decision stands, the
//     source is only read again;
//   - from CreatingVM on, the disks are in their DataVolumes and no later
//     step hashes them: the record keeps its checksums, which the record
//     (and the resource's disk_digest) names as plain SHA-256s.
//
// The re-copy is recorded in the error history and reported once; the
// record is saved with the new digest before the run goes on.
func (r *run) upgradeDigest(ctx context.Context) error {
	rec := r.rec()
	if rec.DiskDigest != "" {
		return nil
	}
	route := itinerary(r.spec, rec)
	at, vm := checkpointIndex(route, rec.Phase), checkpointIndex(route, record.PhaseCreatingVM)
	if at < 0 || at >= vm {
		// From CreatingVM on (or a stop state open left): the evidence
		// stays what it is.
		return nil
	}
	redo := false
	for i := range rec.Disks {
		if digestEvidence(rec.Disks[i]) {
			redo = true
		}
	}
	if redo {
		for i := range rec.Disks {
			if err := r.forgetDigests(ctx, i); err != nil {
				return err
			}
		}
		// In cluster execution discardCopy also moved the conversion Job
		// to a new attempt.
		rec.Conversion = nil
		msg := fmt.Sprintf("the record's checksums are plain SHA-256s (%s), which this version no longer computes: every disk is copied again from Preparing with the disk digest (%s); the power-off decision stands",
			record.DigestPlainSHA256, record.DigestTree1MiB)
		rec.AddError(record.ErrorEntry{Time: r.now(), Phase: rec.Phase, Class: record.ClassReentered, Attempt: rec.Attempts, Reason: "DigestUpgraded", Message: msg})
		if checkpointIndex(route, record.PhasePreparing) < at {
			rec.Phase = record.PhasePreparing
		}
		r.report(ctx, Event{Kind: EventInfo, Phase: rec.Phase, Message: msg})
	}
	rec.DiskDigest = record.DigestTree1MiB
	return r.save(ctx)
}

// digestEvidence says disk d holds a checksum of some kind.
func digestEvidence(d record.DiskEvidence) bool {
	if d.SourceSHA256 != "" || d.GuestSHA256 != "" || d.ArtifactSHA256 != "" || d.ConvertedSHA256 != "" || d.UploadSHA256 != "" || d.DestinationSHA256 != "" || d.Acquired || d.Uploaded || d.Imported {
		return true
	}
	for _, f := range d.Chain {
		if f.SHA256 != "" {
			return true
		}
	}
	return false
}

// forgetDigests discards disk i's copy, its images and its DataVolume, and
// every checksum of them, so that it is copied again.
func (r *run) forgetDigests(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	if !r.inCluster() && (d.Uploaded || d.Imported || d.DataVolumeUID != "") {
		// A DataVolume the old copy uploaded into takes no second upload.
		if err := r.deleteDataVolume(ctx, i); err != nil {
			return err
		}
	}
	if err := r.discardCopy(ctx, i); err != nil {
		return err
	}
	for k := range d.Chain {
		d.Chain[k].Bytes, d.Chain[k].SHA256 = 0, ""
	}
	d.ArtifactPath, d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes, d.ConvertedSHA256 = "", "", "", 0, ""
	d.Uploaded, d.UploadFormat, d.UploadBytes, d.UploadSHA256, d.DestinationSHA256, d.Imported = false, "", 0, "", "", false
	return nil
}
