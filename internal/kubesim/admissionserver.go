package kubesim

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/childproc"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// admissionServer is a running tools/kubevirt-admission, shared by every
// sim of this process on one API server. KubeVirt's packages take seconds
// of CPU to initialise (pkg/virt-api/definitions builds its OpenAPI
// validator at init: 4.6 s of CPU measured, over a minute of wall time on
// a busy 2-core machine), more than most tests take; one server per sim
// made that every test's cost.
type admissionServer struct {
	host  string
	proc  *childproc.Process
	dir   string
	log   string
	base  string // https://127.0.0.1:port
	token string
	hc    *http.Client

	users int         // sims registered or registering; guarded by admissionServers.mu
	idle  *time.Timer // stops the server once it has had no users for admissionIdle
}

// admissionIdle is how long a server with no sim is kept for the next
// one: tests start their sims one after another.
const admissionIdle = 30 * time.Second

// admissionServers are this process's servers by API server.
var admissionServers struct {
	mu sync.Mutex
	m  map[string]*admissionServer
}

// simRegistration is the body of tools/kubevirt-admission's PUT
// /sims/{id} (its simRegistration).
type simRegistration struct {
	Namespaces              []string `json:"namespaces"`
	DisableSerialConsoleLog bool     `json:"disableSerialConsoleLog"`
	AdmittedLog             string   `json:"admittedLog"`
}

// acquireAdmissionServer returns the running server for cfg's API server,
// starting one when there is none or the last one exited; release it.
func acquireAdmissionServer(ctx context.Context, cfg *rest.Config) (*admissionServer, error) {
	admissionServers.mu.Lock()
	defer admissionServers.mu.Unlock()
	if admissionServers.m == nil {
		admissionServers.m = map[string]*admissionServer{}
	}
	if a := admissionServers.m[cfg.Host]; a != nil {
		if !a.proc.Exited() {
			if a.idle != nil {
				a.idle.Stop()
				a.idle = nil
			}
			a.users++
			return a, nil
		}
		a.cleanup()
		delete(admissionServers.m, cfg.Host)
	}
	a, err := startAdmissionServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.users = 1
	admissionServers.m[cfg.Host] = a
	return a, nil
}

// release lets go of the server; the last user's release stops it after
// admissionIdle unless another sim takes it.
func (a *admissionServer) release() {
	admissionServers.mu.Lock()
	defer admissionServers.mu.Unlock()
	a.users--
	if a.users > 0 {
		return
	}
	a.idle = time.AfterFunc(admissionIdle, func() {
		admissionServers.mu.Lock()
		defer admissionServers.mu.Unlock()
		if a.users > 0 || admissionServers.m[a.host] != a {
			return
		}
		delete(admissionServers.m, a.host)
		a.stop()
	})
}

// stop stops the server and removes its files.
func (a *admissionServer) stop() {
	a.proc.Kill()
	a.cleanup()
}

func (a *admissionServer) cleanup() {
	a.hc.CloseIdleConnections()
	_ = os.RemoveAll(a.dir)
}

func startAdmissionServer(ctx context.Context, cfg *rest.Config) (_ *admissionServer, err error) {
	bin, err := testcluster.ToolBinary("kubevirt-admission", testcluster.KubeVirtAdmissionVersion)
	if err != nil {
		return nil, fmt.Errorf("kubesim: VirtualMachines are admitted by KubeVirt's own webhooks: %w", err)
	}
	dir, err := os.MkdirTemp("", "kubevirt-admission-")
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	pki, err := newServingPKI("virt-api", []string{"virt-api.kubevirt.svc", "localhost"})
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	kubeconfig, err := kubeconfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	a := &admissionServer{host: cfg.Host, dir: dir, log: filepath.Join(dir, "log"), token: hex.EncodeToString(token)}
	files := map[string][]byte{"tls.crt": pki.certPEM, "tls.key": pki.keyPEM, "ca.crt": pki.caPEM,
		"kubeconfig": kubeconfig, "token": []byte(a.token)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, fmt.Errorf("kubesim: %w", err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.caPEM)
	a.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	logf, err := os.Create(a.log)
	if err != nil {
		return nil, fmt.Errorf("kubesim: %w", err)
	}
	defer logf.Close()
	// The server listens on a port of its own choosing and prints it.
	a.proc, err = childproc.Start(bin, []string{
		"-listen", "127.0.0.1:0",
		"-kubeconfig", filepath.Join(dir, "kubeconfig"),
		"-tls-cert", filepath.Join(dir, "tls.crt"), "-tls-key", filepath.Join(dir, "tls.key"),
		"-ca-bundle", filepath.Join(dir, "ca.crt"),
		"-control-token-file", filepath.Join(dir, "token"),
	}, nil, logf, logf)
	if err != nil {
		return nil, fmt.Errorf("kubesim: starting KubeVirt's admission webhooks: %w", err)
	}
	for a.base == "" {
		if b, _ := os.ReadFile(a.log); len(b) > 0 {
			if _, rest, ok := strings.Cut(string(b), "serving "); ok {
				if line, _, ok := strings.Cut(rest, "\n"); ok {
					a.base = strings.TrimSpace(line)
					break
				}
			}
		}
		select {
		case <-a.proc.Done():
			return nil, fmt.Errorf("kubesim: KubeVirt's admission webhooks exited: %s", tail(a.log))
		case <-ctx.Done():
			a.proc.Kill()
			return nil, fmt.Errorf("kubesim: KubeVirt's admission webhooks did not start (log: %s): %w", tail(a.log), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.HasPrefix(a.base, "https://127.0.0.1:") {
		a.proc.Kill()
		return nil, fmt.Errorf("kubesim: KubeVirt's admission webhooks serve %q, want loopback", a.base)
	}
	return a, nil
}

// register has the server register webhook configurations for the sim
// id; it returns once the API server has them.
func (a *admissionServer) register(ctx context.Context, id string, reg simRegistration) error {
	body, err := json.Marshal(reg)
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	if err := a.control(ctx, http.MethodPut, id, body); err != nil {
		return fmt.Errorf("kubesim: registering KubeVirt's admission webhooks: %w", err)
	}
	return nil
}

// unregister has the server delete the sim's webhook configurations.
func (a *admissionServer) unregister(ctx context.Context, id string) error {
	if a.proc.Exited() {
		return errors.New("the admission server exited")
	}
	return a.control(ctx, http.MethodDelete, id, nil)
}

// registered reports whether the server has the sim id registered.
func (a *admissionServer) registered(ctx context.Context, id string) (bool, error) {
	err := a.control(ctx, http.MethodGet, id, nil)
	if errors.Is(err, errNotRegistered) {
		return false, nil
	}
	return err == nil, err
}

var errNotRegistered = errors.New("not registered")

func (a *admissionServer) control(ctx context.Context, method, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/sims/"+id, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusNotFound && method == http.MethodGet {
		return errNotRegistered
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s /sims/%s: %s: %s", method, id, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
