package provider_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// TestAccSecretsNotLoggedDuringMigration applies a whole migration with the
// built provider under TF_LOG=TRACE, with an ESXi password and a private
// key, and CDI upload tokens handed out on the way, then looks for each
// secret everywhere a run leaves text: the TRACE log, Terraform's output,
// the state, the record ConfigMap, the Events, and the host's command log
// (ESXi writes every command line to auth.log).
func TestAccSecretsNotLoggedDuringMigration(t *testing.T) {
	e := newMigrationEnv(t)
	// A host that accepts the key and the password.
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	pub, err := ssh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	e.host = acctest.NewESXi(t, esxisim.Options{ShutdownDelay: 300 * time.Millisecond,
		Users: []esxisim.User{{Name: "root", Password: acctest.ESXiPassword, AuthorizedKeys: []ssh.PublicKey{pub}}}})
	e.addGuestVM(t, "secret-vm", "00:50:56:00:71:01", mib)
	keyFile := filepath.Join(t.TempDir(), "esxi_ecdsa")
	if err := os.WriteFile(keyFile, []byte(keyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	hostBlock := strings.Replace(e.host.HostBlock("esxi-a"), "    password ", fmt.Sprintf("    private_key = file(%q)\n    password ", keyFile), 1)
	provider := fmt.Sprintf("  work_dir = %q\n", e.workDir) + hostBlock + e.kubeBlock
	w := acctest.NewWorkdir(t, acctest.BinaryConfig(provider)+e.migration("m", "secret-vm", `{ "VM Network" = "pod" }`, ""))

	logPath := filepath.Join(t.TempDir(), "terraform.log")
	r := w.Run(context.Background(), []string{"TF_LOG=TRACE", "TF_LOG_PATH=" + logPath}, "apply", "-auto-approve", "-input=false")
	if r.Err != nil {
		t.Fatalf("terraform apply: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	tokens := e.sim.IssuedUploadTokens()
	if len(tokens) == 0 {
		t.Fatal("no upload token was issued: the migration never uploaded, so this test proves nothing about tokens")
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(w.Dir, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(state), `"phase": "Completed"`) || !strings.Contains(string(log), "tf_provider_addr=registry.terraform.io/vmmigration/vmmigration") {
		t.Fatal("the state or the TRACE log lacks the migration: nothing here would show a leak")
	}
	commands := strings.Join(e.host.Commands(), "\n")
	if commands == "" {
		t.Fatal("the host logged no command")
	}
	places := map[string]string{
		"TRACE log":        string(log),
		"stdout":           r.Stdout,
		"stderr":           r.Stderr,
		"state":            string(state),
		"record ConfigMap": e.cluster.RecordText(t, e.namespace, "m"),
		"Events":           strings.Join(e.cluster.EventMessages(t, e.namespace), "\n"),
		"host command log": commands,
	}
	secrets := map[string]string{"ESXi password": acctest.ESXiPassword}
	// Every line of the key's body, so that no fragment of it escapes.
	for i, line := range strings.Split(strings.TrimSpace(keyPEM), "\n") {
		if !strings.HasPrefix(line, "-----") {
			secrets[fmt.Sprintf("private key line %d", i)] = line
		}
	}
	for i, tok := range tokens {
		secrets[fmt.Sprintf("upload token %d", i)] = tok
	}
	for what, secret := range secrets {
		for where, text := range places {
			if strings.Contains(text, secret) {
				t.Errorf("the %s appears in the %s", what, where)
			}
		}
	}
}
