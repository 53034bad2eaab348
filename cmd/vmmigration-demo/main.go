// Command vmmigration-demo runs the provider end to end on one machine, with
// nothing to install by hand: it starts the bundled ESXi simulator with the
// demo VMs, a real kube-apiserver + etcd with the real controller manager
// and scheduler on loopback, and a node that runs cluster execution's copy
// Jobs (package podrun) with the worker built here; builds the provider,
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

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// demoNamespace is where the demo migrates to.
const demoNamespace = "migrated"

// demoWorkerImage is the worker image the demo's provider names; the
// demo's node runs the worker built from this checkout for it.
const demoWorkerImage = "vmmigration-worker:demo"

// clusterExecutionVM is a demo VM migrated in cluster execution, beside
// the real guest (realGuestName), whose conversion Job runs virt-v2v.
const clusterExecutionVM = "db-two-disks"

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
	// As ESXi 7 and 8, the host has Python: disks are read with the
	// zero-skipping reader, so a thin disk's zeros stay on the host.
	esxi.SetPython(esxisim.HostPython())
	sources := map[string]*esxisim.VMFiles{}
	for _, spec := range esxisim.DemoVMs() {
		id, files, err := esxi.AddVM(spec)
		if err != nil {
			return fmt.Errorf("demo VM %s: %w", spec.Name, err)
		}
		sources[spec.Name] = files
		fmt.Printf("    Vmid %d  %-20s %d disk(s)\n", id, spec.Name, len(spec.Disks))
	}
	guestFlat, err := addRealGuest(ctx, root, esxi)
	if err != nil {
		return err
	}
	if err := esxi.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer esxi.Close()
	fmt.Printf("    listening on %s, host key %s\n", esxi.Addr(), esxi.Fingerprint())

	step("starting a real kube-apiserver, etcd, kube-controller-manager and kube-scheduler on loopback")
	// The controllers (Jobs, garbage collector, volume binder) and the
	// scheduler run the copy Jobs of the VM migrated in cluster execution.
	cluster, err := testcluster.Start(ctx, testcluster.Options{Controllers: true})
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

	step("starting simulated KubeVirt and CDI controllers (upload proxy, aggregated upload token API, claims provisioned on this machine)")
	// The real guest's VM boots in QEMU, on the devices the provider
	// renders; the other demo VMs' disks hold generated data, not an OS,
	// and their guests are simulated. Claims of the "claims" class are
	// provisioned as folders here, for the copy Jobs' pods to write.
	sim, err := kubesim.Start(ctx, kubesim.Options{Cluster: cluster, Namespaces: []string{demoNamespace}, Dir: filepath.Join(work, "cdi"),
		BootGuests: true, BootGuest: func(_, name string) bool { return name == realGuestName }, ProvisionVolumes: true})
	if err != nil {
		return err
	}
	defer sim.Stop()
	fmt.Printf("    upload proxy %s\n", sim.UploadProxyURL())

	// Two VMs' disks are copied by Kubernetes Jobs (execution "cluster"),
	// and the real guest is converted by a conversion Job (the machine's
	// virt-v2v, as the worker image holds it), on a node that runs their
	// pods as processes here, which takes root (private mount
	// namespaces); without it those VMs are migrated here too.
	var inCluster []string
	if os.Geteuid() == 0 {
		step("starting a node that runs the copy and conversion Jobs' pods (the worker built from cmd/vmmigration-worker as image %s)", demoWorkerImage)
		worker, err := testcluster.WorkerBinary()
		if err != nil {
			return err
		}
		node, err := podrun.Start(ctx, podrun.Options{Config: cluster.RESTConfig(), Images: map[string]string{demoWorkerImage: worker},
			Dir: filepath.Join(work, "node")})
		if err != nil {
			return err
		}
		defer node.Stop()
		inCluster = []string{clusterExecutionVM, realGuestName}
	} else {
		step("not root: %s and %s are migrated on this machine too (the node that runs the Jobs needs root)", clusterExecutionVM, realGuestName)
	}

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
		"upload_proxy_url": sim.UploadProxyURL(),
		"upload_proxy_ca":  string(sim.UploadProxyCACertPEM()),
		// The proxy's certificate names its Service, not 127.0.0.1.
		"upload_proxy_server_name": sim.UploadProxyServerName(),
		"worker_image":             demoWorkerImage,
		"cluster_execution":        inCluster,
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
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchPhases(watchCtx, cluster.AdminClient())
	}()
	applyStart := time.Now()
	apply := exec.CommandContext(ctx, "terraform", "apply", "-auto-approve", "-input=false", "-no-color")
	apply.Dir, apply.Env = tfDir, env
	var tfOut strings.Builder
	apply.Stdout, apply.Stderr = &tfOut, &tfOut
	err = apply.Run()
	stopWatch()
	<-watched
	if err != nil {
		fmt.Print(tfOut.String())
		return fmt.Errorf("terraform apply: %w", err)
	}
	fmt.Printf("    terraform apply finished in %s\n", time.Since(applyStart).Round(time.Second))

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
	if err := verifyEndToEnd(ctx, cluster.AdminClient(), sim, sources, guestFlat); err != nil {
		return err
	}
	if err := showRealGuest(ctx, cluster); err != nil {
		return err
	}
	st := esxi.Stats()
	var capacity int64
	for _, f := range sources {
		for _, d := range f.Disks {
			capacity += d.CapacityBytes
		}
	}
	fmt.Printf("    ESXi: %d SSH connection(s), %d exec channel(s), %d command(s); %.1f MiB sent over SSH for %.1f MiB of disks\n",
		st.Conns, st.Execs, st.Commands, float64(st.StdoutBytes)/(1<<20), float64(capacity)/(1<<20))
	fmt.Printf("    finished in %s; stopping the simulator and the cluster\n", time.Since(started).Round(time.Second))
	return nil
}

// seedCluster creates what a platform team's cluster would already have:
// the destination namespace and a StorageClass.
func seedCluster(ctx context.Context, c *testcluster.Cluster) error {
	cl := c.AdminClient()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}); err != nil {
		return err
	}
	if err := cl.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "kubevirt.io.hostpath-provisioner"}); err != nil {
		return err
	}
	return cl.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "claims"}, Provisioner: kubesim.Provisioner})
}

// watchPhases prints every migration's phase as it changes, from the
// checkpoint records in the cluster, and every copy and conversion Job of
// cluster execution as it starts and ends, until ctx ends.
func watchPhases(ctx context.Context, cl client.Client) {
	seen := map[string]record.Phase{}
	seenJobs := map[string]string{}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		var cms corev1.ConfigMapList
		if err := cl.List(ctx, &cms, client.InNamespace(demoNamespace), client.HasLabels{kube.LabelMigration}); err == nil {
			sort.Slice(cms.Items, func(i, j int) bool { return cms.Items[i].Name < cms.Items[j].Name })
			for _, cm := range cms.Items {
				var rec record.Record
				if json.Unmarshal([]byte(cm.Data[coord.RecordKey]), &rec) != nil || rec.Phase == "" {
					continue
				}
				name := rec.Identity.Name
				if seen[name] != rec.Phase {
					seen[name] = rec.Phase
					fmt.Printf("    %6.1fs  %-20s %s\n", time.Since(start).Seconds(), name, rec.Phase)
				}
			}
		}
		var jobs batchv1.JobList
		if err := cl.List(ctx, &jobs, client.InNamespace(demoNamespace), client.HasLabels{kube.LabelMigration}); err == nil {
			for _, j := range jobs.Items {
				st := jobState(&j)
				if seenJobs[j.Name] != st {
					seenJobs[j.Name] = st
					fmt.Printf("    %6.1fs  %-20s Job %s %s\n", time.Since(start).Seconds(), j.Labels[kube.LabelMigration], j.Name, st)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// jobState is what a Job is doing, in a word.
func jobState(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return string(c.Type)
		}
	}
	switch {
	case j.Status.Active > 0:
		return "running"
	case j.Status.StartTime == nil:
		return "created"
	}
	// Its pod has ended; the Job controller has not said how yet.
	return "ending"
}

// verifyEndToEnd compares, for every migrated disk, the SHA-256 of the
// source disk on the simulated host with what CDI received, and prints the
// totals.
func verifyEndToEnd(ctx context.Context, cl client.Client, sim *kubesim.Sim, sources map[string]*esxisim.VMFiles, guestFlat string) error {
	var cms corev1.ConfigMapList
	if err := cl.List(ctx, &cms, client.InNamespace(demoNamespace), client.HasLabels{kube.LabelMigration}); err != nil {
		return err
	}
	var err error
	var vms, disks int
	var bytes, zero int64
	for _, cm := range cms.Items {
		var rec record.Record
		if err := json.Unmarshal([]byte(cm.Data[coord.RecordKey]), &rec); err != nil {
			return err
		}
		src := sources[rec.Identity.VMName]
		if (src == nil && rec.Identity.VMName != realGuestName) || rec.Phase != record.PhaseCompleted {
			continue
		}
		vms++
		for i, d := range rec.Disks {
			var want string
			if src != nil {
				want = src.Disks[i].SHA256()
			} else if want, err = convert.FileSHA256(guestFlat); err != nil {
				return err
			}
			got, ok := sim.ReceivedSHA256(demoNamespace, d.DataVolume)
			if d.CopyJob != "" {
				// Cluster execution: nothing was uploaded; the copy Job
				// wrote the claim, which holds the image.
				if got, err = convert.FileSHA256(sim.ReceivedPath(demoNamespace, d.DataVolume)); err != nil {
					return err
				}
				ok = true
			}
			if d.SourceSHA256 != want {
				return fmt.Errorf("%s disk %d: source %s, copied %s: the checksums differ", rec.Identity.Name, i, want, d.SourceSHA256)
			}
			disks++
			bytes += d.SizeBytes
			zero += d.ZeroBytes
			if d.ConvertedSHA256 != "" {
				// Converted: the DataVolume holds the converted image.
				if !ok || got != d.ConvertedSHA256 {
					return fmt.Errorf("%s disk %d: converted %s, received %s: the checksums differ", rec.Identity.Name, i, d.ConvertedSHA256, got)
				}
				fmt.Printf("    %-20s disk %d  %4d MiB  source = copy digest %s…, converted = DataVolume %s digest %s…\n",
					rec.Identity.Name, i, d.SizeBytes>>20, want[:16], d.DataVolume, got[:16])
				continue
			}
			if !ok || got != want {
				return fmt.Errorf("%s disk %d: source %s, received %s: the checksums differ", rec.Identity.Name, i, want, got)
			}
			if d.CopyJob != "" {
				fmt.Printf("    %-20s disk %d  %4d MiB  digest %s…  source = claim of DataVolume %s, written by Job %s (attempt %d)\n",
					rec.Identity.Name, i, d.SizeBytes>>20, want[:16], d.DataVolume, d.CopyJob, d.CopyAttempt)
				continue
			}
			fmt.Printf("    %-20s disk %d  %4d MiB  digest %s…  source = copy = DataVolume %s\n", rec.Identity.Name, i, d.SizeBytes>>20, want[:16], d.DataVolume)
		}
		if dt := rec.Downtime(); dt > 0 {
			fmt.Printf("    %-20s downtime %s (source powered off to VM started)%s\n", rec.Identity.Name, dt.Round(10*time.Millisecond), copyRate(rec))
		}
	}
	fmt.Printf("    %d VM(s), %d disk(s), %d MiB copied (%d MiB of it zero runs), every checksum verified end to end\n", vms, disks, bytes>>20, zero>>20)
	return nil
}

// copyRate says how long the disks took from the power-off until they
// were copied and verified (flattened too, for a snapshot chain), and at
// what rate of disk and of data that was.
func copyRate(rec record.Record) string {
	t := rec.Timestamps
	if t.SourcePoweredOff == nil || t.Acquired == nil || !t.Acquired.After(*t.SourcePoweredOff) {
		return ""
	}
	secs := t.Acquired.Sub(*t.SourcePoweredOff).Seconds()
	var size, data int64
	for _, d := range rec.Disks {
		size += d.SizeBytes
		data += d.SizeBytes - d.ZeroBytes
	}
	return fmt.Sprintf("; disks copied in %.1f s, %.0f MB/s of disk, %.0f MB/s of data", secs, float64(size)/secs/1e6, float64(data)/secs/1e6)
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
