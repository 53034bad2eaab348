package kube

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
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
	// WatchJobPods follows the pods of Jobs: a change is signalled under
	// the name of the pod's Job (WatchedName), so that a wait on a Job
	// wakes when its pod ends, before the Job controller (which batches
	// pod updates) marks the Job.
	WatchJobPods WatchKind = "Pod"
)

var watchGVKs = map[WatchKind]schema.GroupVersionKind{
	WatchJobs:        {Group: "batch", Version: "v1", Kind: "JobList"},
	WatchVMIs:        {Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstanceList"},
	WatchDataVolumes: {Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolumeList"},
	WatchJobPods:     {Group: "", Version: "v1", Kind: "PodList"},
}

// WatchedName is the name a change of m, seen by a watch of kind, is
// signalled under: the object's own, or for a pod its Job's ("" for a pod
// of no Job).
func WatchedName(kind WatchKind, m *metav1.PartialObjectMetadata) string {
	if kind != WatchJobPods {
		return m.Name
	}
	if j := m.Labels[batchv1.JobNameLabel]; j != "" {
		return j
	}
	// The Job controller also sets the older label (kubernetes
	// pkg/apis/batch LegacyJobNameLabel).
	return m.Labels["job-name"]
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
