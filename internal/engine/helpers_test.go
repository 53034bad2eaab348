package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
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
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

var cluster testcluster.Shared

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(cluster.Main(m))
}

const (
	hostName     = "esx1"
	storageClass = "standard"
)

// env is one test's world: the shared API server, a simulated KubeVirt/CDI
// serving the test's namespace, a simulated ESXi host and an engine.
type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	sim   *kubesim.Sim
	host  *esxiHost
	reg   *esxi.Registry
	kube  *kube.Client
	admin client.Client
	ns    string

	mu     sync.Mutex
	events []engine.Event
	// onEvent, if set, sees every event (under no lock).
	onEvent atomic.Pointer[func(engine.Event)]
}

var nsSeq atomic.Int64

func newEnv(t *testing.T, simOpts ...func(*kubesim.Options)) *env {
	t.Helper()
	c := cluster.Get(t)
	e := &env{t: t, c: c, admin: c.AdminClient()}
	e.ns = fmt.Sprintf("eng-%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))
	ctx := t.Context()
	if err := e.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}); err != nil {
		t.Fatal(err)
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: "kubesim.vmmigration.io/none"}
	if err := e.admin.Create(ctx, sc); err != nil && !kube.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	opts := kubesim.Options{
		Cluster: c, Namespaces: []string{e.ns}, Step: 30 * time.Millisecond,
		AgentDelay: 100 * time.Millisecond, UploadReadyWait: 2 * time.Second,
	}
	for _, o := range simOpts {
		o(&opts)
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
	e.host = newESXi(t, esxisim.Options{ShutdownDelay: 200 * time.Millisecond})
	e.reg = esxi.NewRegistry(nil)
	hostAddr, portStr, _ := strings.Cut(e.host.Addr(), ":")
	port, _ := strconv.Atoi(portStr)
	if _, err := e.reg.Add(esxi.HostConfig{Name: hostName, Address: hostAddr, Port: port,
		Password: esxiPassword, HostKeyFingerprint: e.host.Fingerprint(), KeepAliveInterval: -1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.reg.Close() })
	e.kube = kube.NewForRESTConfig(c.RESTConfig())
	return e
}

// engine returns a new engine (a new "process") for the env.
func (e *env) engine(mod ...func(*engine.Deps)) *engine.Engine {
	e.t.Helper()
	d := engine.Deps{
		ESXi: e.reg, Kube: e.kube, PollInterval: 30 * time.Millisecond, LeaseDuration: 3 * time.Second,
		Progress: func(ev engine.Event) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
			if f := e.onEvent.Load(); f != nil {
				(*f)(ev)
			}
		},
	}
	for _, m := range mod {
		m(&d)
	}
	en, err := engine.New(d)
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}

// spec is a spec for migrating vmName to <ns>/<name> with short timings.
func (e *env) spec(vmName, name string) engine.Spec {
	return engine.Spec{
		Host: hostName, VMName: vmName, Namespace: e.ns, Name: name, StorageClass: storageClass,
		NetworkMap:     map[string]string{"VM Network": "pod", "Storage": "default/storage-net"},
		PowerOffPolicy: "graceful", ShutdownTimeout: 5 * time.Second,
		// The simulated disks hold test data, not an OS to convert.
		Conversion: engine.ConversionNone,
		Transport: engine.Transport{Kind: engine.TransportCDIUpload, UploadProxyURL: e.sim.UploadProxyURL(),
			UploadProxyCAPEM: string(e.sim.UploadProxyCACertPEM()), UploadProxyServerName: e.sim.UploadProxyServerName()},
		Validation:    engine.Validation{GuestAgent: true, IPReported: true, Timeout: 10 * time.Second},
		StartTimeout:  10 * time.Second,
		Retry:         engine.RetryPolicy{Attempts: 3, Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		WorkDir:       e.t.TempDir(),
		CopyChunkSize: 1 << 20,
		Labels:        map[string]string{"team": "infra"},
	}
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// commands returns the host's logged command lines containing sub.
func (e *env) commands(sub string) []string { return e.host.CommandsContaining(sub) }

var ddRe = regexp.MustCompile(`if=([^']+)' bs=(\d+) skip=(\d+) count=(\d+)`)

// ddReads returns the byte ranges read with dd, as "path@offset" keys
// with their lengths, in order.
func (e *env) ddReads(from int) []string {
	var out []string
	log := e.host.CommandLog()
	for _, c := range log[from:] {
		for _, m := range ddRe.FindAllStringSubmatch(c.Command, -1) {
			bs, _ := strconv.ParseInt(m[2], 10, 64)
			skip, _ := strconv.ParseInt(m[3], 10, 64)
			out = append(out, fmt.Sprintf("%s@%d", m[1], bs*skip))
		}
	}
	return out
}

func (e *env) dataVolumes() []cdiv1beta1.DataVolume {
	var list cdiv1beta1.DataVolumeList
	if err := e.admin.List(e.t.Context(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) vms() []kubevirtv1.VirtualMachine {
	var list kubevirtv1.VirtualMachineList
	if err := e.admin.List(e.t.Context(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) eventsOf(kind engine.EventKind) []engine.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []engine.Event
	for _, ev := range e.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// mustComplete runs spec and fails unless it completes.
// runInterrupted runs spec with onEvent watching its events until ctx
// ends, and checks that the run stopped interrupted in phase.
func (e *env) runInterrupted(ctx context.Context, spec engine.Spec, phase record.Phase, onEvent func(engine.Event)) record.Record {
	e.t.Helper()
	e.onEvent.Store(&onEvent)
	rec, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != phase {
		e.t.Fatalf("first Run = %v, want an interruption in %s", err, phase)
	}
	return rec
}

func (e *env) mustComplete(en *engine.Engine, spec engine.Spec) record.Record {
	e.t.Helper()
	rec, err := en.Run(e.ctx(60*time.Second), spec)
	if err != nil {
		e.t.Fatalf("Run: %v\nsim: %v", err, e.sim.LastError())
	}
	if rec.Phase != record.PhaseCompleted {
		e.t.Fatalf("phase = %s, want Completed", rec.Phase)
	}
	return rec
}

func condTrue(rec record.Record, t string) bool {
	c, ok := rec.Condition(t)
	return ok && c.Status
}

const esxiPassword = "engine-test-Pa55"

// esxiHost is a simulated ESXi host on 127.0.0.1.
type esxiHost struct{ *esxisim.Server }

func newESXi(t *testing.T, opts esxisim.Options) *esxiHost {
	t.Helper()
	opts.Root = t.TempDir()
	key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
	if err != nil {
		t.Fatal(err)
	}
	opts.HostKey = key
	opts.Users = []esxisim.User{{Name: "root", Password: esxiPassword}}
	s, err := esxisim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &esxiHost{s}
}

// AddVM adds a VM and fails the test on error.
func (h *esxiHost) AddVM(t *testing.T, spec esxisim.VMSpec) (int, *esxisim.VMFiles) {
	t.Helper()
	id, files, err := h.Server.AddVM(spec)
	if err != nil {
		t.Fatal(err)
	}
	return id, files
}

func contextWithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}
