package provider_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// migrationEnv is everything a migration needs: a simulated ESXi host, the
// shared real API server, simulated KubeVirt and CDI controllers acting in
// one namespace, and a work directory.
type migrationEnv struct {
	host      *acctest.ESXiHost
	cluster   *acctest.Cluster
	sim       *kubesim.Sim
	namespace string
	workDir   string
	kubeBlock string
}

var nsSeq atomic.Int64

func newMigrationEnv(t *testing.T) *migrationEnv {
	t.Helper()
	return newMigrationEnvWith(t)
}

// newMigrationEnvWith is newMigrationEnv with changes to the simulated
// KubeVirt and CDI.
func newMigrationEnvWith(t *testing.T, mods ...func(*kubesim.Options)) *migrationEnv {
	t.Helper()
	acctest.PreCheck(t)
	c, kubeBlock := kubeconfig(t)
	ns := fmt.Sprintf("mig-%d-%d", time.Now().UnixNano()%100000, nsSeq.Add(1))
	c.CreateNamespace(t, ns)
	c.EnsureStorageClass(t, "standard")
	opts := kubesim.Options{Namespaces: []string{ns}, Dir: t.TempDir(),
		Step: 50 * time.Millisecond, AgentDelay: 100 * time.Millisecond}
	for _, m := range mods {
		m(&opts)
	}
	sim := c.StartSim(t, opts)
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
  # The simulated disks hold test data, not an OS to convert.
  conversion = "none"
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
	sel := map[string]string{engine.LabelMigration: name}
	return e.cluster.DataVolumeNames(t, e.namespace, sel), e.cluster.VMNames(t, e.namespace, sel)
}

// count returns how many logged host commands contain s.
func (e *migrationEnv) count(s string) int {
	n := 0
	for _, c := range e.host.Commands() {
		n += strings.Count(c, s)
	}
	return n
}
