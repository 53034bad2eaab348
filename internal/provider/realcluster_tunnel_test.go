package provider_test

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// TestAccUploadThroughTheAPIServer migrates a VM through the terraform CLI
// with no transport block into a cluster where nothing exposes CDI's upload
// proxy (CDIConfig publishes no URL): the provider reaches the proxy
// through the API server, a port-forward to the pod behind Service
// cdi/cdi-uploadproxy, with the CA from the cluster's signer bundle, and
// the disk arrives intact through CDI's upload server.
func TestAccUploadThroughTheAPIServer(t *testing.T) {
	e := newMigrationEnvWith(t, func(o *kubesim.Options) { o.NoUploadProxyURL = true })
	_, files := e.addSmallVM(t, "tunnel-a", "00:50:56:00:71:01")
	cfg := acctest.ProviderConfig(e.providerBlock()) + e.hcl(migrationHCL{label: "tunnel-a", cluster: true})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				attrs("vmmigration_migration.tunnel-a", map[string]string{"phase": "Completed", "disks.#": "1"}),
				func(*terraform.State) error {
					if e.sim.UploadProxyPod() == "" || len(e.sim.UploadRequests()) == 0 {
						return fmt.Errorf("the upload proxy's pod %q took no upload", e.sim.UploadProxyPod())
					}
					for i, d := range files.Disks {
						dv := fmt.Sprintf("tunnel-a-disk-%d", i)
						if got, ok := e.sim.ReceivedSHA256(e.namespace, dv); !ok || got != d.SHA256() {
							return fmt.Errorf("%s received %q (%v), want the source's %s", dv, got, ok, d.SHA256())
						}
					}
					return nil
				},
			),
		}},
	})
}
