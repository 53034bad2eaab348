package podrun

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// BindClaim makes claim namespace/name exist, bound to a new
// PersistentVolume backed by path on this machine, so that the real
// scheduler places pods that use it (it refuses a pod whose claim is
// missing or unbound) and the persistentvolume-binder controller binds it
// as it binds any pre-bound pair. path must also be the claim's path in
// Options.Claims, where the runner finds it. block makes both Block mode.
// It returns the PersistentVolume's name (cluster-scoped: delete it when
// done).
func BindClaim(ctx context.Context, cs kubernetes.Interface, namespace, name, path string, block bool) (string, error) {
	mode := corev1.PersistentVolumeFilesystem
	if block {
		mode = corev1.PersistentVolumeBlock
	}
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: namespace, Name: name},
			VolumeMode:                    &mode,
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("podrun: claim %s/%s: %w", namespace, name, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			VolumeName:       pv.Name,
			StorageClassName: ptr.To(""),
			VolumeMode:       &mode,
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return pv.Name, fmt.Errorf("podrun: claim %s/%s: %w", namespace, name, err)
	}
	return pv.Name, nil
}
