package kubesim

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// annDefaultStorageClass marks the cluster's default StorageClass.
const annDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"

// annUsePopulator lets a DataVolume choose whether CDI populates its
// claim with a populator (pkg/controller/common/util.go AnnUsePopulator).
const annUsePopulator = "cdi.kubevirt.io/storage.usePopulator"

// usesPopulator reports whether CDI populates dv's claim through a
// populator and a claim prime: as the DataVolume's annotation says, else
// when its StorageClass's provisioner is a CSI driver (CDI v1.65.0
// pkg/controller/datavolume/controller-base.go shouldUseCDIPopulator,
// pkg/controller/datavolume/util.go storageClassCSIDriverExists).
func (s *Sim) usesPopulator(ctx context.Context, dv *cdiv1.DataVolume, sc *storagev1.StorageClass) (bool, error) {
	if v, ok := dv.Annotations[annUsePopulator]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("DataVolume %s/%s: annotation %s: %w", dv.Namespace, dv.Name, annUsePopulator, err)
		}
		return b, nil
	}
	if sc == nil || strings.Contains(sc.Provisioner, "/") {
		// No CSIDriver can have the name of an in-tree provisioner
		// ("kubernetes.io/..."): a CSI driver's name is a DNS subdomain.
		return false, nil
	}
	err := s.cl.Get(ctx, client.ObjectKey{Name: sc.Provisioner}, &storagev1.CSIDriver{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// waitingPhase returns the phase in which CDI leaves dv waiting for a
// consumer of its claim, "" when it does not wait: its StorageClass binds
// on first consumer, no pod consumes the claim yet (the scheduler has
// picked no node) and the DataVolume does not ask for immediate binding.
// With a populator the phase is PendingPopulation, else
// WaitForFirstConsumer (the HonorWaitForFirstConsumer feature gate is on
// in the released CDI CR). CDI v1.65.0
// pkg/controller/datavolume/controller-base.go updateStatusPVCPending,
// shouldBeMarkedPendingPopulation, shouldBeMarkedWaitForFirstConsumer,
// getStorageClassBindingMode (no StorageClass: Immediate; none named: the
// default one); pkg/controller/common/util.go ImmediateBindingRequested
// and IsWaitForFirstConsumerEnabled (the annotation's key counts, not its
// value; the DataVolume's annotations are passed on to its claim).
func (s *Sim) waitingPhase(ctx context.Context, dv *cdiv1.DataVolume) (cdiv1.DataVolumePhase, error) {
	if _, ok := dv.Annotations[cdi.AnnImmediateBinding]; ok {
		return "", nil
	}
	sc, err := s.storageClassOf(ctx, dv)
	if err != nil || sc == nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return "", err
	}
	used, err := s.claimConsumed(ctx, dv.Namespace, dv.Name)
	if err != nil || used {
		return "", err
	}
	pop, err := s.usesPopulator(ctx, dv, sc)
	if err != nil {
		return "", err
	}
	if pop {
		return cdiv1.PendingPopulation, nil
	}
	return cdiv1.WaitForFirstConsumer, nil
}

// storageClassOf returns the StorageClass of dv's claim: the one named, or
// the default one when none is named; nil when there is none.
func (s *Sim) storageClassOf(ctx context.Context, dv *cdiv1.DataVolume) (*storagev1.StorageClass, error) {
	var name *string
	switch {
	case dv.Spec.Storage != nil:
		name = dv.Spec.Storage.StorageClassName
	case dv.Spec.PVC != nil:
		name = dv.Spec.PVC.StorageClassName
	}
	if name != nil {
		if *name == "" {
			return nil, nil
		}
		sc := &storagev1.StorageClass{}
		err := s.cl.Get(ctx, client.ObjectKey{Name: *name}, sc)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("StorageClass %s: %w", *name, err)
		}
		return sc, nil
	}
	var list storagev1.StorageClassList
	if err := s.cl.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing StorageClasses: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].Annotations[annDefaultStorageClass] == "true" {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// claimConsumed reports whether a pod that is not finished mounts the
// claim, or a VirtualMachineInstance uses it (its virt-launcher pod mounts
// it): the scheduler then picks a node for the claim, which binds it. The
// sim schedules every such pod.
func (s *Sim) claimConsumed(ctx context.Context, namespace, claim string) (bool, error) {
	var pods corev1.PodList
	if err := s.cl.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return false, fmt.Errorf("listing pods of %s: %w", namespace, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
				return true, nil
			}
		}
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.cl.List(ctx, &vmis, client.InNamespace(namespace)); err != nil {
		return false, fmt.Errorf("listing VirtualMachineInstances of %s: %w", namespace, err)
	}
	for _, vmi := range vmis.Items {
		for _, v := range vmi.Spec.Volumes {
			if (v.DataVolume != nil && v.DataVolume.Name == claim) ||
				(v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim) {
				return true, nil
			}
		}
	}
	return false, nil
}
