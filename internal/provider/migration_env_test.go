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
	return e.hcl(migrationHCL{label: label, vm: vmName, networkMap: networkMap, retries: attempts, body: extra})
}

// migrationHCL is one vmmigration_migration block of a test's
// configuration; the acceptance tests write every migration with it.
type migrationHCL struct {
	// label names the resource, and the source VM and the migrated VM
	// unless vm and name say otherwise.
	label, vm, name string
	// namespace and storageClass default to the environment's namespace
	// and "standard"; networkMap (an HCL map) to the VM Network on the pod
	// network.
	namespace, storageClass, networkMap string
	// dest is more lines of the destination block.
	dest string
	// cluster leaves the transport block out: the upload proxy's URL, CA
	// and route are found in the cluster. Else the transport names the
	// simulated proxy's URL, CA and the server name its certificate holds.
	cluster bool
	// conversion defaults to "none" (the simulated disks hold test data,
	// not an OS to convert); "-" leaves it to the provider's default.
	conversion string
	// retries, when not 0, is a retry budget of that many tries with short
	// waits.
	retries int
	// body is more lines of the resource.
	body string
}

func (e *migrationEnv) hcl(m migrationHCL) string {
	if m.vm == "" {
		m.vm = m.label
	}
	if m.name == "" {
		m.name = m.label
	}
	if m.namespace == "" {
		m.namespace = e.namespace
	}
	if m.storageClass == "" {
		m.storageClass = "standard"
	}
	if m.networkMap == "" {
		m.networkMap = `{ "VM Network" = "pod" }`
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
resource "vmmigration_migration" %q {
  source = {
    host    = "esxi-a"
    vm_name = %q
  }
  destination = {
    namespace     = %q
    name          = %q
    storage_class = %q
    network_map   = %s
%s  }
`, m.label, m.vm, m.namespace, m.name, m.storageClass, m.networkMap, m.dest)
	if !m.cluster {
		fmt.Fprintf(&b, `  transport = {
    upload_proxy_url            = %q
    upload_proxy_ca_certificate = %q
    upload_proxy_server_name    = %q
  }
`, e.sim.UploadProxyURL(), string(e.sim.UploadProxyCACertPEM()), e.sim.UploadProxyServerName())
	}
	switch m.conversion {
	case "":
		b.WriteString("  conversion = \"none\"\n")
	case "-":
	default:
		fmt.Fprintf(&b, "  conversion = %q\n", m.conversion)
	}
	if m.retries > 0 {
		fmt.Fprintf(&b, `  retry = {
    attempts        = %d
    initial_backoff = "200ms"
    max_backoff     = "1s"
  }
`, m.retries)
	}
	b.WriteString(m.body)
	if m.body != "" && !strings.HasSuffix(m.body, "\n") {
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.String()
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
