package kubesim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The upload proxy's Deployment and Service, as CDI's operator makes them
// (v1.65.0, pkg/operator/resources/namespaced/uploadproxy.go): pods labelled
// cdi.kubevirt.io=cdi-uploadproxy serving on 8443 (its readiness probe
// is HTTPS /healthz there), and Service
// cdi-uploadproxy selecting them, port 443 to 8443.
const (
	// UploadProxyService is the upload proxy's Service in CDINamespace.
	UploadProxyService = "cdi-uploadproxy"
	// UploadProxyPodLabel is the label key that selects its pods; the
	// value is UploadProxyService.
	UploadProxyPodLabel = "cdi.kubevirt.io"
	// UploadProxyPodPort is the port the proxy's container serves on.
	UploadProxyPodPort = 8443
	uploadProxyImage   = "quay.io/kubevirt/cdi-uploadproxy:v1.65.0"
)

// ensureUploadProxyPod makes the upload proxy's pod (Running on Node
// NodeName, whose kubelet forwards its port 8443 to the sim's upload proxy)
// and Service, so that the API server's pods/portforward reaches the proxy
// as it reaches CDI's on a real cluster.
func (s *Sim) ensureUploadProxyPod(ctx context.Context) error {
	labels := map[string]string{UploadProxyPodLabel: UploadProxyService}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: UploadProxyService}}
	if err := upsert(ctx, s.cl, svc, func() {
		svc.Labels = labels
		svc.Spec.Selector = labels
		svc.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(UploadProxyPodPort)}}
	}); err != nil {
		return fmt.Errorf("kubesim: Service %s/%s: %w", CDINamespace, UploadProxyService, err)
	}
	// A pod left by a sim that did not stop is gone, as its deployment
	// would have replaced it.
	if err := s.cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(CDINamespace), client.MatchingLabels(labels), client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("kubesim: upload proxy pods: %w", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: UploadProxyService + "-" + podSuffix(), Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: NodeName,
			Containers: []corev1.Container{{Name: UploadProxyService, Image: uploadProxyImage,
				Ports: []corev1.ContainerPort{{Name: "uploadproxy", ContainerPort: UploadProxyPodPort, Protocol: corev1.ProtocolTCP}}}},
		},
	}
	if err := s.cl.Create(ctx, pod); err != nil {
		return fmt.Errorf("kubesim: upload proxy pod: %w", err)
	}
	s.mu.Lock()
	s.proxyPod = pod.Name
	s.mu.Unlock()
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: "127.0.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: UploadProxyService, Image: uploadProxyImage, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	if err := s.cl.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("kubesim: upload proxy pod status: %w", err)
	}
	return nil
}

// UploadProxyPod returns the name of the upload proxy's pod in CDINamespace
// ("" when the sim runs no kubelet).
func (s *Sim) UploadProxyPod() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proxyPod
}

// removeUploadProxyPod deletes the proxy's pod (the Service stays, as
// CDI's does while its deployment is scaled down).
func (s *Sim) removeUploadProxyPod(ctx context.Context) error {
	name := s.UploadProxyPod()
	if name == "" {
		return nil
	}
	err := s.cl.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: name}}, client.GracePeriodSeconds(0))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Port-forward as the kubelet serves it over SPDY (Kubernetes v1.35,
// pkg/kubelet/cri/streaming/portforward/httpstream.go and portforward.go;
// the API server proxies pods/portforward here, translating a client's
// WebSocket tunnel to SPDY). The client opens a pair of streams per
// connection, "error" and "data", with the same requestID header and the
// pod's port in the port header; the kubelet connects to that port in the
// pod's network namespace and copies bytes both ways, writing a failure
// to the error stream.
const (
	portForwardProtocolV1 = "portforward.k8s.io"
	pfHeaderStreamType    = "streamType"
	pfHeaderPort          = "port"
	pfHeaderRequestID     = "requestID"
	pfStreamData          = "data"
	pfStreamError         = "error"
	// pfIdleTimeout is the kubelet's default streamingConnectionIdleTimeout.
	pfIdleTimeout = 4 * time.Hour
	// pfCreationTimeout is how long the kubelet waits for a pair's second
	// stream (DefaultStreamCreationTimeout).
	pfCreationTimeout = 30 * time.Second
)

// servePortForward is the kubelet's /portForward/{namespace}/{pod}.
func (s *Sim) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, podName := r.PathValue("namespace"), r.PathValue("pod")
	ports := s.podPorts(ns, podName)
	if ports == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, podName), http.StatusNotFound)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{portForwardProtocolV1}); err != nil {
		return // Handshake has answered
	}
	s.handlers.Add(1)
	defer s.handlers.Done()
	drop := s.portForwardDrop()
	streams := make(chan httpstream.Stream, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, acceptPortForwardStream(streams))
	if conn == nil {
		return
	}
	var wg sync.WaitGroup
	// The connection closes first, ending the forwarded connections.
	defer wg.Wait()
	defer conn.Close()
	conn.SetIdleTimeout(pfIdleTimeout)
	pairs := streamPairs{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-conn.CloseChan():
			return
		case <-drop:
			return
		case <-tick.C:
			pairs.expire()
		case st := <-streams:
			p := pairs.add(st)
			if p == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.forwardPort(ns, podName, ports, p.data, p.errs)
				conn.RemoveStreams(p.data, p.errs)
			}()
		}
	}
}

// acceptPortForwardStream checks each new stream's port and type, as the
// kubelet does, and hands it to streams.
func acceptPortForwardStream(streams chan<- httpstream.Stream) httpstream.NewStreamHandler {
	return func(st httpstream.Stream, _ <-chan struct{}) error {
		h := st.Headers()
		if _, err := strconv.ParseUint(h.Get(pfHeaderPort), 10, 16); err != nil {
			return fmt.Errorf("unable to parse %q as a port: %v", h.Get(pfHeaderPort), err)
		}
		if t := h.Get(pfHeaderStreamType); t != pfStreamData && t != pfStreamError {
			return fmt.Errorf("invalid stream type %q", t)
		}
		streams <- st
		return nil
	}
}

// streamPair is a forwarded connection's data and error streams.
type streamPair struct {
	data, errs httpstream.Stream
	created    time.Time
}

// streamPairs holds the pairs waiting for their second stream, by
// request ID.
type streamPairs map[string]*streamPair

// add files st under its request ID and returns its pair once both
// streams are there (nil until then).
func (pairs streamPairs) add(st httpstream.Stream) *streamPair {
	id := st.Headers().Get(pfHeaderRequestID)
	p := pairs[id]
	if p == nil {
		p = &streamPair{created: time.Now()}
		pairs[id] = p
	}
	if st.Headers().Get(pfHeaderStreamType) == pfStreamData {
		p.data = st
	} else {
		p.errs = st
	}
	if p.data == nil || p.errs == nil {
		return nil
	}
	delete(pairs, id)
	return p
}

// expire resets the pairs whose second stream has not come in time.
func (pairs streamPairs) expire() {
	for id, p := range pairs {
		if time.Since(p.created) > pfCreationTimeout {
			for _, st := range []httpstream.Stream{p.data, p.errs} {
				if st != nil {
					_ = st.Reset()
				}
			}
			delete(pairs, id)
		}
	}
}

// portForwardDrop returns the channel DropPortForwards closes.
func (s *Sim) portForwardDrop() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pfDrop == nil {
		s.pfDrop = make(chan struct{})
	}
	return s.pfDrop
}

// DropPortForwards ends every port-forward the kubelet serves, as a
// kubelet restart or a node's network blip does: the client's tunnel
// breaks.
func (s *Sim) DropPortForwards() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pfDrop != nil {
		close(s.pfDrop)
	}
	s.pfDrop = make(chan struct{})
}

// podPorts maps the pod's ports to the sim's loopback listeners that play
// them, or is nil when the sim plays no such pod.
func (s *Sim) podPorts(ns, podName string) map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns == CDINamespace && podName != "" && podName == s.proxyPod {
		return map[int]int{UploadProxyPodPort: s.proxy.port}
	}
	return nil
}

// forwardPort copies one connection (kubelet: portForward), as the CRI
// runtime does with the pod's port.
func (s *Sim) forwardPort(ns, podName string, ports map[int]int, data, errs httpstream.Stream) {
	defer data.Close()
	defer errs.Close()
	port, _ := strconv.Atoi(data.Headers().Get(pfHeaderPort))
	fail := func(err error) {
		_, _ = fmt.Fprintf(errs, "error forwarding port %d to pod %s/%s: %v", port, ns, podName, err)
	}
	local, ok := ports[port]
	if !ok {
		fail(fmt.Errorf("failed to connect to localhost:%d inside namespace %q: connection refused", port, ns))
		return
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)), 5*time.Second)
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	// The client's end closing closes the write side to the pod; the
	// connection ends when the pod's end does.
	go func() {
		_, _ = io.Copy(c, data)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(data, c)
	}()
	select {
	case <-done:
	case <-s.ctx.Done():
	}
}
