package acctest

import (
	"fmt"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// ESXiPassword is the root password of simulated hosts. Tests assert that
// it never appears in logs.
const ESXiPassword = "Sim-Pa55word!-never-logged"

// ESXiHost is a simulated ESXi host on 127.0.0.1 for one test.
type ESXiHost struct {
	*esxisim.Server
	Root string
}

// NewESXi starts a simulated host with an ECDSA host key and a root
// account; it is closed when the test ends.
func NewESXi(t testing.TB, opts esxisim.Options) *ESXiHost {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.HostKey == nil {
		key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
		if err != nil {
			t.Fatal(err)
		}
		opts.HostKey = key
	}
	if len(opts.Users) == 0 {
		opts.Users = []esxisim.User{{Name: "root", Password: ESXiPassword}}
	}
	s, err := esxisim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &ESXiHost{Server: s, Root: opts.Root}
}

// AddVM adds a VM and fails the test on error.
func (h *ESXiHost) AddVM(t testing.TB, spec esxisim.VMSpec) (int, *esxisim.VMFiles) {
	t.Helper()
	id, files, err := h.Server.AddVM(spec)
	if err != nil {
		t.Fatal(err)
	}
	return id, files
}

// HostBlock is an esxi_host block for the provider that reaches this host
// with the password and the pinned host key.
func (h *ESXiHost) HostBlock(name string) string {
	host, port := splitAddr(h.Addr())
	return fmt.Sprintf(`
  esxi_host {
    name                 = %q
    address              = %q
    port                 = %s
    password             = %q
    host_key_fingerprint = %q
  }
`, name, host, port, ESXiPassword, h.Fingerprint())
}

func splitAddr(addr string) (string, string) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:]
		}
	}
	return addr, "22"
}

// ProviderConfig is a provider block with the given body, for tests that
// serve the provider in process (terraform-plugin-testing addresses it as
// hashicorp/vmmigration, so the configuration names no source).
func ProviderConfig(body string) string {
	return "provider \"vmmigration\" {\n" + body + "\n}\n"
}

// BinaryConfig is ProviderConfig plus the required_providers block a user
// writes, for tests that run the built provider binary (see Workdir).
func BinaryConfig(body string) string {
	return `
terraform {
  required_providers {
    vmmigration = { source = "vmmigration/vmmigration" }
  }
}
` + ProviderConfig(body)
}
