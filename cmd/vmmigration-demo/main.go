// Command vmmigration-demo runs the provider end to end on one machine, with
// nothing to install by hand: it starts the bundled ESXi simulator with the
// demo VMs and a real kube-apiserver + etcd on loopback, builds the provider,
// runs `terraform apply` on examples/demo against them, prints what happened,
// and stops everything it started. `make demo` runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

const demoPassword = "demo-Passw0rd"

func main() {
	keep := flag.Bool("keep", false, "keep the demo's working directory (.demo/) afterwards")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(ctx context.Context, keep bool) error {
	started := time.Now()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "examples", "demo", "main.tf")); err != nil {
		return errors.New("run the demo from the repository root (make demo)")
	}
	work := filepath.Join(root, ".demo")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	for _, d := range []string{"bin", "datastores", "tf", "staging"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			return err
		}
	}

	step("building the provider")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(work, "bin", "terraform-provider-vmmigration"), ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the provider: %w", err)
	}

	step("starting the ESXi simulator with the demo VMs")
	key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
	if err != nil {
		return err
	}
	esxi, err := esxisim.New(esxisim.Options{
		Root:          filepath.Join(work, "datastores"),
		Users:         []esxisim.User{{Name: "root", Password: demoPassword}},
		HostKey:       key,
		ShutdownDelay: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	for _, spec := range esxisim.DemoVMs() {
		id, _, err := esxi.AddVM(spec)
		if err != nil {
			return fmt.Errorf("demo VM %s: %w", spec.Name, err)
		}
		fmt.Printf("    Vmid %d  %-20s %d disk(s)\n", id, spec.Name, len(spec.Disks))
	}
	if err := esxi.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer esxi.Close()
	fmt.Printf("    listening on %s, host key %s\n", esxi.Addr(), esxi.Fingerprint())

	step("starting a real kube-apiserver and etcd on loopback")
	cluster, err := testcluster.Start(ctx, testcluster.Options{})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	if err := seedCluster(ctx, cluster); err != nil {
		return err
	}
	fmt.Printf("    API server %s\n", cluster.Host())

	step("terraform apply examples/demo")
	tfDir := filepath.Join(work, "tf")
	if err := copyDir(filepath.Join(root, "examples", "demo"), tfDir); err != nil {
		return err
	}
	host, port, _ := strings.Cut(esxi.Addr(), ":")
	vars := map[string]any{
		"esxi_address":     host,
		"esxi_port":        port,
		"esxi_password":    demoPassword,
		"esxi_fingerprint": esxi.Fingerprint(),
		"kubeconfig":       kubeconfig,
		"kube_context":     testcluster.ContextName,
		"work_dir":         filepath.Join(work, "staging"),
	}
	b, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tfDir, "demo.auto.tfvars.json"), b, 0o600); err != nil {
		return err
	}
	rc := filepath.Join(work, "terraformrc")
	rcText := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"registry.terraform.io/vmmigration/vmmigration\" = %q\n  }\n  direct {}\n}\n", filepath.Join(work, "bin"))
	if err := os.WriteFile(rc, []byte(rcText), 0o600); err != nil {
		return err
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	apply := exec.CommandContext(ctx, "terraform", "apply", "-auto-approve", "-input=false", "-no-color")
	apply.Dir, apply.Env = tfDir, env
	apply.Stdout, apply.Stderr = os.Stdout, os.Stderr
	if err := apply.Run(); err != nil {
		return fmt.Errorf("terraform apply: %w", err)
	}

	step("summary")
	out := exec.CommandContext(ctx, "terraform", "output", "-json")
	out.Dir, out.Env = tfDir, env
	raw, err := out.Output()
	if err != nil {
		return fmt.Errorf("terraform output: %w", err)
	}
	if err := printSummary(raw); err != nil {
		return err
	}
	st := esxi.Stats()
	fmt.Printf("    ESXi: %d SSH connection(s), %d exec channel(s), %d command(s)\n", st.Conns, st.Execs, st.Commands)
	fmt.Printf("    finished in %s; stopping the simulator and the cluster\n", time.Since(started).Round(time.Second))
	return nil
}

// seedCluster creates what a platform team's cluster would already have:
// the destination namespace and a StorageClass.
func seedCluster(ctx context.Context, c *testcluster.Cluster) error {
	cl := c.AdminClient()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "migrated"}}); err != nil {
		return err
	}
	return cl.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "kubevirt.io.hostpath-provisioner"})
}

// printSummary prints every output of the demo configuration.
func printSummary(raw []byte) error {
	var outputs map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &outputs); err != nil {
		return err
	}
	names := make([]string, 0, len(outputs))
	for n := range outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var v any
		_ = json.Unmarshal(outputs[n].Value, &v)
		b, _ := json.MarshalIndent(v, "    ", "  ")
		fmt.Printf("    %s = %s\n", n, b)
	}
	return nil
}

func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tf") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
