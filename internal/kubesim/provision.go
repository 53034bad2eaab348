package kubesim

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The sim as its StorageClasses' provisioner (Options.ProvisionVolumes),
// following an external provisioner built on
// sig-storage-lib-external-provisioner v11 (controller/controller.go):
//
//   - it provisions only a claim the PersistentVolume binder handed to it:
//     annotation volume.kubernetes.io/storage-provisioner naming the
//     class's provisioner, set by the binder once no existing volume
//     matches (kubernetes v1.37.2 pkg/controller/volume/persistentvolume/
//     pv_controller.go setClaimProvisioner), and not while the DataVolume
//     waits for its first consumer (stepCommon asks only after that wait,
//     where a provisioner would also wait for the scheduler's
//     volume.kubernetes.io/selected-node);
//   - the volume is "pvc-<claim UID>", pre-bound to the claim by a
//     claimRef with its UID, with the class's name and reclaim policy, the
//     claim's access modes, volume mode and request as capacity, and
//     pv.kubernetes.io/provisioned-by; the binder then binds the pair;
//   - a volume whose claim is gone (Released) and whose policy is Delete
//     is deleted.
//
// The volume is a hostPath on the DataVolume's folder in Dir (a file, the
// image itself, for a Block claim), so that a pod mounting the claim
// reads and writes the image the sim keeps for the DataVolume. The image
// stays in Dir after the volume is deleted, for tests to inspect.

// Provisioner is the provisioner name the sim answers to with
// Options.ProvisionVolumes: claims of StorageClasses of other provisioners
// are left to them.
const Provisioner = "kubesim.vmmigration.io/hostpath"

const (
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
)

// claimProvisioned reports, with Options.ProvisionVolumes, whether the
// claim of dv, whose class's provisioner is Provisioner, is Bound,
// provisioning its volume when the binder asks the sim. Claims of other
// classes are not the sim's to provision: as without the option, their
// binding is not simulated and they count as bound.
func (s *Sim) claimProvisioned(dv *cdiv1.DataVolume) bool {
	if !s.opts.ProvisionVolumes {
		return true
	}
	sc, err := s.storageClassOf(s.ctx, dv)
	if err != nil {
		return false
	}
	if sc == nil || sc.Provisioner != Provisioner {
		return true
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: dv.Name}, pvc); err != nil {
		return false
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		return true
	}
	setDVCondition(&dv.Status, cdiv1.DataVolumeBound, corev1.ConditionFalse, "PVC "+dv.Name+" Pending", "Pending")
	if pvc.Annotations[annStorageProvisioner] != Provisioner {
		return false
	}
	if err := s.provisionVolume(s.ctx, pvc, sc); err != nil {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}
	return false
}

// provisionClaims provisions, with Options.ProvisionVolumes, the claims
// that are no DataVolume's (claimProvisioned sees to those) and that the
// binder asked the sim for: an external provisioner provisions every
// claim of its class, whoever made it.
func (s *Sim) provisionClaims(ctx context.Context) error {
	if !s.opts.ProvisionVolumes {
		return nil
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := s.cl.List(ctx, &pvcs); err != nil {
		return err
	}
	var errs []error
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil ||
			pvc.Annotations[annStorageProvisioner] != Provisioner || !s.watched(pvc.Namespace) || ownedByDataVolume(pvc) {
			continue
		}
		name := ptr.Deref(pvc.Spec.StorageClassName, "")
		if name == "" {
			continue // the binder never hands a claim of no class to a provisioner
		}
		sc := &storagev1.StorageClass{}
		if err := s.cl.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, s.provisionVolume(ctx, pvc, sc))
	}
	return errors.Join(errs...)
}

func ownedByDataVolume(pvc *corev1.PersistentVolumeClaim) bool {
	for _, o := range pvc.OwnerReferences {
		if o.Kind == "DataVolume" {
			return true
		}
	}
	return false
}

// provisionVolume makes pvc's storage, then its volume: a folder in Dir
// (for a Block claim a file of the claim's size in it, named as a
// DataVolume's image), pre-bound to the claim.
func (s *Sim) provisionVolume(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) error {
	path := filepath.Dir(imagePath(s.dir, pvc.Namespace, pvc.Name))
	hostPathType := corev1.HostPathDirectoryOrCreate
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		path, hostPathType = imagePath(s.dir, pvc.Namespace, pvc.Name), corev1.HostPathFileOrCreate
	}
	policy := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		policy = *sc.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID), Annotations: map[string]string{annProvisionedBy: sc.Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: policy,
			StorageClassName:              sc.Name,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &hostPathType}},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
		},
	}
	// The volume's storage exists before its PersistentVolume, as a
	// provisioner makes the folder (or device) first.
	if err := makeVolumeStorage(path, hostPathType, pvc.Spec.Resources.Requests.Storage().Value()); err != nil {
		return err
	}
	if err := s.cl.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// makeVolumeStorage makes a provisioned volume's storage: its folder, or
// for a Block volume a file of its size (kept when it exists).
func makeVolumeStorage(path string, t corev1.HostPathType, size int64) error {
	if t != corev1.HostPathFileOrCreate {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() >= size {
		return err
	}
	return f.Truncate(size)
}

// deleteReleasedVolumes deletes the volumes the sim provisioned whose
// claims are gone, when their reclaim policy says Delete.
func (s *Sim) deleteReleasedVolumes(ctx context.Context) error {
	if !s.opts.ProvisionVolumes {
		return nil
	}
	var pvs corev1.PersistentVolumeList
	if err := s.cl.List(ctx, &pvs); err != nil {
		return err
	}
	var errs []error
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
			pv.Spec.ClaimRef == nil || !s.watched(pv.Spec.ClaimRef.Namespace) {
			continue
		}
		if _, ok := pv.Annotations[annProvisionedBy]; !ok {
			continue
		}
		if err := s.cl.Delete(ctx, pv); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
