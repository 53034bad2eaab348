// Package kubesim runs simulated KubeVirt and CDI controllers beside a real
// kube-apiserver (see testcluster), so that tests exercise the provider
// against objects that change the way the real controllers change them:
// DataVolume phases, conditions and progress; CDI's upload token API, served
// through the API server's aggregation layer; CDI's upload proxy; and the
// VirtualMachine and VirtualMachineInstance life cycle, including the
// failures the migration engine must classify.
//
// The controllers poll the API server and reconcile from what they observe,
// so they carry on after an API server restart. Only phase timing is kept in
// memory. At most one Sim may run against a cluster at a time (the upload
// APIService is cluster-wide). Nothing the sim does sends traffic anywhere
// but 127.0.0.1.
package kubesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// Options configure Start. Either Cluster, or RESTConfig and
// FrontProxyCACertPEM, must be set.
type Options struct {
	// Cluster is the test cluster to act on; it supplies RESTConfig,
	// FrontProxyCACertPEM and RestartAPIServer.
	Cluster *testcluster.Cluster
	// RESTConfig is an admin configuration, when Cluster is nil.
	RESTConfig *rest.Config
	// FrontProxyCACertPEM is the CA of the API server's front-proxy client
	// certificate, when Cluster is nil.
	FrontProxyCACertPEM []byte

	// Namespaces limits the controllers to these namespaces; empty means
	// all. (The upload token API and APIService are cluster-wide anyway.)
	Namespaces []string
	// Dir receives uploaded and imported images, one file per DataVolume.
	// Default: a temporary folder that Stop removes.
	Dir string
	// Step is how long each intermediate phase lasts (DataVolume Pending,
	// UploadScheduled, ...; VMI Pending, Scheduling, Scheduled). Default 100ms.
	Step time.Duration
	// Resync is the longest the controllers wait between passes: a change
	// to an object they watch, or a timed step falling due, runs a pass
	// sooner (watch.go). Default 250ms.
	Resync time.Duration
	// AgentDelay is how long after Running the guest agent connects.
	// Default 300ms.
	AgentDelay time.Duration
	// TokenTTL is the upload tokens' lifetime. Default five minutes, as CDI.
	TokenTTL time.Duration
	// UploadReadyWait is how long the upload proxy waits for a DataVolume to
	// become UploadReady before refusing an upload. Default 10s, as CDI.
	UploadReadyWait time.Duration
	// FilesystemOverhead is the share of a Filesystem-mode claim requested
	// through spec.pvc that is not available to the image; default CDI's,
	// cdi.DefaultFilesystemOverhead. (spec.storage claims are inflated by
	// CDI, so the whole request is available.) Negative means 0.
	FilesystemOverhead float64
	// QemuImg is the qemu-img binary. Default: qemu-img on $PATH.
	QemuImg string
	// UploadProxyCARenewal is how often the upload proxy's signing CA is
	// renewed (it lives twice as long). Default 24h, as CDI.
	UploadProxyCARenewal time.Duration
	// NoUploadProxyURL leaves CDIConfig's status.uploadProxyURL empty, as
	// on a cluster where no Route, Ingress or override exposes the proxy.
	// The sim then runs its kubelet (Node NodeName) and the upload proxy's
	// pod and Service (cdi/cdi-uploadproxy), so that the proxy is reached
	// through the API server's pods/portforward, as on such a cluster.
	NoUploadProxyURL bool
	// UploadServer is CDI's cdi-uploadserver binary, which takes every
	// upload (see uploadpod.go). Default: .testbin/cdi-uploadserver (see
	// testcluster.ToolBinary); Start fails when it is missing.
	UploadServer string

	// ProvisionVolumes makes the sim its StorageClasses' provisioner too:
	// every claim of a DataVolume gets a hostPath PersistentVolume on the
	// DataVolume's folder in Dir, for the real PersistentVolume binder
	// (testcluster.Options.Controllers) to bind, and the DataVolume waits
	// in Pending until its claim is Bound, as CDI does (provision.go). A
	// pod that mounts the claim (podrun) then reads and writes the image
	// the sim keeps for the DataVolume. Off: claims are never bound, which
	// is all a cluster without the binder can show.
	ProvisionVolumes bool

	// BootGuests boots each VMI the sim starts in real QEMU (package
	// guestboot), from the images of its DataVolumes and PVCs, with the
	// devices its spec asks for. The VMI is Running while QEMU runs;
	// AgentConnected, guestOSInfo and the interfaces' addresses come from
	// the guest's own agent only; the VMI ends Succeeded (the guest powered
	// off) or Failed when QEMU exits. Each booted VMI gets a virt-launcher
	// pod on Node NodeName, whose kubelet (served by the sim on 127.0.0.1)
	// serves the guest-console-log container's log, the serial console,
	// through the API server's pods/log. Off: guests are simulated
	// (AgentDelay, AnnotationNoGuestAgent).
	BootGuests bool
	// BootGuest, when set, picks the VMIs (by namespace and name) that
	// BootGuests boots; the others' guests are simulated.
	BootGuest func(namespace, name string) bool
	// DisableSerialConsoleLog is KubeVirt's cluster-wide
	// spec.configuration.virtualMachineOptions.disableSerialConsoleLog:
	// the virt-launcher pods of booted VMIs get no guest-console-log
	// container unless the VMI's spec.domain.devices.logSerialConsole says
	// true (see serialConsoleLogged).
	DisableSerialConsoleLog bool
	// MaxGuests is how many guests may run at once; more wait, Scheduled.
	// Default 2.
	MaxGuests int
	// GuestQEMU, GuestOVMFDir and GuestAccel override guestboot.Spec's
	// QEMU, OVMFDir and Accel.
	GuestQEMU    string
	GuestOVMFDir string
	GuestAccel   guestboot.Accel
}

func (o *Options) setDefaults() error {
	if o.Cluster != nil {
		if o.RESTConfig == nil {
			o.RESTConfig = o.Cluster.RESTConfig()
		}
		if o.FrontProxyCACertPEM == nil {
			o.FrontProxyCACertPEM = o.Cluster.FrontProxyCACertPEM()
		}
	}
	if o.RESTConfig == nil || len(o.FrontProxyCACertPEM) == 0 {
		return errors.New("kubesim: Options need Cluster, or RESTConfig and FrontProxyCACertPEM")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Step, 100*time.Millisecond)
	def(&o.Resync, 250*time.Millisecond)
	def(&o.AgentDelay, 300*time.Millisecond)
	def(&o.TokenTTL, 5*time.Minute)
	def(&o.UploadReadyWait, 10*time.Second)
	def(&o.UploadProxyCARenewal, defaultProxyCARenewal)
	if o.MaxGuests <= 0 {
		o.MaxGuests = 2
	}
	switch {
	case o.FilesystemOverhead == 0:
		o.FilesystemOverhead = cdi.DefaultFilesystemOverhead
	case o.FilesystemOverhead < 0:
		o.FilesystemOverhead = 0
	}
	if o.QemuImg == "" {
		p, err := exec.LookPath("qemu-img")
		if err != nil {
			return fmt.Errorf("kubesim: qemu-img is needed to validate images: %w", err)
		}
		o.QemuImg = p
	}
	p, err := findUploadServer(o.UploadServer)
	if err != nil {
		return err
	}
	o.UploadServer = p
	return nil
}

// Sim is a running set of simulated controllers and servers. Its methods
// are safe for concurrent use.
type Sim struct {
	opts Options
	cl   client.Client
	hc   *http.Client
	// watchHC carries the watches that wake the controllers.
	watchHC *http.Client
	dir     string
	ownDir  bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	tokens     *tokenSigner
	issuedMu   sync.Mutex
	issued     []string // upload tokens handed out
	tokenAPI   *tlsServer
	proxy      *tlsServer
	proxyCerts *proxyCerts
	upload     *uploadPKI
	// proxyBytes counts the request body bytes the upload proxy received.
	proxyBytes atomic.Int64
	handlers   sync.WaitGroup
	kubelet    *tlsServer
	// proxyPod is the upload proxy's pod in CDINamespace, whose port the
	// kubelet forwards (portforward.go).
	proxyPod  string
	pfDrop    chan struct{} // closed by DropPortForwards
	admission *admission

	bootSlots chan struct{}

	mu      sync.Mutex
	entered map[string]time.Time
	// wakeAt is the earliest timed step a pass found not yet due.
	wakeAt time.Time
	pods   map[types.UID]*uploadPod
	// uploads are the upload requests taken, in order.
	uploads  []UploadRequest
	imports  map[types.UID]*transfer
	received map[string]Received
	faults   faults
	lastErr  error
	boots    map[types.UID]*bootedGuest

	stopOnce sync.Once
	stopErr  error
}

// Start starts the controllers, the upload token API (registered with the
// API server as an APIService, and Available when Start returns), the
// upload proxy and KubeVirt's VirtualMachine mutating webhook (registered,
// and called by the API server when Start returns). ctx bounds the start only: call Stop.
func Start(ctx context.Context, opts Options) (*Sim, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sim{
		opts:     opts,
		kick:     make(chan struct{}, 1),
		entered:  map[string]time.Time{},
		pods:     map[types.UID]*uploadPod{},
		imports:  map[types.UID]*transfer{},
		received: map[string]Received{},
		boots:    map[types.UID]*bootedGuest{},
	}
	s.bootSlots = make(chan struct{}, opts.MaxGuests)
	cfg := rest.CopyConfig(opts.RESTConfig)
	// A transport of our own (a Proxy func keeps client-go from sharing a
	// cached one), so that Stop can close its connections; short timeouts
	// so that a dead API server costs one poll, not a minute.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.Timeout = 5 * time.Second
	cfg.UserAgent = "kubesim"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	s.hc = hc
	if s.cl, err = client.New(cfg, client.Options{Scheme: testcluster.Scheme(), HTTPClient: hc}); err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	s.dir = opts.Dir
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "kubesim-"); err != nil {
			return nil, fmt.Errorf("kubesim: %w", err)
		}
		s.ownDir = true
	}
	if s.tokens, err = newTokenSigner(opts.TokenTTL); err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	if err := s.startUploadPKI(); err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	if err := s.startUploadProxy(); err != nil {
		return nil, err
	}
	if err := s.startTokenAPI(ctx); err != nil {
		return nil, err
	}
	if err := s.publishProxyBundle(ctx); err != nil {
		return nil, err
	}
	if err := s.publishUploadProxyURL(ctx); err != nil {
		return nil, err
	}
	if err := s.startAdmission(ctx); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.rotateProxyCA()
	if opts.BootGuests || opts.NoUploadProxyURL {
		if err := s.startKubelet(ctx); err != nil {
			return nil, err
		}
		if err := s.ensureUploadProxyPod(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.startWatches(cfg); err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	s.wg.Add(1)
	go s.run()
	ok = true
	return s, nil
}

// Stop stops the controllers and servers, unregisters the APIService (when
// the API server answers), waits for every goroutine the sim started, and
// removes Dir if the sim created it. Guests it booted are stopped (QEMU
// killed and waited for) and its Node is deleted. It is idempotent.
func (s *Sim) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.cancel != nil {
			s.cancel()
		}
		if s.tokenAPI != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, s.unregisterTokenAPI(ctx))
			cancel()
		}
		if s.admission != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, s.stopAdmission(ctx))
			cancel()
		}
		if s.kubelet != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs = append(errs, s.removeUploadProxyPod(ctx), s.unregisterNode(ctx))
			cancel()
		}
		for _, srv := range []*tlsServer{s.proxy, s.tokenAPI, s.kubelet} {
			if srv != nil {
				srv.close()
			}
		}
		s.handlers.Wait()
		s.mu.Lock()
		var pods []types.UID
		for uid := range s.pods {
			pods = append(pods, uid)
		}
		s.mu.Unlock()
		for _, uid := range pods {
			s.stopUploadPod(uid)
		}
		s.wg.Wait()
		if s.upload != nil {
			s.upload.proxyClient.CloseIdleConnections()
		}
		if s.hc != nil {
			s.hc.CloseIdleConnections()
		}
		if s.watchHC != nil {
			s.watchHC.CloseIdleConnections()
		}
		if s.ownDir && s.dir != "" {
			errs = append(errs, os.RemoveAll(s.dir))
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// Dir returns the folder holding the received images.
func (s *Sim) Dir() string { return s.dir }

// LastError returns the last error a reconcile pass met (and will retry),
// for test diagnostics; nil when the last pass went well.
func (s *Sim) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// RestartAPIServer restarts the cluster's API server (see
// testcluster.Cluster.RestartAPIServer); the sim recovers by itself. It needs
// Options.Cluster.
func (s *Sim) RestartAPIServer(ctx context.Context) error {
	if s.opts.Cluster == nil {
		return errors.New("kubesim: RestartAPIServer needs Options.Cluster")
	}
	return s.opts.Cluster.RestartAPIServer(ctx)
}

func (s *Sim) watched(namespace string) bool {
	return len(s.opts.Namespaces) == 0 || slices.Contains(s.opts.Namespaces, namespace)
}

// poke makes the controllers run a pass now rather than at the next tick.
func (s *Sim) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Sim) run() {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		err := errors.Join(s.reconcileDataVolumes(s.ctx), s.reconcileVirtualMachines(s.ctx), s.provisionClaims(s.ctx), s.deleteReleasedVolumes(s.ctx))
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		wait := s.nextPass()
		if err != nil {
			// A failed pass is retried at Resync, not at every event.
			wait = s.opts.Resync
		}
		t.Reset(wait)
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			// Stop and Reset leave no stale tick in t.C (Go 1.23 timers).
			t.Stop()
			// Several changes at once make one pass.
			time.Sleep(minPassGap)
		}
	}
}

// forget drops the timing of objects that are gone.
func (s *Sim) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := string(uid) + "/"
	for k := range s.entered {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(s.entered, k)
		}
	}
}

// tlsServer is an HTTPS server on a free 127.0.0.1 port.
type tlsServer struct {
	srv  *http.Server
	port int
	done chan struct{}
}

func (s *Sim) serveTLS(h http.Handler, cfgTLS func(*http.Server)) (*tlsServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	cfgTLS(srv)
	ts := &tlsServer{srv: srv, port: l.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		_ = srv.ServeTLS(l, "", "")
	}()
	return ts, nil
}

// close stops the server, giving requests in flight a moment, and waits
// for its goroutines.
func (ts *tlsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		_ = ts.srv.Close()
	}
	<-ts.done
}

// bootsGuest reports whether the sim boots vmi's guest in QEMU.
func (s *Sim) bootsGuest(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return s.opts.BootGuests && (s.opts.BootGuest == nil || s.opts.BootGuest(vmi.Namespace, vmi.Name))
}
