package provider_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// errRE matches a message however Terraform wraps its lines.
func errRE(msg string) *regexp.Regexp {
	words := strings.Fields(msg)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return regexp.MustCompile(strings.Join(words, `\s+`))
}

const inventoryDS = `
data "vmmigration_esxi_vms" "all" {
  host = "esxi-a"
}
`

func TestAccProviderConfigInvalid(t *testing.T) {
	acctest.PreCheck(t)
	tests := []struct {
		name   string
		config string
		err    string
	}{
		{
			name: "no credentials",
			config: `
  esxi_host {
    name                 = "esxi-a"
    address              = "127.0.0.1"
    host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
  }`,
			err: `ESXi host "esxi-a" has neither a password nor a private key. Set password (answered to the keyboard-interactive prompt) or private_key, or export $VMMIGRATION_ESXI_PASSWORD or $VMMIGRATION_ESXI_PRIVATE_KEY.`,
		},
		{
			name: "no host key verification",
			config: `
  esxi_host {
    name     = "esxi-a"
    address  = "127.0.0.1"
    password = "x"
  }`,
			err: "ESXi host \"esxi-a\" has no way to verify its SSH host key. Set host_key_fingerprint (run `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host) or known_hosts_file, or export $VMMIGRATION_ESXI_KNOWN_HOSTS. Only for a throw-away lab, set insecure_ignore_host_key = true.",
		},
		{
			name: "malformed fingerprint",
			config: `
  esxi_host {
    name                 = "esxi-a"
    address              = "127.0.0.1"
    password             = "x"
    host_key_fingerprint = "MD5:aa:bb"
  }`,
			err: `Attribute esxi_host[0].host_key_fingerprint must be 'SHA256:' followed by 43 base64 characters, as printed by ssh-keygen -l, got: MD5:aa:bb`,
		},
		{
			name: "fingerprint and insecure",
			config: `
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.1"
    password                 = "x"
    host_key_fingerprint     = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
    insecure_ignore_host_key = true
  }`,
			err: `ESXi host "esxi-a" sets more than one of host_key_fingerprint, known_hosts_file and insecure_ignore_host_key. Choose one.`,
		},
		{
			name: "bad host name",
			config: `
  esxi_host {
    name                     = "ESXi A"
    address                  = "127.0.0.1"
    password                 = "x"
    insecure_ignore_host_key = true
  }`,
			err: `Attribute esxi_host[0].name must be lower-case letters, digits, '-' or '_', starting and ending with a letter or digit, at most 63 characters, got: ESXi A`,
		},
		{
			name: "port out of range",
			config: `
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.1"
    port                     = 70000
    password                 = "x"
    insecure_ignore_host_key = true
  }`,
			err: `Attribute esxi_host[0].port value must be between 1 and 65535, got: 70000`,
		},
		{
			name: "duplicate host names",
			config: `
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.1"
    password                 = "x"
    insecure_ignore_host_key = true
  }
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.2"
    password                 = "x"
    insecure_ignore_host_key = true
  }`,
			err: `esxi_host blocks 1 and 2 are both named "esxi-a". Resources and data sources refer to hosts by name, so each name must be unique.`,
		},
		{
			name: "encrypted private key",
			config: fmt.Sprintf(`
  esxi_host {
    name                 = "esxi-a"
    address              = "127.0.0.1"
    private_key          = %q
    host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
  }`, encryptedKey(t)),
			err: `The private key of ESXi host "esxi-a" is encrypted with a passphrase, which the provider cannot prompt for.`,
		},
		{
			name: "token without host",
			config: `
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.1"
    password                 = "x"
    insecure_ignore_host_key = true
  }
  kubernetes {
    token = "abc"
  }`,
			err: `kubernetes.host must be set when token is set without config_path or config_paths`,
		},
		{
			name: "two kubernetes blocks",
			config: `
  esxi_host {
    name                     = "esxi-a"
    address                  = "127.0.0.1"
    password                 = "x"
    insecure_ignore_host_key = true
  }
  kubernetes {
    config_path = "/a"
  }
  kubernetes {
    config_path = "/b"
  }`,
			err: `Attribute kubernetes list must contain at most 1 elements, got: 2`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: acctest.ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      acctest.ProviderConfig(tt.config) + inventoryDS,
					ExpectError: errRE(tt.err),
				}},
			})
		})
	}
}

func encryptedKey(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(k, "", []byte("passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block))
}

// TestAccProviderConfigValid logs in with each supported combination.
func TestAccProviderConfigValid(t *testing.T) {
	acctest.PreCheck(t)
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(block))
	host := acctest.NewESXi(t, esxisim.Options{Users: []esxisim.User{
		{Name: "root", Password: acctest.ESXiPassword},
		{Name: "migrator", AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}},
	}})
	host.AddVM(t, esxisim.VMSpec{Name: "vm-1", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	addr, port := splitHostPort(host.Addr())
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	line := fmt.Sprintf("[%s]:%s %s", addr, port, ssh.MarshalAuthorizedKey(host.HostKey()))
	if err := os.WriteFile(knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		config string
		env    map[string]string
	}{
		{name: "password and pinned fingerprint", config: host.HostBlock("esxi-a")},
		{name: "private key and known_hosts", config: fmt.Sprintf(`
  esxi_host {
    name             = "esxi-a"
    address          = %q
    port             = %s
    user             = "migrator"
    private_key      = %q
    known_hosts_file = %q
  }`, addr, port, keyPEM, knownHosts)},
		{name: "credentials and known_hosts from the environment", config: fmt.Sprintf(`
  esxi_host {
    name    = "esxi-a"
    address = %q
    port    = %s
  }`, addr, port), env: map[string]string{
			"VMMIGRATION_ESXI_PASSWORD":    acctest.ESXiPassword,
			"VMMIGRATION_ESXI_KNOWN_HOSTS": knownHosts,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: acctest.ProviderFactories,
				Steps: []resource.TestStep{{
					Config: acctest.ProviderConfig(tt.config) + inventoryDS,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.#", "1"),
						resource.TestCheckResourceAttr("data.vmmigration_esxi_vms.all", "vms.0.name", "vm-1"),
					),
				}},
			})
		})
	}
}

func splitHostPort(addr string) (string, string) {
	i := strings.LastIndex(addr, ":")
	return addr[:i], addr[i+1:]
}
