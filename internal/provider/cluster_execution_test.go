package provider_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob/convertjobtest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// testWorkerImage is the worker image the provider is configured with;
// the test node runs the worker built from this repository for it.
const testWorkerImage = "registry.example/vmmigration-worker@sha256:89abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234567"

// TestAccClusterExecution migrates a VM with execution = "cluster" and
// conversion = "virt-v2v" through the Terraform CLI, in a cluster with the
// real Job controller, garbage collector, PersistentVolume binder and
// scheduler, and a node that runs the Jobs' worker (with stand-ins for
// virt-v2v's tools: the simulated disks hold no guest): the state holds
// the same evidence as a local migration's plus each disk's copy Job and
// the conversion Job, the claims hold the converted source disks though
// nothing reached the upload proxy or work_dir, and a second plan changes
// nothing.
func TestAccClusterExecution(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	worker, err := testcluster.WorkerBinary()
	if err != nil {
		t.Fatal(err)
	}
	fake, entry, err := convertjobtest.Worker(worker, convertjobtest.Options{})
	if fake != nil {
		t.Cleanup(func() { _ = os.RemoveAll(fake.Dir()) })
	}
	if err != nil {
		t.Fatal(err)
	}
	c, ns, sim := jobsWorld(t, "jobs", entry)
	host := acctest.NewESXi(t, esxisim.Options{ShutdownDelay: 300 * time.Millisecond})
	_, files := host.AddVM(t, esxisim.VMSpec{Name: "jobs", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: 4 * mib, Content: []esxisim.Extent{{Offset: 0, Length: 4 * mib, Seed: 31}}},
			{CapacityBytes: 12 * mib, Thin: true, Controller: "scsi0:1", Content: []esxisim.Extent{{Offset: 5 * mib, Length: 1 * mib, Seed: 32}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.30"}})
	workDir := t.TempDir()

	cfg := acctest.ProviderConfig(fmt.Sprintf("  work_dir = %q\n  worker_image = %q\n", workDir, testWorkerImage)+
		host.HostBlock("esxi-a")+c.KubernetesBlock(t)) + fmt.Sprintf(`
resource "vmmigration_migration" "jobs" {
  source = {
    host    = "esxi-a"
    vm_name = "jobs"
  }
  destination = {
    namespace     = %q
    name          = "jobs"
    storage_class = "claims"
    network_map   = { "VM Network" = "pod" }
  }
  conversion       = "virt-v2v"
  execution        = "cluster"
  power_off_policy = "graceful"
  retry = {
    attempts        = 3
    initial_backoff = "200ms"
    max_backoff     = "1s"
  }
}
`, ns)
	const addr = "vmmigration_migration.jobs"
	want := map[string]string{
		"phase": "Completed", "execution": "cluster", "power_off_action": "graceful", "disks.#": "2",
		"conversion_evidence.tool": "virt-v2v-in-place", "conversion_evidence.os_distro": "debian",
		"conversion_evidence.converted": convertjobtest.Converted, "conversion_evidence.job": "vmmigration-jobs-convert-1",
	}
	converted := make([]string, len(files.Disks))
	for i, d := range files.Disks {
		b, err := os.ReadFile(d.LocalFlat)
		if err != nil {
			t.Fatal(err)
		}
		converted[i] = fmt.Sprintf("%x", diskdigest.Sum(convertjobtest.Apply(b, i)))
		p := fmt.Sprintf("disks.%d.", i)
		want[p+"data_volume"] = fmt.Sprintf("jobs-disk-%d", i)
		want[p+"source_sha256"] = d.SHA256()
		want[p+"artifact_format"] = "raw"
		want[p+"artifact_sha256"] = converted[i]
		want[p+"copy_job"] = fmt.Sprintf("jobs-disk-%d-copy-1", i)
		want[p+"copy_attempt"] = "1"
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(addr, want),
				resource.TestCheckResourceAttrSet(addr, "timestamps.sourcePoweredOff"),
				resource.TestCheckResourceAttrSet(addr, "timestamps.completed"),
				resource.TestCheckResourceAttrSet(addr, "disks.0.data_volume_uid"),
				func(*terraform.State) error {
					for i := range files.Disks {
						got := fileSHA256(t, sim.ReceivedPath(ns, fmt.Sprintf("jobs-disk-%d", i)))
						if got != converted[i] {
							return fmt.Errorf("the claim of jobs-disk-%d holds %s, the converted source %s", i, got, converted[i])
						}
					}
					if n := fake.Runs(t); n != 1 {
						return fmt.Errorf("virt-v2v-in-place ran %d times, want once", n)
					}
					if n := sim.UploadProxyBytes(); n != 0 {
						return fmt.Errorf("%d bytes reached the upload proxy; cluster execution uploads nothing", n)
					}
					if left, _ := os.ReadDir(workDir); len(left) != 0 {
						return fmt.Errorf("work_dir holds %d entries; cluster execution stages nothing on this machine", len(left))
					}
					if n := strings.Count(strings.Join(host.Commands(), "\n"), "power.shutdown"); n != 1 {
						return fmt.Errorf("power.shutdown sent %d times, want once", n)
					}
					return nil
				},
			),
		}, {
			Config:           cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		}},
	})
}

// jobsWorldTurn is held by a test from jobsWorld to its end.
var jobsWorldTurn sync.Mutex

// jobsWorld is what a cluster execution test runs in: the cluster with the
// real controllers, a node running the worker image as entry, a
// namespace named after prefix, the "claims" StorageClass and kubesim
// provisioning its claims.
//
// The tests that call it take turns (jobsWorldTurn): the node registers
// under one name in the shared cluster, and a test's node stopping at its
// end would fail the pods another test's Jobs run there.
func jobsWorld(t *testing.T, prefix, entry string) (*acctest.Cluster, string, *kubesim.Sim) {
	t.Helper()
	jobsWorldTurn.Lock()
	t.Cleanup(jobsWorldTurn.Unlock) // registered first: runs after the node stopped
	c := jobsCluster.Get(t)
	c.StartNode(t, map[string]string{testWorkerImage: entry})
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%100000)
	c.CreateNamespace(t, ns)
	c.EnsureProvisionedStorageClass(t, "claims")
	sim := c.StartSim(t, kubesim.Options{Namespaces: []string{ns}, Dir: t.TempDir(), ProvisionVolumes: true,
		Step: 50 * time.Millisecond, AgentDelay: 100 * time.Millisecond})
	return c, ns, sim
}
