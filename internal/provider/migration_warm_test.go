package provider_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// TestAccMigrationWarm migrates a running VM with mode = "warm" and two
// precopy rounds through the Terraform CLI: it completes with the source's
// content at the destination, two snapshots taken and both removed (the
// source runs on its base again), and the migration imports back with
// the same mode and rounds.
func TestAccMigrationWarm(t *testing.T) {
	e := newMigrationEnv(t)
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "warmweb", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 * mib, Thin: true, Content: []esxisim.Extent{{Offset: 0, Length: 1 * mib, Seed: 3}, {Offset: 5 * mib, Length: 256 << 10, Seed: 4}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:40:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.40"}})
	const addr = "vmmigration_migration.warmweb"
	cfg := acctest.ProviderConfig(e.providerBlock()) + e.migration("warmweb", "warmweb", `{ "VM Network" = "pod" }`, `
  mode             = "warm"
  precopy_rounds   = 2
  power_off_policy = "graceful"`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					attrs(addr, map[string]string{
						"phase": "Completed", "mode": "warm", "precopy_rounds": "2", "power_off_action": "graceful",
						"disks.0.source_sha256": files.Disks[0].SHA256(),
					}),
					resource.TestCheckResourceAttrSet(addr, "downtime"),
					func(*terraform.State) error {
						if got, ok := e.sim.ReceivedSHA256(e.namespace, "warmweb-disk-0"); !ok || got != files.Disks[0].SHA256() {
							return fmt.Errorf("the DataVolume received %q (%v), want the source's %s", got, ok, files.Disks[0].SHA256())
						}
						var creates, removes int
						for _, c := range e.host.Commands() {
							creates += strings.Count(c, "vim-cmd vmsvc/snapshot.create ")
							removes += strings.Count(c, "vim-cmd vmsvc/snapshot.remove ")
						}
						if creates != 2 || removes != 2 {
							return fmt.Errorf("%d snapshot.create and %d snapshot.remove commands, want 2 and 2", creates, removes)
						}
						vmx, err := os.ReadFile(filepath.Join(files.LocalDir, "warmweb.vmx"))
						if err != nil || !strings.Contains(string(vmx), `fileName = "warmweb.vmdk"`) {
							return fmt.Errorf("the source does not run on its base again (%v):\n%s", err, vmx)
						}
						if ms, _ := filepath.Glob(filepath.Join(files.LocalDir, "warmweb-00000*")); len(ms) != 0 {
							return fmt.Errorf("delta files left on the source: %v", ms)
						}
						rec := e.records(t)["warmweb"]
						if rec.Warm == nil || len(rec.Warm.Snapshots) != 2 || !rec.Warm.Snapshots[1].Removed || rec.Warm.CutoverBytes <= 0 || rec.Warm.CutoverBytes >= 8*mib {
							return fmt.Errorf("warm evidence %+v", rec.Warm)
						}
						return nil
					},
				),
			},
			{Config: cfg, ResourceName: addr, ImportState: true, ImportStateVerify: true},
		},
	})
}
