package acctest

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
)

// What cluster execution needs in a test cluster: the real Job
// controller, garbage collector, PersistentVolume binder and scheduler
// (RunControllers), a node that runs the copy Jobs' pods (StartNode, with
// the worker testcluster.WorkerBinary builds), and claims that bind to folders on this
// machine (EnsureProvisionedStorageClass, with kubesim's ProvisionVolumes).

// RunControllers makes the shared cluster run the real
// kube-controller-manager and kube-scheduler. Call it before the first
// Get (TestMain is the place).
func (s *SharedCluster) RunControllers() { s.shared.Options.Controllers = true }

// Stop stops the shared cluster if it was started (Main does so for the
// cluster it runs the tests with; a second one is stopped here).
func (s *SharedCluster) Stop() error { return s.shared.Stop() }

// StartNode starts a simulated kubelet (podrun) on the cluster that runs
// the pods the scheduler binds to it, each image as the local program
// images maps it to. It stops when the test ends.
func (c *Cluster) StartNode(t testing.TB, images map[string]string) *podrun.Runner {
	t.Helper()
	r, err := podrun.Start(t.Context(), podrun.Options{Config: c.tc.RESTConfig(), Images: images})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	return r
}

// EnsureProvisionedStorageClass makes StorageClass name, whose claims
// kubesim provisions as folders on this machine (kubesim Options
// ProvisionVolumes), unless it exists.
func (c *Cluster) EnsureProvisionedStorageClass(t testing.TB, name string) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: kubesim.Provisioner}
	if err := c.cl.Create(t.Context(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create StorageClass %s: %v", name, err)
	}
}

// Jobs lists the Jobs in namespace.
func (c *Cluster) Jobs(t testing.TB, namespace string) []batchv1.Job {
	t.Helper()
	var l batchv1.JobList
	if err := c.cl.List(t.Context(), &l, client.InNamespace(namespace)); err != nil {
		t.Fatalf("listing Jobs in %s: %v", namespace, err)
	}
	return l.Items
}

// PersistentVolumeClaims lists the claims in namespace.
func (c *Cluster) PersistentVolumeClaims(t testing.TB, namespace string) []corev1.PersistentVolumeClaim {
	t.Helper()
	var l corev1.PersistentVolumeClaimList
	if err := c.cl.List(t.Context(), &l, client.InNamespace(namespace)); err != nil {
		t.Fatalf("listing claims in %s: %v", namespace, err)
	}
	return l.Items
}
