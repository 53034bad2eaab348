package kube

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The typed calls of the objects the migration engine keeps its state in
// (ConfigMaps, Leases, Events) and of those it reads or labels beside the
// VirtualMachines and DataVolumes it makes. Like the other calls of this
// package, each returns its errors as an *Error naming the operation and
// the object, classified once here.

// GetConfigMap reads a ConfigMap. A missing one gives an error for which
// IsNotFound is true.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.get(ctx, "ConfigMap", namespace, name, cm); err != nil {
		return nil, err
	}
	return cm, nil
}

// CreateConfigMap creates cm and updates it with what the server stored.
func (c *Client) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return c.write(ctx, "create", "ConfigMap", cm)
}

// UpdateConfigMap replaces cm. A stale resourceVersion gives a conflict
// (IsConflict).
func (c *Client) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return c.write(ctx, "update", "ConfigMap", cm)
}

// DeleteConfigMap deletes the ConfigMap named by cm's namespace and name;
// deleting one that does not exist succeeds.
func (c *Client) DeleteConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return c.del(ctx, "ConfigMap", cm)
}

// DeleteConfigMapIfUnchanged is DeleteConfigMap for a ConfigMap that is
// still the one cm was read as (the same uid and resourceVersion): one
// changed since gives a conflict (IsConflict).
func (c *Client) DeleteConfigMapIfUnchanged(ctx context.Context, cm *corev1.ConfigMap) error {
	return c.del(ctx, "ConfigMap", cm, unchanged(cm))
}

// ListConfigMaps lists the ConfigMaps of a namespace that carry all the
// given labels.
func (c *Client) ListConfigMaps(ctx context.Context, namespace string, labels map[string]string) ([]corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	if err := c.list(ctx, "ConfigMap", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// GetLease reads a coordination.k8s.io Lease.
func (c *Client) GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := c.get(ctx, "Lease", namespace, name, l); err != nil {
		return nil, err
	}
	return l, nil
}

// CreateLease creates l and updates it with what the server stored. One
// that exists gives an error for which IsAlreadyExists is true.
func (c *Client) CreateLease(ctx context.Context, l *coordinationv1.Lease) error {
	return c.write(ctx, "create", "Lease", l)
}

// UpdateLease replaces l. A stale resourceVersion gives a conflict
// (IsConflict): someone else wrote the Lease since it was read.
func (c *Client) UpdateLease(ctx context.Context, l *coordinationv1.Lease) error {
	return c.write(ctx, "update", "Lease", l)
}

// DeleteLeaseIfUnchanged deletes the Lease l was read as, unless it
// changed since (a conflict) or is gone (success).
func (c *Client) DeleteLeaseIfUnchanged(ctx context.Context, l *coordinationv1.Lease) error {
	return c.del(ctx, "Lease", l, unchanged(l))
}

// ListLeases lists the Leases of a namespace that carry all the given
// labels.
func (c *Client) ListLeases(ctx context.Context, namespace string, labels map[string]string) ([]coordinationv1.Lease, error) {
	var list coordinationv1.LeaseList
	if err := c.list(ctx, "Lease", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// GetPersistentVolumeClaim reads a PersistentVolumeClaim.
func (c *Client) GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.get(ctx, "PersistentVolumeClaim", namespace, name, pvc); err != nil {
		return nil, err
	}
	return pvc, nil
}

// ListDataVolumes lists the DataVolumes of a namespace that carry all the
// given labels.
func (c *Client) ListDataVolumes(ctx context.Context, namespace string, labels map[string]string) ([]cdiv1beta1.DataVolume, error) {
	var list cdiv1beta1.DataVolumeList
	if err := c.list(ctx, "DataVolume", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PatchDataVolumeLabels sets dv's labels to labels by a JSON merge patch
// of the difference from the labels dv was read with; nothing else
// changes. dv is updated with what the server stored.
func (c *Client) PatchDataVolumeLabels(ctx context.Context, dv *cdiv1beta1.DataVolume, labels map[string]string) error {
	return c.patchLabels(ctx, "DataVolume", dv, labels)
}

// PatchVirtualMachineLabels is PatchDataVolumeLabels for a VirtualMachine.
func (c *Client) PatchVirtualMachineLabels(ctx context.Context, vm *kubevirtv1.VirtualMachine, labels map[string]string) error {
	return c.patchLabels(ctx, "VirtualMachine", vm, labels)
}

// CreateEvent records a Kubernetes Event.
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.write(ctx, "create", "Event", ev)
}

// CreateNamespace creates a namespace with the given labels.
func (c *Client) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	return c.write(ctx, "create", "Namespace", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func (c *Client) list(ctx context.Context, kind, namespace string, labels map[string]string, list client.ObjectList) error {
	cl, err := c.raw()
	if err == nil {
		err = cl.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(labels))
	}
	return wrap("list", kind, namespace, "", err)
}

func (c *Client) patchLabels(ctx context.Context, kind string, obj client.Object, labels map[string]string) error {
	cl, err := c.raw()
	if err == nil {
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		obj.SetLabels(labels)
		err = cl.Patch(ctx, obj, patch)
	}
	return wrap("patch", kind, obj.GetNamespace(), obj.GetName(), err)
}

// unchanged is the precondition that obj is still the one it was read as.
func unchanged(obj client.Object) client.Preconditions {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	return client.Preconditions{UID: &uid, ResourceVersion: &rv}
}
