package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WatchKind is a kind of object whose changes a wait can follow.
type WatchKind string

// The kinds the engine waits on.
const (
	WatchJobs        WatchKind = "Job"
	WatchVMIs        WatchKind = "VirtualMachineInstance"
	WatchDataVolumes WatchKind = "DataVolume"
)

var watchGVKs = map[WatchKind]schema.GroupVersionKind{
	WatchJobs:        {Group: "batch", Version: "v1", Kind: "JobList"},
	WatchVMIs:        {Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstanceList"},
	WatchDataVolumes: {Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolumeList"},
}

// WatchNames watches the objects of one kind in a namespace, metadata
// only: each event's object is a *metav1.PartialObjectMetadata (or a
// *metav1.Status for an error event). Changes are hints for a wait to look
// again, never evidence: what an object says is read with the typed Get.
// The watch starts with an ADDED event per existing object, as the API
// server sends them for a watch from no resource version.
func (c *Client) WatchNames(ctx context.Context, kind WatchKind, namespace string) (watch.Interface, error) {
	gvk, ok := watchGVKs[kind]
	if !ok {
		return nil, fmt.Errorf("kube: no watch for kind %q", kind)
	}
	cl, err := c.raw()
	if err != nil {
		return nil, wrap("watch", string(kind), namespace, "", err)
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk)
	w, err := cl.Watch(ctx, list, client.InNamespace(namespace))
	return w, wrap("watch", string(kind), namespace, "", err)
}
