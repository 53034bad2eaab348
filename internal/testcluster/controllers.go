package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultControllers are the kube-controller-manager controllers
// Options.Controllers runs unless Options.ControllerNames says otherwise
// (names as in k8s.io/kubernetes v1.37 cmd/kube-controller-manager/names):
// Jobs and their pods, the garbage collector that deletes dependents of a
// deleted owner, the TTL of finished Jobs, and the binder that completes
// the binding of a claim to a volume (kube-scheduler does not place a pod
// whose claim lacks the bind-completed annotation it sets).
var DefaultControllers = []string{
	"job-controller",
	"garbage-collector-controller",
	"ttl-after-finished-controller",
	"persistentvolume-binder-controller",
}

// Identities of the controller manager and the scheduler: the users that
// Kubernetes' bootstrap RBAC policy grants their rights to.
const (
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
)

// controlPlane is the arguments of the controller manager and scheduler,
// fixed at Start so that a restart reuses them.
type controlPlane struct {
	kcmArgs, schedArgs []string
}

// prepareControllers writes the kubeconfigs of the controller manager and
// the scheduler, each with a client certificate for its bootstrap identity.
func (c *Cluster) prepareControllers() error {
	for _, comp := range []struct{ name, user string }{
		{"kube-controller-manager", controllerManagerUser},
		{"kube-scheduler", schedulerUser},
	} {
		kp, err := issue(certSpec{commonName: comp.user, client: true}, c.pki.ca)
		if err != nil {
			return err
		}
		b, err := c.componentKubeconfig(kp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.path(comp.name+".kubeconfig"), b, 0o600); err != nil {
			return err
		}
	}
	names := c.opts.ControllerNames
	if len(names) == 0 {
		names = DefaultControllers
	}
	common := func(name string) []string {
		kubeconfig := c.path(name + ".kubeconfig")
		return []string{
			"--kubeconfig=" + kubeconfig,
			// The secure port serves /healthz, which Start polls; the
			// delegated authentication and authorization are the
			// component's own identity, as kubeadm sets them up.
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--cert-dir=" + c.path(name+"-certs"),
			"--leader-elect=false",
		}
	}
	c.ctl.kcmArgs = append(common("kube-controller-manager"),
		"--controllers="+strings.Join(names, ","),
		// Each controller acts as its own service account
		// (system:serviceaccount:kube-system:job-controller, ...) with the
		// rights of its bootstrap role, as on a kubeadm cluster.
		"--use-service-account-credentials=true",
	)
	c.ctl.schedArgs = common("kube-scheduler")
	return nil
}

// componentKubeconfig is a kubeconfig for the API server authenticating
// with kp.
func (c *Cluster) componentKubeconfig(kp *keyPair) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: c.config.Host, CertificateAuthorityData: c.pki.ca.CertPEM}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	return clientcmd.Write(*cfg)
}

// startControllers starts kube-controller-manager and kube-scheduler on
// free loopback ports and waits until both answer /healthz.
func (c *Cluster) startControllers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := c.startControllersOnce(ctx)
		if err == nil {
			return nil
		}
		c.killControllers()
		if attempt == 3 || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
}

func (c *Cluster) startControllersOnce(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	kcm, err := startProcess("kube-controller-manager", c.bins.controllerManager,
		append(c.ctl.kcmArgs, "--secure-port="+strconv.Itoa(ports[0])), c.path("kube-controller-manager.log"))
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.mu.Lock()
	c.kcm = kcm
	c.mu.Unlock()
	sched, err := startProcess("kube-scheduler", c.bins.scheduler,
		append(c.ctl.schedArgs, "--secure-port="+strconv.Itoa(ports[1])), c.path("kube-scheduler.log"))
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	c.mu.Lock()
	c.sched = sched
	c.mu.Unlock()
	if err := waitHealthy(ctx, kcm, ports[0]); err != nil {
		return err
	}
	return waitHealthy(ctx, sched, ports[1])
}

// waitHealthy polls https://127.0.0.1:port/healthz of p (its serving
// certificate is self-signed) until it answers ok, p exits, or ctx ends.
func waitHealthy(ctx context.Context, p *process, port int) error {
	ctx, cancel := p.startBudget(ctx)
	defer cancel()
	hc := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // a throwaway loopback certificate
		Timeout:   2 * time.Second,
	}
	defer hc.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		if err := p.startFailure(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s not healthy (%s): %w; last lines of %s:\n%s",
				p.name, last, context.Cause(ctx), p.logPath, p.logTail(30))
		case <-tick.C:
		}
	}
}

// StopControllers kills kube-controller-manager and kube-scheduler (SIGKILL,
// as in a crash) and waits until they have exited. Without
// Options.Controllers it does nothing.
func (c *Cluster) StopControllers() { c.killControllers() }

// StartControllers starts kube-controller-manager and kube-scheduler again
// after StopControllers, and waits until they are healthy.
func (c *Cluster) StartControllers(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case !c.opts.Controllers:
		c.mu.Unlock()
		return errors.New("testcluster: the cluster was started without Options.Controllers")
	case c.stopped:
		c.mu.Unlock()
		return errors.New("testcluster: cluster is stopped")
	case c.kcm != nil || c.sched != nil:
		c.mu.Unlock()
		return errors.New("testcluster: the controllers are already running")
	}
	c.mu.Unlock()
	return c.startControllers(ctx)
}

func (c *Cluster) killControllers() {
	c.mu.Lock()
	kcm, sched := c.kcm, c.sched
	c.kcm, c.sched = nil, nil
	c.mu.Unlock()
	kcm.kill()
	sched.kill()
}
