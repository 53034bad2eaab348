package provider_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// TestAccClusterWarmOnSnapshots migrates, through the Terraform CLI, a
// running VM that already runs on its owner's snapshot with mode = "warm"
// and execution = "cluster" into a Block-mode claim: two precopy rounds
// and the cutover each run a copy Job (attempts 1 to 3) that flattens the
// chain on the claim's device, keeping its journal and the deltas' copies
// in the disk's journal claim, which is gone at the end; the device is
// exactly the disk and holds what the guest sees, the state has every chain file's
// SHA-256 and the warm evidence as a local migration has them, the
// migration's snapshots are gone and the owner's kept, and a second plan
// changes nothing.
func TestAccClusterWarmOnSnapshots(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	worker, err := testcluster.WorkerBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, ns, sim := jobsWorld(t, "jobs-warm", worker)
	host := acctest.NewESXi(t, esxisim.Options{ShutdownDelay: 300 * time.Millisecond})
	_, files := host.AddVM(t, esxisim.VMSpec{Name: "jw", GuestOS: "rhel9-64", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 * mib, Thin: true, Content: []esxisim.Extent{{Offset: 1 * mib, Length: 2 * mib, Seed: 41}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.31"}})
	cfg := acctest.ProviderConfig(fmt.Sprintf("  work_dir = %q\n  worker_image = %q\n", t.TempDir(), testWorkerImage)+
		host.HostBlock("esxi-a")+c.KubernetesBlock(t)) + fmt.Sprintf(`
resource "vmmigration_migration" "jw" {
  source = {
    host    = "esxi-a"
    vm_name = "jw"
  }
  destination = {
    namespace     = %q
    name          = "jw"
    storage_class = "claims"
    volume_mode   = "Block"
    network_map   = { "VM Network" = "pod" }
  }
  mode               = "warm"
  precopy_rounds     = 2
  precopy_stop_bytes = 0
  conversion         = "none"
  execution          = "cluster"
  power_off_policy   = "graceful"
  retry = {
    attempts        = 3
    initial_backoff = "200ms"
    max_backoff     = "1s"
  }
}
`, ns)
	const addr = "vmmigration_migration.jw"
	want := files.Disks[0].SHA256()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs(addr, map[string]string{"phase": "Completed", "execution": "cluster", "mode": "warm",
					"disks.0.source_sha256": want, "disks.0.copy_attempt": "3", "disks.0.copy_job": "jw-disk-0-copy-3",
					// Round 2's snapshot on the round 1 one on the owner's:
					// four links, each a descriptor and an extent.
					"disks.0.chain.#": "8"}),
				resource.TestCheckResourceAttrSet(addr, "timestamps.sourcePoweredOff"),
				func(s *terraform.State) error {
					attrs := s.RootModule().Resources[addr].Primary.Attributes
					for k := range 8 {
						p := fmt.Sprintf("disks.0.chain.%d.", k)
						if attrs[p+"kind"] == "extent" && len(attrs[p+"sha256"]) != 64 {
							return fmt.Errorf("chain file %s (%s) has no SHA-256 in state", attrs[p+"source_path"], attrs[p+"format"])
						}
					}
					if got := fileSHA256(t, sim.ReceivedPath(ns, "jw-disk-0")); got != want {
						return fmt.Errorf("the claim holds %s, the guest sees %s", got, want)
					}
					if fi, err := os.Stat(sim.ReceivedPath(ns, "jw-disk-0")); err != nil || fi.Size() != 8*mib {
						return fmt.Errorf("the claim's device: %v (%v), want exactly the disk's %d bytes", fi, err, 8*mib)
					}
					for _, pvc := range c.PersistentVolumeClaims(t, ns) {
						if pvc.Name == "jw-disk-0-journal" && pvc.DeletionTimestamp == nil {
							return fmt.Errorf("the journal claim %s outlived the migration", pvc.Name)
						}
					}
					cmds := strings.Join(host.Commands(), "\n")
					if n := strings.Count(cmds, "snapshot.create"); n != 2 {
						return fmt.Errorf("%d snapshots taken, want 2 (one per round)", n)
					}
					if n := strings.Count(cmds, "snapshot.remove"); n != 2 {
						return fmt.Errorf("%d snapshots removed, want the migration's 2 (the owner's kept)", n)
					}
					if n := strings.Count(cmds, "power.shutdown"); n != 1 {
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
