package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// stepImport makes one Succeeded DataVolume per disk.
func (r *run) stepImport(ctx context.Context) error {
	rec := r.rec()
	// Every DataVolume is created first, so that CDI prepares their upload
	// pods together; every image is then sent, while CDI converts the ones
	// already sent; last, every import is waited for. Each pass observes
	// and is safe to re-enter, like the whole step. The staging CA is
	// written first, so that a CA changed since the last run reaches
	// importers already restarting.
	if err := r.ensureStagingCA(ctx); err != nil {
		return err
	}
	for _, stage := range []importStage{importCreated, importSent, importDone} {
		for i := range rec.Disks {
			if err := r.importDisk(ctx, i, stage); err != nil {
				return err
			}
		}
	}
	now := r.now()
	stamp(&rec.Timestamps.Imported, now)
	rec.SetCondition(now, record.CondDiskImported, true, "Succeeded", fmt.Sprintf("%d DataVolume(s) Succeeded", len(rec.Disks)))
	return nil
}

// importStage is how far importDisk takes a disk before it returns.
type importStage int

const (
	// importCreated: the disk's DataVolume exists and is ours.
	importCreated importStage = iota
	// importSent: its image has been sent (nothing to send with the http
	// transport: CDI fetches it).
	importSent
	// importDone: the DataVolume Succeeded.
	importDone
)

func (r *run) importDisk(ctx context.Context, i int, stage importStage) error {
	rec := r.rec()
	d := &rec.Disks[i]
	ns := r.spec.Namespace
	kc := r.e.deps.Kube
	lastProgress := ""
	var stall dvStall
	// lastFailure is the importer's last failure seen: the Running
	// condition says it only until the restarted importer runs again.
	lastFailure := ""
	// The DataVolume's change ends the wait at once (wakeups.go).
	dvChanges := r.e.wake.follow(kube.WatchDataVolumes, ns, d.DataVolume)
	defer dvChanges.stop()
	wait := r.pollerWaking(dvChanges)
	for {
		dv, err := kc.GetDataVolume(ctx, ns, d.DataVolume)
		switch {
		case kube.IsNotFound(err):
			var created bool
			if dv, created, err = r.createDataVolume(ctx, i); err != nil {
				return err
			} else if created {
				continue
			}
		case err != nil:
			return err
		}
		if !kube.OfMigration(dv.Labels, r.spec.Name) {
			return dataVolumeNotOurs(ns, d.DataVolume, dv.Labels[kube.LabelMigration])
		}
		if string(dv.UID) != d.DataVolumeUID {
			// Ours, but not the one recorded (recreated, or created by a
			// run interrupted before it could record the UID).
			if r.inCluster() && d.DataVolumeUID != "" {
				// Its claim held the copy: the new one holds none.
				r.claimReplaced(ctx, i)
			}
			d.DataVolumeUID, d.Uploaded = string(dv.UID), false
		}
		if stage == importCreated {
			return nil
		}
		d.DataVolumePhase, d.Progress = string(dv.Status.Phase), string(dv.Status.Progress)
		kind := dvKind(dv.Status.Phase)
		if f := dvFailure(dv); f != "" {
			lastFailure = f
		}
		if kind != dvSucceeded && int(dv.Status.RestartCount) > r.spec.ImporterRestarts {
			return r.importerRestartedTooOften(ctx, i, dv, lastFailure)
		}
		switch kind {
		case dvSucceeded:
			return r.dataVolumeSucceeded(ctx, i)
		case dvPaused:
			return needsHuman("DataVolumePaused", dvSnapshot(dv), dvWhatToDo(dv, r.spec.StorageClass), nil)
		case dvFailed:
			return r.dataVolumeFailed(ctx, i, dv)
		case dvUploadReady:
			if dv.Spec.Source != nil && dv.Spec.Source.Upload != nil && !d.Uploaded {
				if err := r.uploadRecorded(ctx, i); err != nil {
					return err
				}
				continue
			}
		}
		if stage == importSent && (d.Uploaded || dv.Spec.Source == nil || dv.Spec.Source.Upload == nil) {
			return nil
		}
		if d.Progress != lastProgress {
			lastProgress = d.Progress
			r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferImport}, BytesTotal: d.SizeBytes, Percent: parsePercent(d.Progress),
				Message: fmt.Sprintf("disk %d: DataVolume %s %s %s", i, d.DataVolume, d.DataVolumePhase, d.Progress)})
		}
		if stalled := stall.observe(dv, r.now()); stalled >= r.spec.DataVolumeStallTimeout {
			return needsHuman("DataVolumeStalled", fmt.Sprintf("disk %d: %s, unchanged for %s", i, dvSnapshot(dv), stalled.Round(time.Second)),
				dvWhatToDo(dv, r.spec.StorageClass), nil)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}

// importerRestartedTooOften gives up on disk i's DataVolume, whose
// importer CDI restarted more often than importer_restarts allows.
func (r *run) importerRestartedTooOften(ctx context.Context, i int, dv *cdiv1beta1.DataVolume, lastFailure string) error {
	msg := fmt.Sprintf("CDI restarted the importer of disk %d more than %d times: %s", i, r.spec.ImporterRestarts, dvSnapshot(dv))
	if lastFailure != "" {
		msg += "; its last failure: " + lastFailure
	}
	return r.abandonDataVolume(ctx, i, dv, "ImporterRestarts", msg)
}

// uploadRecorded sends disk i to its DataVolume's upload and records
// that it was sent.
func (r *run) uploadRecorded(ctx context.Context, i int) error {
	if err := r.upload(ctx, i); err != nil {
		return err
	}
	r.rec().Disks[i].Uploaded = true
	return r.save(ctx)
}

// createDataVolume creates disk i's DataVolume, which was not found. One
// in the way (made meanwhile, or by this create although its reply was
// lost) is returned when it is ours, with created false, for the caller
// to look at; one that is not ours stops the migration.
func (r *run) createDataVolume(ctx context.Context, i int) (*cdiv1beta1.DataVolume, bool, error) {
	d := &r.rec().Disks[i]
	ns, kc := r.spec.Namespace, r.e.deps.Kube
	d.Imported = false
	if r.spec.Transport.Kind == TransportHTTP {
		// CDI fetches what the spec derives, never a URL read back
		// from the record; the image is removed once imported.
		d.ArtifactURL = r.spec.imageURL(i, r.rec().StagingToken)
		if _, err := os.Stat(r.spec.imagePath(i, r.rec().StagingToken)); err != nil {
			return nil, false, &backTo{phase: record.PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, r.spec.imagePath(i, r.rec().StagingToken))}
		}
	}
	dv, created, err := kube.EnsureOwned(ctx, kc, r.renderDataVolume(*d), kc.CreateDataVolume, kube.LabelOwner(r.spec.Name))
	var other *kube.NotOwnedError
	switch {
	case errors.As(err, &other):
		return nil, false, dataVolumeNotOurs(ns, d.DataVolume, other.Owner)
	case err != nil:
		return nil, false, err
	case created:
		d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = string(dv.UID), false, "", ""
		if err := r.save(ctx); err != nil {
			return nil, false, err
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: created DataVolume %s", i, d.DataVolume)})
	}
	return dv, created, nil
}

// dataVolumeSucceeded records disk i as imported and removes the image
// the HTTP server served for it.
func (r *run) dataVolumeSucceeded(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	if r.inCluster() {
		// A blank claim, ready for its copy Job: nothing is imported yet.
		if !d.Acquired {
			r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: the claim of DataVolume %s is ready for its copy Job", i, d.DataVolume)})
		}
		return r.save(ctx)
	}
	d.Imported = true
	if r.spec.Transport.Kind == TransportHTTP {
		// Imported: the image need not stay where the HTTP server
		// serves it.
		if err := convert.Remove(r.spec.imagePath(i, r.rec().StagingToken)); err != nil {
			return transient("CleanupFailed", fmt.Sprintf("cannot remove the served image of disk %d", i), err)
		}
	}
	r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferImport}, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
		Message: fmt.Sprintf("disk %d: DataVolume %s Succeeded", i, d.DataVolume)})
	return r.save(ctx)
}

// dataVolumeFailed: a refused image fails the migration; any other
// failure deletes the DataVolume so that the next attempt recreates it.
func (r *run) dataVolumeFailed(ctx context.Context, i int, dv *cdiv1beta1.DataVolume) error {
	d := &r.rec().Disks[i]
	ns := r.spec.Namespace
	reason, msg := dvRunningCondition(dv)
	if dvFailureIsPermanent(reason, msg) {
		return permanent("DataVolumeFailed", fmt.Sprintf("DataVolume %s/%s failed: %s: %s", ns, d.DataVolume, reason, msg),
			"check the image and the storage class", nil)
	}
	if err := r.deleteDataVolume(ctx, i); err != nil {
		return err
	}
	return transient("DataVolumeFailed", fmt.Sprintf("DataVolume %s/%s failed (%s: %s); deleted it so that the next attempt recreates it", ns, d.DataVolume, reason, msg), nil)
}

// dvFailureIsPermanent reports whether a failed DataVolume's reason says
// the image itself was refused, which recreating it will not fix.
func dvFailureIsPermanent(reason, message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "unable to process data") || strings.Contains(m, "invalid format") ||
		strings.Contains(m, "exceeds") || strings.Contains(m, "larger than")
}

func dvRunningCondition(dv *cdiv1beta1.DataVolume) (string, string) {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1beta1.DataVolumeRunning {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

func parsePercent(p string) float64 {
	var f float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(p, "%"), "%g", &f); err != nil {
		return 0
	}
	return f
}

// deleteDataVolume deletes disk i's DataVolume, waits until it is gone
// and records that disk i has none.
func (r *run) deleteDataVolume(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	if err := r.e.deps.Kube.DeleteDataVolume(ctx, r.spec.Namespace, d.DataVolume); err != nil {
		return err
	}
	if err := r.waitGone(ctx, d.DataVolume); err != nil {
		return err
	}
	d.DataVolumeUID, d.Uploaded, d.DataVolumePhase, d.Progress = "", false, "", ""
	return r.save(ctx)
}

// abandonDataVolume stops waiting on disk i's DataVolume: it is deleted
// (it holds no finished import), so that the run after the fix starts a
// new one, and the stop says what it showed.
func (r *run) abandonDataVolume(ctx context.Context, i int, dv *cdiv1beta1.DataVolume, reason, msg string) error {
	action := dvWhatToDo(dv, r.spec.StorageClass)
	if err := r.deleteDataVolume(ctx, i); err != nil {
		return err
	}
	return needsHuman(reason, msg+"; deleted it so that the next run starts a new one", action, nil)
}

// waitGone waits until a deleted DataVolume has disappeared, for at most
// Spec.DataVolumeStallTimeout.
func (r *run) waitGone(ctx context.Context, name string) error {
	dvChanges := r.e.wake.follow(kube.WatchDataVolumes, r.spec.Namespace, name)
	defer dvChanges.stop()
	wait := r.pollerWaking(dvChanges)
	start := r.now()
	for {
		dv, err := r.e.deps.Kube.GetDataVolume(ctx, r.spec.Namespace, name)
		if kube.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if waited := r.now().Sub(start); waited >= r.spec.DataVolumeStallTimeout {
			return needsHuman("DataVolumeNotDeleted", fmt.Sprintf("%s, deleted %s ago and still there (finalizers %v)", dvSnapshot(dv), waited.Round(time.Second), dv.Finalizers),
				"find out what holds it (kubectl get dv "+name+" -n "+r.spec.Namespace+" -o yaml: finalizers, ownerReferences), then run apply again", nil)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}

func (r *run) upload(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	art := r.spec.imagePath(i, r.rec().StagingToken)
	if _, err := os.Stat(art); err != nil {
		return &backTo{phase: record.PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, art)}
	}
	send, err := r.uploadImage(ctx, i, art)
	if err != nil {
		return err
	}
	// The record says what is being sent before it leaves, and Uploaded
	// once it has arrived; an interrupted upload is sent again.
	d.UploadFormat, d.UploadBytes, d.UploadSHA256 = string(send.Format), send.SizeBytes, send.SHA256
	if err := r.save(ctx); err != nil {
		return err
	}
	size := send.SizeBytes
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: uploading %s (%s, %d bytes for a %d-byte disk) to DataVolume %s",
		i, send.Path, send.Format, size, d.SizeBytes, d.DataVolume)})
	err = r.e.deps.Uploader.Upload(ctx, UploadRequest{
		Namespace: r.spec.Namespace, DataVolume: d.DataVolume, Path: send.Path, Size: size,
		ProxyURL: r.spec.Transport.UploadProxyURL, CAPEM: r.spec.Transport.UploadProxyCAPEM, Insecure: r.spec.Transport.Insecure,
		ServerName: r.spec.Transport.UploadProxyServerName,
		Progress:   r.uploadProgress(ctx, i, size, "", fmt.Sprintf("disk %d", i)),
		Route: func(route string) {
			d.UploadRoute = route
			r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: uploading through %s", i, route)})
		},
	})
	if err != nil {
		return err
	}
	if send.Path != art {
		// Sent: the qcow2 copy has done its job.
		if err := convert.Remove(send.Path); err != nil {
			r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: cannot remove %s (removed with the staging folder): %v", i, send.Path, err)})
		}
	}
	return nil
}

// uploadProgress reports an upload of disk i as progress events, at most
// about once a second and at its end, with label leading their messages and
// in phase ("": the record's).
func (r *run) uploadProgress(ctx context.Context, i int, size int64, phase record.Phase, label string) func(sent int64) {
	var last time.Time
	return func(sent int64) {
		if time.Since(last) < time.Second && sent < size {
			return
		}
		last = time.Now()
		pct := 0.0
		if size > 0 {
			pct = 100 * float64(sent) / float64(size)
		}
		r.report(ctx, Event{Kind: EventProgress, Phase: phase, Disk: i, Transfer: Transfer{Kind: TransferUpload}, BytesDone: sent, BytesTotal: size, Percent: pct,
			Message: fmt.Sprintf("%s: uploaded %d of %d bytes (%.1f%%)", label, sent, size, pct)})
	}
}

// qcow2MinSaving: a raw image is sent as a qcow2 copy only when its holes
// are at least 1/qcow2MinSaving of it.
const qcow2MinSaving = 8

// uploadImage returns the file to send to CDI's upload proxy for disk i.
// A raw image is sent as a qcow2 copy (qemu-img convert detects zero runs
// and holes, so only data crosses the wire); CDI converts it back to raw
// in the claim, so the disk the guest sees, and its checksum, are the raw
// image's. The copy is made with convert.Tool.Convert: an interrupted
// upload finds it intact (its sidecar) and sends it again without
// converting. When the work folder has no room for it, or the image is
// nearly all data, the raw image is sent as it is.
func (r *run) uploadImage(ctx context.Context, i int, art string) (convert.Artifact, error) {
	fi, err := os.Stat(art)
	if err != nil {
		return convert.Artifact{}, &backTo{phase: record.PhaseConverting, reason: fmt.Sprintf("the image of disk %d (%s) is gone", i, art)}
	}
	asIs := convert.Artifact{Path: art, Format: convert.Format(r.spec.TargetFormat), SizeBytes: fi.Size()}
	if d := r.rec().Disks[i]; art == r.spec.artifactPath(i, r.rec().StagingToken) && d.ArtifactFormat != "" {
		asIs.Format, asIs.SHA256 = convert.Format(d.ArtifactFormat), d.ArtifactSHA256
	} else if d.ConvertedSHA256 != "" {
		asIs.SHA256 = d.ConvertedSHA256
	}
	if asIs.Format != convert.Raw {
		return asIs, nil
	}
	// The copy pays off by leaving zeros behind; for an image that is
	// nearly all data it would only add a local rewrite before the upload
	// and CDI's conversion after it.
	if data, err := convert.DataBytes(art); err == nil && data > fi.Size()-fi.Size()/qcow2MinSaving {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: %d of its %d bytes hold data: uploading the raw image as it is, a qcow2 copy would save little", i, data, fi.Size())})
		return asIs, nil
	}
	q := r.spec.uploadPath(i)
	a, err := r.e.tool.Convert(ctx, art, convert.Raw, q, convert.QCOW2)
	switch {
	case isNoSpace(err):
		_ = convert.Remove(q)
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: no room in %s for the qcow2 copy that keeps zero runs off the wire; uploading the raw image", i, filepath.Dir(q))})
		return asIs, nil
	case err != nil:
		return convert.Artifact{}, err
	}
	_ = os.Chmod(q, 0o600)
	return a, nil
}

// dataVolumeNotOurs is the stop at a DataVolume of the migration's name
// that another (owner, its LabelMigration) made.
func dataVolumeNotOurs(namespace, name, owner string) error {
	return needsHuman("DataVolumeNotOurs",
		fmt.Sprintf("DataVolume %s/%s exists and was not created by this migration (label %s=%q)", namespace, name, kube.LabelMigration, owner),
		"the provider never overwrites what it does not own: remove or rename that DataVolume, or choose another destination name, then run apply again", nil)
}
