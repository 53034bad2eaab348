package provider_test

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func TestAccESXiVMsSmoke(t *testing.T) {
	acctest.PreCheck(t)
	host := acctest.NewESXi(t, esxisim.Options{})
	host.AddVM(t, esxisim.VMSpec{Name: "web 01 (prod) [eu]", GuestOS: "rhel9-64", CPUs: 2, MemoryMiB: 4096,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Thin: true}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:01:02:03"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.1.2.3"},
		Annotation: "Owner: team-a\n2024 moved\nline three"})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: acctest.ProviderConfig(host.HostBlock("esxi-a")) + `
data "vmmigration_esxi_vms" "all" {
  host = "esxi-a"
}
output "vms" { value = data.vmmigration_esxi_vms.all.vms }
`,
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.#", "1"),
				resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.0.name", "web 01 (prod) [eu]"),
			),
		}},
	})
}
