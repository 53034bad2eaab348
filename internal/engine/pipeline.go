package engine

import (
	"context"
	"fmt"
)

// Copy and import overlap: when a VM's disks need no guest conversion, a
// disk whose copy is verified is sent to its DataVolume while the VM's
// other disks are still copying, so that the upload of one disk and the
// copy of the next share the downtime instead of adding up.
//
// Only the plain path is taken here: create the DataVolume if it is
// absent, wait until CDI is ready for the upload, send the image, record
// it as sent. Anything else (a DataVolume that fails, is not ours, or an
// upload that fails) is left as it is, to Importing, which observes the
// same objects and handles every case with its retries. So an early
// upload changes when the work is done, never what is recorded or how a
// failure is handled, and a crash at any line resumes as before: the
// record says per disk whether its DataVolume exists (DataVolumeUID) and
// whether its image arrived (Uploaded).

// pipelined reports whether disks may be uploaded during the copy: each
// disk's image is then its own (no guest conversion spans the disks),
// sent through CDI's upload proxy, and made from a plain staged copy.
//
// In warm mode the copies made while the VM runs are not the disks' final
// content; the disks' snapshot chains are flattened after the cutover, and
// a disk flattened while others still flatten is sent the same way.
func (r *run) pipelined() bool {
	return r.uploadsEachDisk() && r.spec.Mode != ModeWarm
}

// uploadsEachDisk reports whether each disk's image is its own (no guest
// conversion spans the disks) and is sent through CDI's upload proxy.
func (r *run) uploadsEachDisk() bool {
	return r.spec.Conversion == ConversionNone && r.spec.Transport.Kind == TransportCDIUpload
}

// uploadEarly sends disk i's image while other disks are copied or
// flattened (flattened: its snapshot chain was just flattened into its
// staged copy). What it cannot do is reported and left to Importing.
func (r *run) uploadEarly(ctx context.Context, i int, flattened bool) {
	if err := r.tryUploadEarly(ctx, i, flattened); err != nil && ctx.Err() == nil {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: not sent early (%v); Importing sends it", i, err)})
	}
}

func (r *run) tryUploadEarly(ctx context.Context, i int, flattened bool) error {
	d := &r.rec().Disks[i]
	if (d.OnChain() && !flattened) || d.Uploaded || d.Imported {
		return nil
	}
	if err := r.prepareImage(ctx, i); err != nil {
		return err
	}
	if err := r.importDisk(ctx, i, importCreated); err != nil {
		return err
	}
	if err := r.waitUploadReady(ctx, i); err != nil {
		return err
	}
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("disk %d: sending its image while the other disks are prepared", i)})
	if err := r.upload(ctx, i); err != nil {
		return err
	}
	d.Uploaded = true
	return r.save(ctx)
}
