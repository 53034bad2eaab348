package provider_test

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// A wave migrated into a namespace whose StorageClass binds claims on
// first consumer: CDI would keep every DataVolume PendingPopulation (the
// VMs are created Halted, nothing consumes the claims) but for the
// immediate binding the provider's DataVolumes ask for.
func TestAccMigrationWaitForFirstConsumer(t *testing.T) {
	e := newMigrationEnv(t)
	e.cluster.EnsureWaitForFirstConsumerStorageClass(t, "wffc")
	_, a := e.host.AddVM(t, esxisim.VMSpec{Name: "wa", GuestOS: "ubuntu-64", Disks: []esxisim.DiskSpec{{CapacityBytes: 4 * mib}},
		NICs: []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:01:01"}}})
	_, b := e.host.AddVM(t, esxisim.VMSpec{Name: "wb", GuestOS: "ubuntu-64", Disks: []esxisim.DiskSpec{{CapacityBytes: 2 * mib}, {CapacityBytes: 2 * mib, Controller: "scsi0:1"}},
		NICs: []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:01:02"}}})
	cfg := acctest.ProviderConfig(e.providerBlock())
	for _, n := range []string{"wa", "wb"} {
		cfg += e.hcl(migrationHCL{label: n, storageClass: "wffc"})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs("vmmigration_migration.wa", map[string]string{"phase": "Completed", "disks.#": "1"}),
				attrs("vmmigration_migration.wb", map[string]string{"phase": "Completed", "disks.#": "2"}),
				func(*terraform.State) error {
					for name, files := range map[string]*esxisim.VMFiles{"wa": a, "wb": b} {
						for i, d := range files.Disks {
							dv := fmt.Sprintf("%s-disk-%d", name, i)
							if got, ok := e.sim.ReceivedSHA256(e.namespace, dv); !ok || got != d.SHA256() {
								return fmt.Errorf("%s received %q (%v), want the source's %s", dv, got, ok, d.SHA256())
							}
						}
					}
					return nil
				},
			),
		}},
	})
}
