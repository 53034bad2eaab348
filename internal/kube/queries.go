package kube

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels the provider puts on every object it creates. An object with the
// same name but without our migration label (or with another value) is not
// ours and is never overwritten.
const (
	// LabelMigration names the migration (its destination VM name, unique in
	// the namespace) that created the object.
	LabelMigration = "vmmigration.io/migration"
	// LabelManagedBy is the well-known managed-by label.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is LabelManagedBy's value on our objects.
	ManagedByValue = "terraform-provider-vmmigration"
)

// MigrationLabels are the labels of the objects migration makes.
func MigrationLabels(migration string) map[string]string {
	return map[string]string{LabelMigration: migration, LabelManagedBy: ManagedByValue}
}

// OfMigration reports whether labels mark an object as migration's.
func OfMigration(labels map[string]string, migration string) bool {
	return labels[LabelMigration] == migration
}

// NamespaceExists reports whether a namespace exists.
func (c *Client) NamespaceExists(ctx context.Context, namespace string) (bool, error) {
	return c.exists(ctx, "Namespace", "", namespace, &corev1.Namespace{})
}

// StorageClassExists reports whether a StorageClass exists.
func (c *Client) StorageClassExists(ctx context.Context, name string) (bool, error) {
	return c.exists(ctx, "StorageClass", "", name, &storagev1.StorageClass{})
}

// VirtualMachineOwner reports whether a VirtualMachine exists and the value
// of its LabelMigration ("" when it has none).
func (c *Client) VirtualMachineOwner(ctx context.Context, namespace, name string) (bool, string, error) {
	vm := &kubevirtv1.VirtualMachine{}
	ok, err := c.exists(ctx, "VirtualMachine", namespace, name, vm)
	return ok, vm.Labels[LabelMigration], err
}

// DataVolumeOwner is VirtualMachineOwner for DataVolumes.
func (c *Client) DataVolumeOwner(ctx context.Context, namespace, name string) (bool, string, error) {
	dv := &cdiv1beta1.DataVolume{}
	ok, err := c.exists(ctx, "DataVolume", namespace, name, dv)
	return ok, dv.Labels[LabelMigration], err
}

func (c *Client) exists(ctx context.Context, kind, namespace, name string, obj client.Object) (bool, error) {
	err := c.get(ctx, kind, namespace, name, obj)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// StorageQuotaRemaining returns the least storage-request headroom that the
// namespace's ResourceQuotas leave for new claims of a StorageClass (from
// both requests.storage and <class>.storageclass.storage.k8s.io/requests.storage),
// and whether any quota limits it.
func (c *Client) StorageQuotaRemaining(ctx context.Context, namespace, storageClass string) (int64, bool, error) {
	cl, err := c.raw()
	if err != nil {
		return 0, false, err
	}
	var list corev1.ResourceQuotaList
	if err := cl.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return 0, false, wrap("list", "ResourceQuota", namespace, "", err)
	}
	names := []corev1.ResourceName{
		corev1.ResourceRequestsStorage,
		corev1.ResourceName(storageClass + ".storageclass.storage.k8s.io/requests.storage"),
	}
	var least int64
	limited := false
	for _, q := range list.Items {
		for _, n := range names {
			hard, ok := q.Spec.Hard[n]
			if !ok {
				continue
			}
			used := q.Status.Used[n]
			left := hard.DeepCopy()
			left.Sub(orZero(used))
			v := left.Value()
			if v < 0 {
				v = 0
			}
			if !limited || v < least {
				least, limited = v, true
			}
		}
	}
	return least, limited, nil
}

// StorageClassPopulated reports whether CDI fills claims of the
// StorageClass through a populator and a claim prime of the same size
// beside each claim: when its provisioner is a CSI driver (a CSIDriver of
// that name exists; CDI v1.65.0 pkg/controller/datavolume/util.go
// storageClassCSIDriverExists). A StorageClass that does not exist is not.
func (c *Client) StorageClassPopulated(ctx context.Context, name string) (bool, error) {
	cl, err := c.raw()
	if err != nil {
		return false, err
	}
	sc := &storagev1.StorageClass{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		if IsNotFound(err) {
			return false, nil
		}
		return false, wrap("get", "StorageClass", "", name, err)
	}
	if strings.Contains(sc.Provisioner, "/") {
		// An in-tree provisioner ("kubernetes.io/..."): a CSI driver's
		// name is a DNS subdomain.
		return false, nil
	}
	return c.exists(ctx, "CSIDriver", "", sc.Provisioner, &storagev1.CSIDriver{})
}

func orZero(q resource.Quantity) resource.Quantity {
	if q.IsZero() {
		return resource.MustParse("0")
	}
	return q
}
