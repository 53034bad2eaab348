package kubesim

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// The claims the sim creates for a DataVolume, as CDI v1.65 does, so that
// the API server's ResourceQuota admission counts them: the DataVolume's
// own claim (same name), and for an upload a scratch claim beside it.
const (
	// labelCDI is the label CDI puts on the claims it creates
	// (pkg/common/common.go CDILabelKey, CDILabelValue).
	labelCDI, labelCDIValue = "app", "containerized-data-importer"
	// scratchClaimSuffix names an upload's scratch claim
	// (pkg/common/common.go ScratchNameSuffix).
	scratchClaimSuffix = "-scratch"
	// reasonExceededQuota is the reason CDI gives when a claim is refused
	// by a quota (pkg/controller/common/util.go ErrExceededQuota).
	reasonExceededQuota = "ErrExceededQuota"
	// pvcProtectionFinalizer is the finalizer the API server's
	// StorageObjectInUseProtection admission adds to every claim; the sim
	// removes it as Kubernetes' pvc-protection controller does for a
	// claim no pod uses.
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
)

// ScratchClaimName is the name of the scratch claim of the upload to the
// DataVolume named dv.
func ScratchClaimName(dv string) string { return dv + scratchClaimSuffix }

// claimSpec is the claim CDI creates for dv: spec.storage inflated by the
// filesystem overhead on a Filesystem volume
// (pkg/controller/datavolume/util.go renderPvcSpec, common
// InflateSizeWithOverhead), spec.pvc as written.
func (s *Sim) claimSpec(dv *cdiv1.DataVolume) (corev1.PersistentVolumeClaimSpec, int64, bool) {
	var spec corev1.PersistentVolumeClaimSpec
	switch {
	case dv.Spec.Storage != nil:
		st := dv.Spec.Storage
		spec = corev1.PersistentVolumeClaimSpec{AccessModes: st.AccessModes, VolumeMode: st.VolumeMode, StorageClassName: st.StorageClassName,
			Resources: *st.Resources.DeepCopy()}
	case dv.Spec.PVC != nil:
		spec = *dv.Spec.PVC.DeepCopy()
	}
	if len(spec.AccessModes) == 0 {
		spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	block := spec.VolumeMode != nil && *spec.VolumeMode == corev1.PersistentVolumeBlock
	q := spec.Resources.Requests[corev1.ResourceStorage]
	size := q.Value()
	if dv.Spec.Storage != nil {
		size = cdi.DataVolumeClaimSize(size, block, s.opts.FilesystemOverhead)
	}
	if spec.Resources.Requests == nil {
		spec.Resources.Requests = corev1.ResourceList{}
	}
	spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(size, resource.BinarySI)
	return spec, size, block
}

// ensureClaim creates dv's claim when it has none and reports whether it
// exists. A claim the namespace's quota refuses leaves the DataVolume
// Pending with the refusal, as CDI's handlePvcCreation does
// (pkg/controller/datavolume/controller-base.go).
func (s *Sim) ensureClaim(dv *cdiv1.DataVolume) bool {
	spec, _, _ := s.claimSpec(dv)
	return s.ensureClaimNamed(dv, dv.Name, spec, cdiv1.DataVolumeBound)
}

// ensurePrimeClaim creates, when CDI populates dv's claim through a
// populator, the claim prime the importer or upload pod writes into,
// "prime-<claim UID>" beside the claim, with the claim's spec; CDI rebinds
// its volume to the claim and deletes it once populated (CDI v1.65.0
// pkg/controller/populators/populator-base.go createPVCPrime,
// pkg/controller/populators/util.go PVCPrimeName). It reports whether
// the prime exists or is not needed.
func (s *Sim) ensurePrimeClaim(dv *cdiv1.DataVolume) bool {
	sc, err := s.storageClassOf(s.ctx, dv)
	if err != nil {
		return false
	}
	pop, err := s.usesPopulator(s.ctx, dv, sc)
	if err != nil || !pop {
		return err == nil
	}
	target := &corev1.PersistentVolumeClaim{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: dv.Name}, target); err != nil {
		return false
	}
	spec, _, _ := s.claimSpec(dv)
	return s.ensureClaimNamed(dv, primeClaimName(target), spec, cdiv1.DataVolumeBound)
}

func primeClaimName(target *corev1.PersistentVolumeClaim) string {
	return "prime-" + string(target.UID)
}

// deletePrimeClaim removes dv's claim prime once its claim is populated.
func (s *Sim) deletePrimeClaim(dv *cdiv1.DataVolume) {
	target := &corev1.PersistentVolumeClaim{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: dv.Name}, target); err != nil {
		return
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: primeClaimName(target)}, pvc); err == nil {
		_ = s.deleteClaim(s.ctx, pvc)
	}
}

// ensureScratchClaim creates the scratch claim of an upload to dv and
// reports whether it exists: the claim's size, less the overhead, plus
// the overhead again, on a Filesystem volume of the same StorageClass
// (pkg/controller/upload-controller.go getOrCreateScratchPvc,
// pkg/controller/util.go createScratchPersistentVolumeClaim).
func (s *Sim) ensureScratchClaim(dv *cdiv1.DataVolume) bool {
	spec, size, block := s.claimSpec(dv)
	spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(cdi.ScratchClaimSize(size, block, s.opts.FilesystemOverhead), resource.BinarySI)
	return s.ensureClaimNamed(dv, ScratchClaimName(dv.Name), spec, cdiv1.DataVolumeRunning)
}

func (s *Sim) ensureClaimNamed(dv *cdiv1.DataVolume, name string, spec corev1.PersistentVolumeClaimSpec, cond cdiv1.DataVolumeConditionType) bool {
	pvc := &corev1.PersistentVolumeClaim{}
	err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: name}, pvc)
	if err == nil {
		// A claim of an earlier DataVolume of the same name is collected
		// first.
		owner := metav1.GetControllerOf(pvc)
		return owner == nil || owner.UID == dv.UID
	}
	if !apierrors.IsNotFound(err) {
		return false
	}
	pvc = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: dv.Namespace, Name: name, Labels: map[string]string{labelCDI: labelCDIValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume", Name: dv.Name, UID: dv.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: spec,
	}
	err = s.cl.Create(s.ctx, pvc)
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		return true
	case apierrors.IsForbidden(err):
		// The quota admission's refusal ("exceeded quota: ...").
		setDVCondition(&dv.Status, cond, corev1.ConditionFalse, err.Error(), reasonExceededQuota)
	}
	return false
}

// deleteClaim deletes a claim the sim made, removing the pvc-protection
// finalizer first (no pod uses it).
func (s *Sim) deleteClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if i := slices.Index(pvc.Finalizers, pvcProtectionFinalizer); i >= 0 {
		pvc.Finalizers = slices.Delete(pvc.Finalizers, i, i+1)
		if err := s.cl.Update(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
	}
	if err := s.cl.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// deleteScratchClaim removes an upload's scratch claim once the upload is
// done, as CDI's upload controller does when the upload pod completes.
func (s *Sim) deleteScratchClaim(dv *cdiv1.DataVolume) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: ScratchClaimName(dv.Name)}, pvc); err == nil {
		_ = s.deleteClaim(s.ctx, pvc)
	}
}

// collectClaims deletes the claims of DataVolumes that are gone, as the
// garbage collector does for owned objects (no kube-controller-manager
// runs in the test cluster).
func (s *Sim) collectClaims(ctx context.Context, seen map[types.UID]bool) error {
	var list corev1.PersistentVolumeClaimList
	if err := s.cl.List(ctx, &list, client.MatchingLabels{labelCDI: labelCDIValue}); err != nil {
		return fmt.Errorf("listing claims: %w", err)
	}
	for i := range list.Items {
		pvc := &list.Items[i]
		if !s.watched(pvc.Namespace) {
			continue
		}
		owner := metav1.GetControllerOf(pvc)
		if owner == nil || owner.Kind != "DataVolume" || seen[owner.UID] {
			continue
		}
		if err := s.deleteClaim(ctx, pvc); err != nil {
			return err
		}
	}
	return nil
}
