package provider_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// TestAccSecretsNotLogged runs the built provider under the real Terraform
// CLI with TF_LOG=TRACE, as a user debugging a run would, and checks that no
// secret of the configuration reaches the log, the output, or the host's
// command log (ESXi writes every command line to auth.log).
func TestAccSecretsNotLogged(t *testing.T) {
	host := acctest.NewESXi(t, esxisim.Options{})
	host.AddVM(t, esxisim.VMSpec{Name: "vm-1", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	const token = "kube-token-7f3c9a-never-logged"

	w := acctest.NewWorkdir(t, acctest.BinaryConfig(host.HostBlock("esxi-a")+`
  kubernetes {
    host  = "https://127.0.0.1:1"
    token = "`+token+`"
  }
`)+inventoryDS+`
output "names" {
  value = [for vm in data.vmmigration_esxi_vms.all.vms : vm.name]
}
`)
	logPath := filepath.Join(t.TempDir(), "terraform.log")
	r := w.Run(context.Background(), []string{"TF_LOG=TRACE", "TF_LOG_PATH=" + logPath, "VMMIGRATION_ESXI_PRIVATE_KEY="}, "plan", "-input=false")
	if r.Err != nil {
		t.Fatalf("terraform plan: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, `+ names = [`) || !strings.Contains(r.Stdout, `"vm-1"`) {
		t.Fatalf("plan did not read the inventory:\n%s", r.Stdout)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The log must hold the provider's own trace output, or this test
	// proves nothing.
	for _, want := range []string{"read ESXi inventory", "tf_provider_addr=registry.terraform.io/vmmigration/vmmigration"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the TRACE log lacks %q: the provider's logs were not captured", want)
		}
	}
	if len(host.Commands()) == 0 {
		t.Fatal("the host logged no command: the run never reached it, so the command log proves nothing")
	}
	for _, secret := range []string{acctest.ESXiPassword, token} {
		for what, text := range map[string]string{"log": string(log), "stdout": r.Stdout, "stderr": r.Stderr} {
			if strings.Contains(text, secret) {
				t.Errorf("secret %q appears in the %s", secret, what)
			}
		}
		for _, cmd := range host.Commands() {
			if strings.Contains(cmd, secret) {
				t.Errorf("secret %q sent in a command line: %s", secret, cmd)
			}
		}
	}
}
