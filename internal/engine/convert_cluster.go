package engine

import (
	"context"
	"fmt"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// stepConvertCluster is Converting in cluster execution. The copy Jobs
// wrote each disk into its claim as the raw image the VM boots from, so
// without a guest conversion the image of every disk is the copy itself:
// recorded as such, nothing moves.
//
//	observe  the record's copies (Preparing verified them)
//	act      nothing without conversion
//	record   each disk's image: raw, the copy's SHA-256 and size
func (r *run) stepConvertCluster(ctx context.Context) error {
	rec := r.rec()
	for i := range rec.Disks {
		d := &rec.Disks[i]
		if !d.Acquired || d.SourceSHA256 == "" {
			return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("disk %d has no verified copy in its claim", i)}
		}
		d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = "raw", d.SourceSHA256, d.SizeBytes
	}
	now := r.now()
	stamp(&rec.Timestamps.Converted, now)
	rec.SetCondition(now, record.CondDiskConverted, true, "Copied",
		fmt.Sprintf("%d raw image(s) in their claims, as copied (conversion %q)", len(rec.Disks), r.spec.Conversion))
	return r.save(ctx)
}
