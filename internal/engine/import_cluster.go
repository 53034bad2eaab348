package engine

import (
	"context"
	"fmt"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// stepImportCluster is Importing in cluster execution: the copy Jobs
// filled each DataVolume's claim in Preparing, so what is left is to see
// that every DataVolume is still the one they filled.
//
//	observe  each disk's DataVolume: ours, Succeeded, and the UID the
//	         copy was written under
//	act      nothing; a DataVolume that is gone or was replaced sends the
//	         migration back to Preparing to copy that disk again
//	record   each disk Imported, the DataVolumes' phase
func (r *run) stepImportCluster(ctx context.Context) error {
	rec := r.rec()
	kc := r.e.deps.Kube
	for i := range rec.Disks {
		d := &rec.Disks[i]
		dv, err := kc.GetDataVolume(ctx, r.spec.Namespace, d.DataVolume)
		switch {
		case kube.IsNotFound(err):
			r.claimReplaced(ctx, i)
			d.DataVolumeUID = ""
			return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("DataVolume %s of disk %d, which its copy Job filled, is gone", d.DataVolume, i)}
		case err != nil:
			return err
		case !kube.OfMigration(dv.Labels, r.spec.Name):
			return dataVolumeNotOurs(r.spec.Namespace, d.DataVolume, dv.Labels[kube.LabelMigration])
		case string(dv.UID) != d.DataVolumeUID:
			r.claimReplaced(ctx, i)
			d.DataVolumeUID = string(dv.UID)
			return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("DataVolume %s of disk %d was replaced since its copy Job filled it", d.DataVolume, i)}
		case dv.Status.Phase != cdiv1beta1.Succeeded:
			return transient("DataVolumeNotReady", fmt.Sprintf("disk %d: %s", i, dvSnapshot(dv)), nil)
		}
		d.DataVolumePhase, d.Progress, d.Imported = string(dv.Status.Phase), string(dv.Status.Progress), true
	}
	now := r.now()
	stamp(&rec.Timestamps.Imported, now)
	rec.SetCondition(now, record.CondDiskImported, true, "Succeeded",
		fmt.Sprintf("%d DataVolume(s) Succeeded, each filled by its copy Job", len(rec.Disks)))
	return r.save(ctx)
}
