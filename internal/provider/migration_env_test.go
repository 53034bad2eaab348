package provider_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// migrationEnv is everything a migration needs: a simulated ESXi host, the
// shared real API server, simulated KubeVirt and CDI controllers acting in
// one namespace, and a work directory.
type migrationEnv struct {
	host      *acctest.ESXiHost
	cluster   *testcluster.Cluster
	sim       *kubesim.Sim
	namespace string
	workDir   string
	kubeBlock string
}

var nsSeq atomic.Int64

func newMigrationEnv(t *testing.T) *migrationEnv {
	t.Helper()
	acctest.PreCheck(t)
	c, kubeBlock := kubeconfig(t)
	ns := fmt.Sprintf("mig-%d-%d", time.Now().UnixNano()%100000, nsSeq.Add(1))
	cl := c.AdminClient()
	ctx := t.Context()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "kubevirt.io.hostpath-provisioner"}
	if err := cl.Create(ctx, sc); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	sim, err := kubesim.Start(ctx, kubesim.Options{Cluster: c, Namespaces: []string{ns}, Dir: t.TempDir(),
		Step: 50 * time.Millisecond, AgentDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Stop() })
	return &migrationEnv{
		host:      acctest.NewESXi(t, esxisim.Options{ShutdownDelay: 300 * time.Millisecond}),
		cluster:   c,
		sim:       sim,
		namespace: ns,
		workDir:   t.TempDir(),
		kubeBlock: kubeBlock,
	}
}

// providerBlock is the provider configuration for this environment.
func (e *migrationEnv) providerBlock() string {
	return fmt.Sprintf("  work_dir = %q\n", e.workDir) + e.host.HostBlock("esxi-a") + e.kubeBlock
}

// migration renders a vmmigration_migration for one source VM with the
// environment's transport and fast retries; extra is added to its body.
func (e *migrationEnv) migration(label, vmName, networkMap, extra string) string {
	return e.migrationWithRetries(label, vmName, networkMap, 3, extra)
}

// migrationWithRetries is migration with a retry budget of attempts tries.
func (e *migrationEnv) migrationWithRetries(label, vmName, networkMap string, attempts int, extra string) string {
	return fmt.Sprintf(`
resource "vmmigration_migration" %q {
  source = {
    host    = "esxi-a"
    vm_name = %q
  }
  destination = {
    namespace     = %q
    name          = %q
    storage_class = "standard"
    network_map   = %s
  }
  transport = {
    upload_proxy_url            = %q
    upload_proxy_ca_certificate = %q
  }
  retry = {
    attempts        = %d
    initial_backoff = "200ms"
    max_backoff     = "1s"
  }
%s
}
`, label, vmName, e.namespace, label, networkMap, e.sim.UploadProxyURL(), string(e.sim.UploadProxyCACertPEM()), attempts, extra)
}

// ours lists the DataVolumes and VirtualMachines labelled as a migration's.
func (e *migrationEnv) ours(t *testing.T, name string) (dvs []string, vms []string) {
	t.Helper()
	cl := e.cluster.AdminClient()
	sel := client.MatchingLabels{kube.LabelMigration: name}
	var dvl cdiv1beta1.DataVolumeList
	if err := cl.List(t.Context(), &dvl, client.InNamespace(e.namespace), sel); err != nil {
		t.Fatal(err)
	}
	for _, d := range dvl.Items {
		dvs = append(dvs, d.Name)
	}
	var vml kubevirtv1.VirtualMachineList
	if err := cl.List(t.Context(), &vml, client.InNamespace(e.namespace), sel); err != nil {
		t.Fatal(err)
	}
	for _, v := range vml.Items {
		vms = append(vms, v.Name)
	}
	return dvs, vms
}

// count returns how many logged host commands contain s.
func (e *migrationEnv) count(s string) int {
	n := 0
	for _, c := range e.host.Commands() {
		n += strings.Count(c, s)
	}
	return n
}

func keyOf(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}
