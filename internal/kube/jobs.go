package kube

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Jobs of cluster execution, their pods and the migration's Secret.

// GetJob reads a batch/v1 Job.
func (c *Client) GetJob(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	var j batchv1.Job
	if err := c.get(ctx, "Job", namespace, name, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// CreateJob creates j and fills it in with what the server stored.
func (c *Client) CreateJob(ctx context.Context, j *batchv1.Job) error {
	return c.write(ctx, "create", "Job", j)
}

// DeleteJob deletes j (only that object: a precondition on its UID) with
// its pods (background propagation, as kubectl does). A Job already gone
// is success.
func (c *Client) DeleteJob(ctx context.Context, j *batchv1.Job) error {
	return c.del(ctx, "Job", j, client.PropagationPolicy(metav1.DeletePropagationBackground),
		client.Preconditions{UID: &j.UID})
}

// ListPods lists the pods in namespace carrying labels.
func (c *Client) ListPods(ctx context.Context, namespace string, labels map[string]string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.list(ctx, "Pod", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// GetSecret reads a Secret.
func (c *Client) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := c.get(ctx, "Secret", namespace, name, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// CreateSecret creates s and fills it in with what the server stored.
func (c *Client) CreateSecret(ctx context.Context, s *corev1.Secret) error {
	return c.write(ctx, "create", "Secret", s)
}

// UpdateSecret writes s (optimistic concurrency on its resourceVersion).
func (c *Client) UpdateSecret(ctx context.Context, s *corev1.Secret) error {
	return c.write(ctx, "update", "Secret", s)
}

// DeleteSecret deletes s (a precondition on its UID when it has one); a
// Secret already gone is success.
func (c *Client) DeleteSecret(ctx context.Context, s *corev1.Secret) error {
	var opts []client.DeleteOption
	if s.UID != "" {
		opts = append(opts, client.Preconditions{UID: &s.UID})
	}
	return c.del(ctx, "Secret", s, opts...)
}

// ListJobs lists the Jobs in namespace carrying labels.
func (c *Client) ListJobs(ctx context.Context, namespace string, labels map[string]string) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := c.list(ctx, "Job", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PodLogTail reads at most the last lines lines of a container's log, and
// never more than limit bytes, through the API server (pods/log): what a
// runner that cannot reach pod IPs reads of a running worker.
func (c *Client) PodLogTail(ctx context.Context, namespace, pod, container string, lines, limit int) ([]byte, error) {
	return c.podLog(ctx, namespace, pod, container, lines, limit)
}

// ListNodes lists the cluster's Nodes (cluster scope: the runner's
// credentials may not allow it).
func (c *Client) ListNodes(ctx context.Context) ([]corev1.Node, error) {
	var list corev1.NodeList
	if err := c.list(ctx, "Node", "", nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// CreatePersistentVolumeClaim creates pvc and fills it in with what the
// server stored.
func (c *Client) CreatePersistentVolumeClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	return c.write(ctx, "create", "PersistentVolumeClaim", pvc)
}

// ListPersistentVolumeClaims lists the claims in namespace carrying
// labels.
func (c *Client) ListPersistentVolumeClaims(ctx context.Context, namespace string, labels map[string]string) ([]corev1.PersistentVolumeClaim, error) {
	var list corev1.PersistentVolumeClaimList
	if err := c.list(ctx, "PersistentVolumeClaim", namespace, labels, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// DeletePersistentVolumeClaim deletes pvc (only that object: a
// precondition on its UID); a claim already gone is success.
func (c *Client) DeletePersistentVolumeClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	return c.del(ctx, "PersistentVolumeClaim", pvc, client.Preconditions{UID: &pvc.UID})
}

// UpdatePersistentVolumeClaim writes pvc (optimistic concurrency on its
// resourceVersion): a larger request is an expansion, which the claim's
// StorageClass may refuse.
func (c *Client) UpdatePersistentVolumeClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	return c.write(ctx, "update", "PersistentVolumeClaim", pvc)
}
