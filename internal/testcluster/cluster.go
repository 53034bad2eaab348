// Package testcluster runs a real kube-apiserver backed by a real etcd on
// loopback for tests, with the KubeVirt and CDI custom resources the provider
// uses installed (schemas generated from their Go types, see crdgen).
//
// By default there is no kubelet, scheduler or controller-manager: objects
// are stored and validated, and nothing acts on them. Options.Controllers
// adds the real kube-controller-manager (Job controller, garbage collector,
// see DefaultControllers) and kube-scheduler; a simulated kubelet (package
// podrun) then runs the pods they schedule.
//
// The child processes never outlive the test binary: see Start, and the
// process type for how. Binaries come from $VMMIGRATION_TESTBIN or the
// repository's .testbin folder ("make testbin" builds them); when they are
// missing, Start fails saying so. It never skips.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceClusterIPRange is the API server's --service-cluster-ip-range.
// Nothing routes to it: tests must never send traffic through a ClusterIP
// (use an ExternalName Service pointing at localhost instead).
const ServiceClusterIPRange = "10.0.0.0/24"

// serviceIP is the first address of ServiceClusterIPRange, the "kubernetes"
// Service's ClusterIP, which the serving certificate names.
var serviceIP = net.IPv4(10, 0, 0, 1)

// ContextName is the name of the context, cluster and user in the kubeconfig
// written by WriteKubeconfig.
const ContextName = "vmmigration-testcluster"

// EnvKeep names the environment variable that, when "1", keeps a stopped
// cluster's folder (logs, certificates, etcd data) for inspection.
const EnvKeep = "VMMIGRATION_TESTCLUSTER_KEEP"

// Options configure Start. The zero value is a cluster with the CRDs.
type Options struct {
	// BinDir holds the kube-apiserver and etcd binaries. Default:
	// $VMMIGRATION_TESTBIN, else <repository root>/.testbin.
	BinDir string
	// NoCRDs leaves out the KubeVirt and CDI custom resource definitions.
	NoCRDs bool
	// ExtraAPIServerFlags are appended to kube-apiserver's command line
	// ("--name=value"; a later flag wins over an earlier one).
	ExtraAPIServerFlags []string
	// StartTimeout bounds Start and each API server (re)start, in addition to
	// the context. Each wait for a component to be ready is also bounded by
	// the CPU time that component used (startCPU), which is how a stuck
	// start is told from a slow one on a busy machine; the default is only
	// a backstop for one that hangs without running.
	StartTimeout time.Duration
	// Controllers also runs the real kube-controller-manager (the
	// controllers in ControllerNames) and kube-scheduler, on loopback, with
	// leader election off, each authenticated by a client certificate for
	// its bootstrap RBAC identity. They need kube-controller-manager and
	// kube-scheduler beside kube-apiserver in BinDir. Off: neither runs.
	Controllers bool
	// ControllerNames is kube-controller-manager's --controllers when
	// Controllers is set. Default DefaultControllers.
	ControllerNames []string
}

// Cluster is a running etcd and kube-apiserver (and, with
// Options.Controllers, kube-controller-manager and kube-scheduler). Its
// methods are safe for concurrent use.
type Cluster struct {
	opts     Options
	bins     binaries
	dir      string
	pki      *pki
	etcdPort int
	peerPort int
	apiPort  int
	apiArgs  []string
	config   *rest.Config
	client   client.Client

	ctl controlPlane

	mu      sync.Mutex
	etcd    *process
	api     *process
	kcm     *process // kube-controller-manager, with Options.Controllers
	sched   *process // kube-scheduler, with Options.Controllers
	stopped bool
}

// defaultStartTimeout is StartTimeout's default.
const defaultStartTimeout = 15 * time.Minute

// Start starts etcd and kube-apiserver on free loopback ports, waits until
// the API server is ready and the CRDs are Established, and returns the
// running cluster. ctx bounds the start only, not the cluster's life: call
// Stop (StartT and Shared do it for you).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	bins, err := findBinaries(opts.BinDir, opts.Controllers)
	if err != nil {
		return nil, err
	}
	p, err := newPKI()
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	dir, err := newWorkDir()
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	c := &Cluster{opts: opts, bins: bins, dir: dir, pki: p}
	register(c)
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if err := c.writeFiles(); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}

	// Ports are picked free and then handed to the children, so another
	// process may grab one in between: retry with fresh ports when a child
	// fails to bind.
	for attempt := 1; ; attempt++ {
		err = c.startProcesses(ctx)
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, errAddrInUse) {
			return nil, err
		}
		c.killProcesses()
		_ = os.RemoveAll(filepath.Join(dir, "etcd-data"))
	}

	if c.client, err = client.New(c.config, client.Options{Scheme: Scheme()}); err != nil {
		return nil, fmt.Errorf("testcluster: admin client: %w", err)
	}
	if !opts.NoCRDs {
		if err := c.installCRDs(ctx); err != nil {
			return nil, err
		}
	}
	if opts.Controllers {
		if err := c.prepareControllers(); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		if err := c.startControllers(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

var errAddrInUse = errors.New("address already in use")

// Scheme returns a scheme with the built-in Kubernetes types, the
// apiextensions types and the KubeVirt and CDI types, as used by
// AdminClient.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(kubevirtv1.AddToScheme(s))
	utilruntime.Must(cdiv1beta1.AddToScheme(s))
	return s
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) writeFiles() error {
	files := map[string][]byte{
		"ca.crt":                 c.pki.ca.CertPEM,
		"apiserver.crt":          c.pki.serving.CertPEM,
		"apiserver.key":          c.pki.serving.KeyPEM,
		"front-proxy-ca.crt":     c.pki.frontProxyCA.CertPEM,
		"front-proxy-client.crt": c.pki.frontProxyClient.CertPEM,
		"front-proxy-client.key": c.pki.frontProxyClient.KeyPEM,
		"sa.key":                 c.pki.saKeyPEM,
		"sa.pub":                 c.pki.saPubPEM,
	}
	for name, b := range files {
		if err := os.WriteFile(c.path(name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) startProcesses(ctx context.Context) error {
	ports, err := freePorts(3)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.etcdPort, c.peerPort, c.apiPort = ports[0], ports[1], ports[2]
	c.config = c.restConfig(c.pki.admin)

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(c.etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(c.peerPort)
	etcdArgs := []string{
		"--name=testcluster",
		"--data-dir=" + c.path("etcd-data"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testcluster=" + peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
	etcd, err := startProcess("etcd", c.bins.etcd, etcdArgs, c.path("etcd.log"))
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.mu.Lock()
	c.etcd = etcd
	c.mu.Unlock()

	c.apiArgs = append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + c.path("apiserver.crt"),
		"--tls-private-key-file=" + c.path("apiserver.key"),
		"--client-ca-file=" + c.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.path("sa.pub"),
		"--service-account-signing-key-file=" + c.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + c.path("cert-dir"),
		// Aggregation layer: lets a test serve an API group (such as CDI's
		// upload.cdi.kubevirt.io) from 127.0.0.1 via an ExternalName Service.
		"--requestheader-client-ca-file=" + c.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + c.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + c.path("front-proxy-client.key"),
		"--enable-aggregator-routing=false",
	}, c.opts.ExtraAPIServerFlags...)
	return c.startAPIServer(ctx)
}

// startAPIServer starts kube-apiserver with c.apiArgs and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	api, err := startProcess("kube-apiserver", c.bins.apiServer, c.apiArgs, c.path("kube-apiserver.log"))
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.mu.Lock()
	c.api = api
	etcd := c.etcd
	c.mu.Unlock()
	return c.waitReady(ctx, etcd, api)
}

// waitReady polls the API server's /readyz until it answers ok, a child
// exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, etcd, api *process) error {
	ctx, cancel := api.startBudget(ctx)
	defer cancel()
	tr, err := rest.TransportFor(c.config)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	url := c.config.Host + "/readyz"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		for _, p := range []*process{etcd, api} {
			if err := p.startFailure(); err != nil {
				return err
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body[:n])
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: kube-apiserver not ready (%s): %w; last lines of %s:\n%s",
				last, context.Cause(ctx), api.logPath, api.logTail(30))
		case <-tick.C:
		}
	}
}

// restConfig returns a config that authenticates with kp's client
// certificate.
func (c *Cluster) restConfig(kp *keyPair) *rest.Config {
	return &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(c.apiPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.ca.CertPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		// No client-side rate limiting: tests are the only clients.
		QPS:   -1,
		Burst: -1,
	}
}

// RESTConfig returns a new copy of the admin (system:masters) client
// configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// AdminClient returns a controller-runtime client with system:masters rights
// and the scheme returned by Scheme.
func (c *Cluster) AdminClient() client.Client { return c.client }

// UserConfig returns a client configuration that authenticates as user, a
// member of groups, with a fresh client certificate signed by the cluster's
// CA. The API server authorizes it with RBAC: without bindings it may do
// nothing, which is how tests provoke Forbidden.
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := issue(certSpec{commonName: user, organization: groups, client: true}, c.pki.ca)
	if err != nil {
		return nil, err
	}
	return c.restConfig(kp), nil
}

// Host returns the API server's URL, https://127.0.0.1:<port>.
func (c *Cluster) Host() string { return c.config.Host }

// APIServerPort returns the API server's port on 127.0.0.1; it stays the
// same across RestartAPIServer.
func (c *Cluster) APIServerPort() int { return c.apiPort }

// EtcdPorts returns etcd's client and peer ports on 127.0.0.1.
func (c *Cluster) EtcdPorts() (client, peer int) { return c.etcdPort, c.peerPort }

// CACertPEM returns the cluster CA's certificate, which signed the API
// server's serving certificate and the client certificates.
func (c *Cluster) CACertPEM() []byte { return c.pki.ca.CertPEM }

// FrontProxyCACertPEM returns the CA certificate that signs the API server's
// front-proxy-client certificate: an aggregated API server run by a test
// verifies the API server's requests (and the X-Remote-* headers) with it.
func (c *Cluster) FrontProxyCACertPEM() []byte { return c.pki.frontProxyCA.CertPEM }

// Dir returns the cluster's folder, holding etcd.log, kube-apiserver.log,
// the certificates and the etcd data. Stop removes it unless
// $VMMIGRATION_TESTCLUSTER_KEEP is "1".
func (c *Cluster) Dir() string { return c.dir }

// Kubeconfig returns a kubeconfig with the admin credentials embedded, whose
// current context is ContextName.
func (c *Cluster) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{
		Server:                   c.config.Host,
		CertificateAuthorityData: c.pki.ca.CertPEM,
	}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.pki.admin.CertPEM,
		ClientKeyData:         c.pki.admin.KeyPEM,
	}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName, Namespace: "default"}
	cfg.CurrentContext = ContextName
	return clientcmd.Write(*cfg)
}

// WriteKubeconfig writes Kubeconfig to path, readable by the owner only.
func (c *Cluster) WriteKubeconfig(path string) error {
	b, err := c.Kubeconfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// StopAPIServer kills the API server (SIGKILL, as in a crash) and waits until
// it has exited and its port is closed. etcd keeps running.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	api := c.api
	c.api = nil
	c.mu.Unlock()
	api.kill()
}

// StartAPIServer starts the API server again on the same port and the same
// etcd after StopAPIServer, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.stopped:
		c.mu.Unlock()
		return errors.New("testcluster: cluster is stopped")
	case c.api != nil:
		c.mu.Unlock()
		return errors.New("testcluster: API server is already running")
	}
	c.mu.Unlock()
	return c.startAPIServer(ctx)
}

// RestartAPIServer kills the API server and starts it again on the same port
// with the same etcd data, returning once it is ready: clients keep their
// configuration and see connection errors in between.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.StopAPIServer()
	return c.StartAPIServer(ctx)
}

// Stop kills the controllers, the API server and etcd (their whole process
// groups), waits for them to exit, and removes the cluster's folder. It is
// idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()
	c.killProcesses()
	unregister(c)
	if os.Getenv(EnvKeep) == "1" {
		return nil
	}
	return os.RemoveAll(c.dir)
}

func (c *Cluster) killProcesses() {
	c.killControllers()
	c.mu.Lock()
	api, etcd := c.api, c.etcd
	c.api, c.etcd = nil, nil
	c.mu.Unlock()
	api.kill()
	etcd.kill()
}
