// Package cdi holds what CDI v1.65 does with a DataVolume's claims, for
// the provider to plan with and for the test cluster's simulated CDI
// (internal/kubesim) to do, defined once. Each is cited from
// kubevirt.io/containerized-data-importer v1.65.0.
package cdi

import "math"

// AnnImmediateBinding asks CDI to bind and populate a DataVolume's claim
// at once, even when its StorageClass binds on first consumer: without
// it, CDI keeps the DataVolume PendingPopulation until a pod uses the
// claim (pkg/controller/common/util.go AnnImmediateBinding and
// ImmediateBindingRequested, which looks at the key only;
// pkg/controller/datavolume/controller-base.go
// shouldBeMarkedPendingPopulation). virtctl image-upload --force-bind
// sets it, as does Forklift.
const AnnImmediateBinding = "cdi.kubevirt.io/storage.bind.immediate.requested"

// DefaultFilesystemOverhead is the share of a Filesystem-mode claim CDI
// keeps for the file system when CDIConfig sets none
// (pkg/common/common.go DefaultGlobalOverhead "0.06").
const DefaultFilesystemOverhead = 0.06

// cdiAlignBlock is the unit CDI aligns images and claims to
// (pkg/util/util.go DefaultAlignBlockSize).
const cdiAlignBlock = 1 << 20

func roundUp(n, unit int64) int64   { return (n + unit - 1) / unit * unit }
func roundDown(n, unit int64) int64 { return n / unit * unit }

// RequiredSpace is the claim CDI requests for an image of size bytes on
// a Filesystem-mode volume (pkg/util/util.go GetRequiredSpace).
func RequiredSpace(overhead float64, size int64) int64 {
	aligned := roundUp(size, cdiAlignBlock)
	return int64(math.Ceil(float64(aligned) * (1 + overhead)))
}

// UsableSpace is what a Filesystem-mode claim of size bytes holds for the
// image (pkg/util/util.go GetUsableSpace).
func UsableSpace(overhead float64, size int64) int64 {
	return roundDown(int64(math.Ceil(float64(size)/(1+overhead))), cdiAlignBlock)
}

// DataVolumeClaimSize is the claim CDI creates for a DataVolume whose
// spec.storage requests size bytes: inflated by the overhead on a
// Filesystem volume, as asked on a Block one
// (pkg/controller/common/util.go InflateSizeWithOverhead).
func DataVolumeClaimSize(size int64, block bool, overhead float64) int64 {
	if block {
		return size
	}
	return RequiredSpace(overhead, size)
}

// ScratchClaimSize is the scratch claim CDI's upload controller creates
// beside a claim of claim bytes, in the same StorageClass, for the upload
// pod to receive the image in (pkg/controller/upload-controller.go
// getOrCreateScratchPvc; pkg/controller/util.go
// createScratchPersistentVolumeClaim, where a Block claim's overhead is 0
// and the scratch volume is Filesystem).
func ScratchClaimSize(claim int64, block bool, overhead float64) int64 {
	claimOverhead := overhead
	if block {
		claimOverhead = 0
	}
	return roundUp(RequiredSpace(overhead, UsableSpace(claimOverhead, claim)), cdiAlignBlock)
}
