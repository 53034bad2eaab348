//go:build linux

// Package clustertest runs whole migrations in cluster execution against
// a test cluster with the real kube-apiserver, kube-controller-manager
// (Job controller, garbage collector, PersistentVolume binder) and
// kube-scheduler; kubesim for CDI and KubeVirt, provisioning each
// DataVolume's claim as a hostPath volume; podrun as the node that runs
// the copy Jobs' pods, with the worker binary built from
// cmd/vmmigration-worker; and esxisim over real SSH on loopback as the
// ESXi host. It is a package of its own because its cluster runs the
// controllers, which the engine's other tests do without.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob/convertjobtest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

const (
	hostName     = "esx1"
	storageClass = "cluster-exec"
	workerImage  = "registry.example/vmmigration-worker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// v2vImage is the worker with stand-ins for virt-v2v's tools first in
	// its PATH (fakeV2V): the simulated disks hold no guest to convert.
	v2vImage     = "registry.example/vmmigration-worker-v2v@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	esxiPassword = "cluster-exec'Pa55"
)

var (
	cluster testcluster.Shared
	shared  struct {
		once   sync.Once
		err    error
		runner *podrun.Runner
		cs     kubernetes.Interface
		// v2vDir holds the stand-ins of v2vImage.
		v2vDir string
		v2v    *convertjobtest.Fake
		images map[string]string
	}
	nsSeq atomic.Int64
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	// The pod garbage collector too: it fails and deletes the pods of a
	// Node that is gone (TestNodeLost).
	cluster.Options = testcluster.Options{Controllers: true,
		ControllerNames: append(slices.Clone(testcluster.DefaultControllers), "pod-garbage-collector-controller")}
	code := m.Run()
	if shared.runner != nil {
		if err := shared.runner.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the runner:", err)
			code = 1
		}
	}
	if shared.v2vDir != "" {
		_ = os.RemoveAll(shared.v2vDir)
	}
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test cluster:", err)
		code = 1
	}
	os.Exit(code)
}

// startShared builds the worker and starts the node that runs it, once.
func startShared(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	shared.once.Do(func() {
		bin, err := testcluster.WorkerBinary()
		if err != nil {
			shared.err = err
			return
		}
		if shared.cs, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
			shared.err = err
			return
		}
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: kubesim.Provisioner}
		if _, err := shared.cs.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil && !kube.IsAlreadyExists(err) {
			shared.err = err
			return
		}
		var v2vEntry string
		if shared.v2vDir, v2vEntry, err = fakeV2V(bin); err != nil {
			shared.err = err
			return
		}
		// No claim is listed: each is mounted from the volume kubesim
		// provisioned for it.
		shared.images = map[string]string{workerImage: bin, v2vImage: v2vEntry}
		shared.runner, shared.err = podrun.Start(context.Background(), podrun.Options{Config: c.RESTConfig(), Images: shared.images})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
}

// env is one test's world: its namespace served by a kubesim of its own,
// an ESXi host of its own, and the shared cluster and node.
type env struct {
	t    *testing.T
	c    *testcluster.Cluster
	sim  *kubesim.Sim
	host *esxisim.Server
	reg  *esxi.Registry
	kube *kube.Client
	ns   string
	// image is the worker image the engine renders its Jobs with
	// (workerImage unless a test sets it); maxConversions its conversion
	// limit (the engine's default when zero).
	image          string
	maxConversions int

	// start is when the env was made: log lines say how long after it.
	start time.Time

	mu     sync.Mutex
	events []engine.Event
	// logged is, by disk, the last quarter of a transfer logged: progress
	// events are logged at 0, 25, 50, 75 and 100% only, so that a failing
	// test's log shows its whole timeline rather than a page of progress.
	logged map[int]int
	// onEvent, if set, sees every event (under no lock).
	onEvent atomic.Pointer[func(engine.Event)]
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith is newEnv with kubesim's options changed by mod.
func newEnvWith(t *testing.T, mod func(*kubesim.Options)) *env {
	t.Helper()
	c := cluster.Get(t)
	startShared(t, c)
	e := &env{t: t, c: c, ns: fmt.Sprintf("cx-%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1)), image: workerImage,
		start: time.Now(), logged: map[int]int{}}
	ctx := t.Context()
	if _, err := shared.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := kubesim.Options{Cluster: c, Namespaces: []string{e.ns}, ProvisionVolumes: true,
		Step: 30 * time.Millisecond, AgentDelay: 100 * time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	sim, err := kubesim.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("kubesim Stop: %v", err)
		}
	})
	e.sim = sim
	key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
	if err != nil {
		t.Fatal(err)
	}
	e.host, err = esxisim.New(esxisim.Options{Root: t.TempDir(), HostKey: key, ShutdownDelay: 200 * time.Millisecond,
		Users: []esxisim.User{{Name: "root", Password: esxiPassword}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.host.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.host.Close() })
	e.reg = esxi.NewRegistry(nil)
	addr, portS, _ := strings.Cut(e.host.Addr(), ":")
	port, _ := strconv.Atoi(portS)
	if _, err := e.reg.Add(esxi.HostConfig{Name: hostName, Address: addr, Port: port, User: "root",
		Password: esxiPassword, HostKeyFingerprint: e.host.Fingerprint(), KeepAliveInterval: -1, StreamsPerDisk: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.reg.Close() })
	e.kube = kube.NewForRESTConfig(c.RESTConfig())
	return e
}

// engine returns a new engine (a new runner process) for the env.
func (e *env) engine() *engine.Engine {
	e.t.Helper()
	en, err := engine.New(engine.Deps{
		ESXi: e.reg, Kube: e.kube, PollInterval: 50 * time.Millisecond, LeaseDuration: 3 * time.Second,
		WorkerImage: e.image, MaxConcurrentConversions: e.maxConversions,
		Progress: func(ev engine.Event) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			quiet := false
			if ev.Kind == engine.EventProgress {
				q := int(ev.Percent) / 25
				last, seen := e.logged[ev.Disk]
				quiet = seen && q == last
				e.logged[ev.Disk] = q
			}
			e.mu.Unlock()
			if !quiet {
				e.t.Logf("+%.0fs %s %s disk %d: %s", time.Since(e.start).Seconds(), ev.Phase, ev.Kind, ev.Disk, ev.Message)
			}
			if f := e.onEvent.Load(); f != nil {
				(*f)(ev)
			}
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// spec migrates vmName to <ns>/<name> in cluster execution, with short
// timings.
func (e *env) spec(vmName, name string) engine.Spec {
	return engine.Spec{
		Host: hostName, VMName: vmName, Namespace: e.ns, Name: name, StorageClass: storageClass,
		NetworkMap:     map[string]string{"VM Network": "pod"},
		PowerOffPolicy: "graceful", ShutdownTimeout: 5 * time.Second,
		// The simulated disks hold test data, not an OS to convert.
		Conversion:    engine.ConversionNone,
		Execution:     engine.ExecutionCluster,
		Validation:    engine.Validation{GuestAgent: true, IPReported: true, Timeout: 30 * time.Second},
		StartTimeout:  30 * time.Second,
		Retry:         engine.RetryPolicy{Attempts: 3, Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		WorkDir:       e.t.TempDir(),
		CopyChunkSize: 1 << 20,
	}
}

// runCtx bounds a run by the test binary's deadline, not by a number of
// seconds that only holds on an idle machine: Jobs wait on the scheduler,
// the controllers and a worker process, which a busy machine slows down.
func (e *env) runCtx() context.Context {
	d, ok := e.t.Deadline()
	if !ok {
		return e.t.Context()
	}
	ctx, cancel := context.WithDeadline(e.t.Context(), d.Add(-10*time.Second))
	e.t.Cleanup(cancel)
	return ctx
}

// messages returns the events' messages that contain sub.
func (e *env) messages(sub string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if strings.Contains(ev.Message, sub) {
			out = append(out, ev.Message)
		}
	}
	return out
}

// commands returns the host's logged command lines containing sub.
func (e *env) commands(sub string) []string { return e.host.CommandsContaining(sub) }
