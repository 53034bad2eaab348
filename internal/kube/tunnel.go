package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UploadProxyService is the Service of CDI's upload proxy in CDI's
// namespace (v1.65.0, pkg/operator/resources/namespaced/uploadproxy.go:
// port 443 to the pods' 8443).
const UploadProxyService = "cdi-uploadproxy"

// UploadProxyServerName is the name in the upload proxy's certificate that
// a tunnel to it is checked against: cdi-uploadproxy.<namespace>.svc.
func UploadProxyServerName(cdiNamespace string) string {
	return UploadProxyService + "." + cdiNamespace + ".svc"
}

// UploadProxyNames are the names CDI gives the upload proxy's serving
// certificate in cdiNamespace (v1.65.0, pkg/operator/resources/cert/
// factory.go): the Service's short, namespaced and svc names.
func UploadProxyNames(cdiNamespace string) []string {
	return []string{UploadProxyService, UploadProxyService + "." + cdiNamespace, UploadProxyServerName(cdiNamespace)}
}

// UploadTunnel is a port-forward through the API server (pods/portforward,
// as `kubectl port-forward` opens one) from a 127.0.0.1 port to a Running
// pod of CDI's upload proxy: the way to the proxy when nothing exposes it.
type UploadTunnel struct {
	// URL is the proxy's base URL through the tunnel, https://127.0.0.1:<port>.
	URL string
	// Namespace and Pod name the proxy's pod; ServerName is the name its
	// certificate is checked against.
	Namespace, Pod, ServerName string

	stop chan struct{}
	done chan struct{}
	once sync.Once
	err  error
}

// Close ends the tunnel and waits for it.
func (t *UploadTunnel) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// Broken returns why the tunnel ended by itself (the API server or the pod
// dropped it), or nil while it is up or after Close.
func (t *UploadTunnel) Broken() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// WaitBroken waits up to d (or ctx) for the tunnel to end by itself, and
// returns Broken.
func (t *UploadTunnel) WaitBroken(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return t.Broken()
}

// OpenUploadTunnel opens an UploadTunnel to a Running, Ready pod behind
// Service cdi-uploadproxy in cdiNamespace. No such Service or pod is
// NeedsHuman (a NotFound for the Service); API trouble is classified as
// usual; a port-forward that cannot be opened is Transient. Close it when
// done.
func (c *Client) OpenUploadTunnel(ctx context.Context, cdiNamespace string) (*UploadTunnel, error) {
	fail := func(class Class, err error) error {
		return &Error{Op: "port-forward", Kind: "Service", Namespace: cdiNamespace, Name: UploadProxyService, Class: class, Err: err}
	}
	pod, port, err := c.uploadProxyPod(ctx, cdiNamespace, fail)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	cfg := rest.CopyConfig(c.cfg)
	c.mu.Unlock()
	u, err := url.Parse(strings.TrimSuffix(cfg.Host, "/"))
	if err != nil {
		return nil, fail(NeedsHuman, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", pod.Namespace, pod.Name)
	// As kubectl port-forward (v1.35, staging/src/k8s.io/kubectl/pkg/cmd/
	// portforward): SPDY tunnelled over a WebSocket, falling back to SPDY
	// where the API server does not upgrade to WebSockets.
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fail(NeedsHuman, err)
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	t := &UploadTunnel{Namespace: pod.Namespace, Pod: pod.Name, ServerName: UploadProxyServerName(cdiNamespace),
		stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, t.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, fail(NeedsHuman, err)
	}
	go func() {
		defer close(t.done)
		t.err = fw.ForwardPorts()
		if t.err == nil {
			select {
			case <-t.stop:
			default:
				t.err = errors.New("the port-forward ended")
			}
		}
	}()
	select {
	case <-ready:
	case <-t.done:
		return nil, fail(Transient, fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, t.err))
	case <-ctx.Done():
		t.Close()
		return nil, fail(Transient, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		t.Close()
		return nil, fail(Transient, fmt.Errorf("port-forward to pod %s/%s has no local port: %v", pod.Namespace, pod.Name, err))
	}
	t.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[0].Local)
	return t, nil
}

// uploadProxyPod is a Running and Ready pod behind CDI's upload proxy
// Service, and the pod port its first Service port targets.
func (c *Client) uploadProxyPod(ctx context.Context, cdiNamespace string, fail func(Class, error) error) (*corev1.Pod, int, error) {
	svc := &corev1.Service{}
	if err := c.get(ctx, "Service", cdiNamespace, UploadProxyService, svc); err != nil {
		return nil, 0, err
	}
	if len(svc.Spec.Selector) == 0 || len(svc.Spec.Ports) == 0 {
		return nil, 0, fail(NeedsHuman, errors.New("the Service has no selector or no port"))
	}
	cl, err := c.raw()
	if err != nil {
		return nil, 0, err
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(cdiNamespace), client.MatchingLabels(svc.Spec.Selector)); err != nil {
		return nil, 0, wrap("list", "Pod", cdiNamespace, "", err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			pod = p
			break
		}
	}
	if pod == nil {
		return nil, 0, fail(Transient, fmt.Errorf("none of its %d pods is Running and Ready (is CDI's upload proxy deployment up?)", len(pods.Items)))
	}
	port, err := podPort(svc.Spec.Ports[0].TargetPort, pod)
	if err != nil {
		return nil, 0, fail(NeedsHuman, err)
	}
	return pod, port, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPort resolves a Service's targetPort on pod: a number as it is, a
// name by the pod's container ports.
func podPort(target intstr.IntOrString, pod *corev1.Pod) (int, error) {
	if target.Type == intstr.Int {
		if target.IntVal <= 0 {
			return 0, errors.New("the Service's targetPort is not set")
		}
		return int(target.IntVal), nil
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == target.StrVal {
				return int(p.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("pod %s/%s has no port named %q (the Service's targetPort)", pod.Namespace, pod.Name, target.StrVal)
}
