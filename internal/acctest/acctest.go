// Package acctest runs the real Terraform CLI against the provider for
// acceptance tests: in process through terraform-plugin-testing, or against a
// freshly built provider binary through dev_overrides, the way a user's
// Terraform runs it (needed where a test kills Terraform or reads its logs).
package acctest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/modroot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/provider"
)

// ProviderAddress is the provider's source address in configurations.
const ProviderAddress = "registry.terraform.io/vmmigration/vmmigration"

// ProviderFactories serves the provider in process for terraform-plugin-testing.
var ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"vmmigration": providerserver.NewProtocol6WithError(provider.New("test")()),
}

// PreCheck fails the test with a message naming what is missing when the
// Terraform CLI cannot be found. Acceptance tests never skip silently.
func PreCheck(t testing.TB) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Fatal("acceptance tests need TF_ACC=1: run them with `make test` or `make testacc`")
	}
	if _, err := TerraformPath(); err != nil {
		t.Fatal(err)
	}
}

// TerraformPath finds the Terraform CLI: $TF_ACC_TERRAFORM_PATH, else PATH.
func TerraformPath() (string, error) {
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TF_ACC_TERRAFORM_PATH=%s: %w", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("terraform")
	if err != nil {
		return "", fmt.Errorf("the Terraform CLI was not found on PATH and TF_ACC_TERRAFORM_PATH is not set: install terraform (1.5 or later) or point TF_ACC_TERRAFORM_PATH at it")
	}
	return p, nil
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// ProviderBinary builds the provider once per test process and returns the
// directory holding the binary.
func ProviderBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := modroot.Find()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "vmmigration-provider-bin-")
		if err != nil {
			buildErr = err
			return
		}
		out := filepath.Join(dir, "terraform-provider-vmmigration")
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the provider: %v\n%s", err, b)
			return
		}
		buildPath = dir
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// Workdir is a Terraform working directory using the built provider binary
// through dev_overrides, as `terraform` on a user's machine would.
type Workdir struct {
	t   testing.TB
	Dir string
	Env []string
}

// NewWorkdir writes config as main.tf in a fresh directory.
func NewWorkdir(t testing.TB, config string) *Workdir {
	t.Helper()
	PreCheck(t)
	bin := ProviderBinary(t)
	dir := t.TempDir()
	rc := filepath.Join(dir, ".terraformrc")
	rcText := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", ProviderAddress, bin)
	if err := os.WriteFile(rc, []byte(rcText), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &Workdir{t: t, Dir: dir, Env: []string{
		"TF_CLI_CONFIG_FILE=" + rc,
		"CHECKPOINT_DISABLE=1",
		"TF_IN_AUTOMATION=1",
	}}
	w.WriteConfig(config)
	return w
}

// WriteConfig replaces main.tf.
func (w *Workdir) WriteConfig(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// Result is the outcome of one Terraform command.
type Result struct {
	Stdout, Stderr string
	Err            error
}

// Run runs terraform with args (plus -no-color) and extra environment.
func (w *Workdir) Run(ctx context.Context, env []string, args ...string) Result {
	w.t.Helper()
	tf, err := TerraformPath()
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tf, append(args, "-no-color")...)
	cmd.Dir = w.Dir
	cmd.Env = append(append(os.Environ(), w.Env...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// RepoRoot is the repository root (see package modroot).
func RepoRoot() (string, error) { return modroot.Find() }
