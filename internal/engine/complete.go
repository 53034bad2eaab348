package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// stepCompleteWarm removes the migration's snapshots before the usual
// completion.
func (r *run) stepCompleteWarm(ctx context.Context) error {
	if w := r.rec().Warm; w != nil {
		c, err := r.esxiClient()
		if err != nil {
			return err
		}
		if err := removeWarmSnapshots(ctx, c, r.rec(), func() error { return r.save(ctx) }); err != nil {
			return err
		}
	}
	return r.stepComplete(ctx)
}

// stepComplete removes this migration's staging files.
func (r *run) stepComplete(context.Context) error {
	if err := r.removeStaging(); err != nil {
		return transient("CleanupFailed", "cannot remove the staging files", err)
	}
	return nil
}

// removeStaging deletes the staged copies and artifacts of this migration
// and their folders, at the paths the spec derives (never the record's).
// Missing files are fine.
func (r *run) removeStaging() error {
	var errs []string
	for i := range r.rec().Disks {
		staged, art := r.spec.stagedPath(i), r.spec.artifactPath(i, r.rec().StagingToken)
		if err := transfer.Remove(staged); err != nil {
			errs = append(errs, err.Error())
		}
		if art != staged {
			if err := convert.Remove(art); err != nil {
				errs = append(errs, err.Error())
			}
		}
		conv := r.spec.convertedPath(i, r.rec().StagingToken)
		for _, p := range []string{conv, conv + convert.TmpSuffix} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err.Error())
			}
		}
	}
	for _, d := range r.spec.stagingFolders() {
		if _, err := removeFolder(d); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
