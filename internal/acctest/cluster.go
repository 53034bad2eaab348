package acctest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// The acceptance tests of the provider speak Terraform. What they set up in
// the real test cluster, and what they read back from it, goes through
// Cluster, whose methods take and return plain Go values: names, labels and
// the small structs below. Every method fails the test on an error.

// KubeContext is the kubeconfig context that names the test cluster.
const KubeContext = testcluster.ContextName

// SharedCluster is one real kube-apiserver and etcd shared by the tests of
// a package, started on first use and stopped by Main:
//
//	var cluster acctest.SharedCluster
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }
type SharedCluster struct {
	shared testcluster.Shared
}

// Main runs the tests, then stops the cluster; it returns the exit code.
func (s *SharedCluster) Main(m *testing.M) int { return s.shared.Main(m) }

// Get returns the shared cluster, starting it on first use.
func (s *SharedCluster) Get(t testing.TB) *Cluster {
	t.Helper()
	tc := s.shared.Get(t)
	return &Cluster{tc: tc, cl: tc.AdminClient()}
}

// Cluster is the test cluster, reached with administrator rights.
type Cluster struct {
	tc *testcluster.Cluster
	cl client.Client
}

// WriteKubeconfig writes a kubeconfig for the cluster (context
// KubeContext) into a temporary directory of the test and returns its path.
func (c *Cluster) WriteKubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.tc.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// KubernetesBlock is a kubernetes block of the provider configuration that
// reaches the cluster through a fresh kubeconfig.
func (c *Cluster) KubernetesBlock(t testing.TB) string {
	t.Helper()
	return `
  kubernetes {
    config_path    = "` + c.WriteKubeconfig(t) + `"
    config_context = "` + KubeContext + `"
  }
`
}

// StartSim starts the simulated KubeVirt and CDI controllers on the
// cluster (opts.Cluster is set here); they stop when the test ends.
func (c *Cluster) StartSim(t testing.TB, opts kubesim.Options) *kubesim.Sim {
	t.Helper()
	opts.Cluster = c.tc
	sim, err := kubesim.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Stop() })
	return sim
}

// CreateNamespace creates a namespace.
func (c *Cluster) CreateNamespace(t testing.TB, name string) {
	t.Helper()
	if err := c.cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create Namespace %s: %v", name, err)
	}
}

// EnsureStorageClass creates a StorageClass unless one of that name exists
// (tests sharing the cluster may have made it).
func (c *Cluster) EnsureStorageClass(t testing.TB, name string) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "kubevirt.io.hostpath-provisioner"}
	if err := c.cl.Create(t.Context(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create StorageClass %s: %v", name, err)
	}
}

// EnsureWaitForFirstConsumerStorageClass is EnsureStorageClass for a
// StorageClass that binds claims on first consumer, as many CSI drivers'
// classes do. Its provisioner, <name>.csi.vmmigration.test, is a CSI
// driver (a CSIDriver of that name is made too), so that CDI fills its
// claims through populators, as CDI's released configuration does.
func (c *Cluster) EnsureWaitForFirstConsumerStorageClass(t testing.TB, name string) {
	t.Helper()
	driver := name + ".csi.vmmigration.test"
	if err := c.cl.Create(t.Context(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CSIDriver %s: %v", driver, err)
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver, VolumeBindingMode: &mode}
	if err := c.cl.Create(t.Context(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create StorageClass %s: %v", name, err)
	}
}

// CreateStorageQuota creates a ResourceQuota limiting requests.storage to
// hard, and records used as already consumed in its status (no quota
// controller runs in the test cluster). Quantities are Kubernetes
// quantities such as "100Mi".
func (c *Cluster) CreateStorageQuota(t testing.TB, namespace, name, hard, used string) {
	t.Helper()
	hq, err := resource.ParseQuantity(hard)
	if err != nil {
		t.Fatal(err)
	}
	uq, err := resource.ParseQuantity(used)
	if err != nil {
		t.Fatal(err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: hq}}}
	if err := c.cl.Create(t.Context(), q); err != nil {
		t.Fatalf("create ResourceQuota %s/%s: %v", namespace, name, err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsStorage: uq}}
	if err := c.cl.Status().Update(t.Context(), q); err != nil {
		t.Fatalf("update status of ResourceQuota %s/%s: %v", namespace, name, err)
	}
}

// Checkpoint is a migration's checkpoint ConfigMap: the record it holds
// and the annotations a human may have put on it.
type Checkpoint struct {
	Record      record.Record
	Annotations map[string]string
}

func (c *Cluster) recordMap(t testing.TB, namespace, name string) (*corev1.ConfigMap, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: coord.RecordName(name)}, cm)
	return cm, err
}

func decodeRecord(t testing.TB, cm *corev1.ConfigMap) record.Record {
	t.Helper()
	var rec record.Record
	if err := json.Unmarshal([]byte(cm.Data[coord.RecordKey]), &rec); err != nil {
		t.Fatalf("ConfigMap %s/%s: %s is not a record: %v", cm.Namespace, cm.Name, coord.RecordKey, err)
	}
	return rec
}

// Record reads the checkpoint ConfigMap of migration name (destination
// name) in namespace; it fails the test when there is none.
func (c *Cluster) Record(t testing.TB, namespace, name string) Checkpoint {
	t.Helper()
	cm, err := c.recordMap(t, namespace, name)
	if err != nil {
		t.Fatalf("checkpoint ConfigMap %s/%s: %v", namespace, coord.RecordName(name), err)
	}
	return Checkpoint{Record: decodeRecord(t, cm), Annotations: cm.Annotations}
}

// HasRecord reports whether migration name has a checkpoint ConfigMap; any
// error other than "not found" fails the test.
func (c *Cluster) HasRecord(t testing.TB, namespace, name string) bool {
	t.Helper()
	_, err := c.recordMap(t, namespace, name)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("checkpoint ConfigMap %s/%s: %v", namespace, coord.RecordName(name), err)
	}
	return true
}

// AnnotateRecord sets an annotation on migration name's checkpoint
// ConfigMap, as `kubectl annotate configmap` does.
func (c *Cluster) AnnotateRecord(t testing.TB, namespace, name, key, value string) {
	t.Helper()
	cm, err := c.recordMap(t, namespace, name)
	if err != nil {
		t.Fatalf("checkpoint ConfigMap %s/%s: %v", namespace, coord.RecordName(name), err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[key] = value
	if err := c.cl.Update(t.Context(), cm); err != nil {
		t.Fatalf("annotating ConfigMap %s/%s: %v", namespace, cm.Name, err)
	}
}

// RewindRecord sets migration name's checkpoint back to phase, as an
// apply that was killed after acting in phase but before recording it
// leaves it.
func (c *Cluster) RewindRecord(t testing.TB, namespace, name string, phase record.Phase) {
	t.Helper()
	cm, err := c.recordMap(t, namespace, name)
	if err != nil {
		t.Fatalf("checkpoint ConfigMap %s/%s: %v", namespace, coord.RecordName(name), err)
	}
	rec := decodeRecord(t, cm)
	rec.Phase = phase
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[coord.RecordKey] = string(b)
	if err := c.cl.Update(t.Context(), cm); err != nil {
		t.Fatalf("rewinding ConfigMap %s/%s: %v", namespace, cm.Name, err)
	}
}

// StopAPIServer stops the cluster's kube-apiserver (etcd keeps the data):
// an outage of the destination cluster. StartAPIServer ends it.
func (c *Cluster) StopAPIServer() { c.tc.StopAPIServer() }

// StartAPIServer starts the kube-apiserver again after StopAPIServer and
// waits until it serves. It returns an error rather than failing a test,
// so that it can run beside one.
func (c *Cluster) StartAPIServer(ctx context.Context) error { return c.tc.StartAPIServer(ctx) }

// ExpireLease makes the Lease of migration namespace/name look as if its
// holder stopped renewing it long ago, as it would after a killed run once
// the lease duration has passed, without the test waiting that long. A
// missing Lease is left alone.
func (c *Cluster) ExpireLease(t testing.TB, namespace, name string) {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: coord.RecordName(name)}, l)
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	past := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	l.Spec.RenewTime, l.Spec.AcquireTime = &past, &past
	if err := c.cl.Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
}

// RecordText is the stored text of migration namespace/name's record
// ConfigMap: its data and annotations, as an editor of the cluster sees it.
func (c *Cluster) RecordText(t testing.TB, namespace, name string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: coord.RecordName(name)}, cm); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for k, v := range cm.Data {
		b.WriteString(k + ": " + v + "\n")
	}
	for k, v := range cm.Annotations {
		b.WriteString(k + ": " + v + "\n")
	}
	return b.String()
}

// EventMessages returns the reason and message of every Event in namespace.
func (c *Cluster) EventMessages(t testing.TB, namespace string) []string {
	t.Helper()
	var evs corev1.EventList
	if err := c.cl.List(t.Context(), &evs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(evs.Items))
	for _, ev := range evs.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

// Records returns the migration records of a namespace (the ConfigMaps
// carrying the migration label), by destination name.
func (c *Cluster) Records(t testing.TB, namespace string) map[string]record.Record {
	t.Helper()
	var cms corev1.ConfigMapList
	if err := c.cl.List(t.Context(), &cms, client.InNamespace(namespace), client.HasLabels{engine.LabelMigration}); err != nil {
		t.Fatal(err)
	}
	out := map[string]record.Record{}
	for i := range cms.Items {
		rec := decodeRecord(t, &cms.Items[i])
		out[rec.Identity.Name] = rec
	}
	return out
}
