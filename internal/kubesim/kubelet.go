package kubesim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The virt-launcher pod of a booted VMI, as KubeVirt makes it.
const (
	// LabelKubeVirt is "virt-launcher" on virt-launcher pods.
	LabelKubeVirt = "kubevirt.io"
	// LabelCreatedBy is the VMI's UID on its virt-launcher pod.
	LabelCreatedBy = "kubevirt.io/created-by"
	// LabelVMName is the VMI's name on its virt-launcher pod.
	LabelVMName = "vm.kubevirt.io/name"
	// ContainerCompute runs QEMU.
	ContainerCompute = "compute"
	// ContainerConsoleLog streams the guest's serial console to its log
	// (KubeVirt's logSerialConsole).
	ContainerConsoleLog = "guest-console-log"

	launcherImage = "quay.io/kubevirt/virt-launcher:v1.5.0"
)

// startKubelet serves the kubelet API's container logs and port-forward
// (portforward.go) on a free 127.0.0.1 port and registers Node NodeName
// there, so that the API server's pods/log and pods/portforward reach the
// sim. The API server is not given a kubelet
// CA, so it does not verify this throwaway certificate.
func (s *Sim) startKubelet(ctx context.Context) error {
	pki, err := newServingPKI(NodeName, []string{NodeName, "localhost"})
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveContainerLogs)
	mux.HandleFunc("/portForward/{namespace}/{pod}", s.servePortForward)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	s.kubelet, err = s.serveTLS(mux, func(srv *http.Server) {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12}
	})
	if err != nil {
		return err
	}
	return s.registerNode(ctx)
}

// simulatedKubeletTaint keeps the real scheduler (testcluster's
// Options.Controllers) from placing pods on the sim's Node: its kubelet
// runs only the pods the sim makes there itself, by nodeName, so a Job's
// pod bound to it would wait forever. Pods for a node that runs them go
// to package podrun's.
var simulatedKubeletTaint = corev1.Taint{Key: "kubesim.vmmigration.io/simulated-kubelet", Effect: corev1.TaintEffectNoSchedule}

// registerNode creates (or takes over) Node NodeName: Ready, reachable at
// 127.0.0.1 only, its kubelet on the sim's port.
func (s *Sim) registerNode(ctx context.Context) error {
	node := &corev1.Node{}
	err := s.cl.Get(ctx, client.ObjectKey{Name: NodeName}, node)
	if apierrors.IsNotFound(err) {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
			"kubernetes.io/hostname": NodeName, "kubevirt.io/schedulable": "true",
		}}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{simulatedKubeletTaint}}}
		err = s.cl.Create(ctx, node)
	} else if err == nil && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&simulatedKubeletTaint) }) {
		node.Spec.Taints = append(node.Spec.Taints, simulatedKubeletTaint)
		err = s.cl.Update(ctx, node)
	}
	if err != nil {
		return fmt.Errorf("kubesim: node %s: %w", NodeName, err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		// The API server dials the first address of its preferred types:
		// a Hostname address would send it to DNS.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(s.kubelet.port)}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods: resource.MustParse("110"),
		},
	}
	node.Status.Allocatable = node.Status.Capacity
	if err := s.cl.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("kubesim: node %s status: %w", NodeName, err)
	}
	return nil
}

// unregisterNode deletes Node NodeName if it still points at this sim.
func (s *Sim) unregisterNode(ctx context.Context) error {
	node := &corev1.Node{}
	if err := s.cl.Get(ctx, client.ObjectKey{Name: NodeName}, node); err != nil {
		return client.IgnoreNotFound(err)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(s.kubelet.port) {
		return nil
	}
	return client.IgnoreNotFound(s.cl.Delete(ctx, node, client.Preconditions{UID: &node.UID}))
}

// ensureLauncherPod creates the VMI's virt-launcher pod, bound to NodeName,
// once.
func (s *Sim) ensureLauncherPod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, b *bootedGuest) error {
	if b.state().pod != "" {
		return nil
	}
	var pods corev1.PodList
	if err := s.cl.List(ctx, &pods, client.InNamespace(vmi.Namespace), client.MatchingLabels{LabelCreatedBy: string(vmi.UID)}); err != nil {
		return fmt.Errorf("listing virt-launcher pods: %w", err)
	}
	if len(pods.Items) > 0 {
		b.update(func(b *bootedGuest) { b.pod = pods.Items[0].Name })
		return nil
	}
	labels := map[string]string{}
	for k, v := range vmi.Labels {
		labels[k] = v
	}
	labels[LabelKubeVirt] = "virt-launcher"
	labels[LabelCreatedBy] = string(vmi.UID)
	labels[LabelVMName] = vmi.Name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: vmi.Namespace,
			Name:      "virt-launcher-" + vmi.Name + "-" + podSuffix(),
			Labels:    labels,
			Annotations: map[string]string{
				"kubevirt.io/domain":                      vmi.Name,
				"kubectl.kubernetes.io/default-container": ContainerCompute,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
				Name: vmi.Name, UID: vmi.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:      NodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: ContainerCompute, Image: launcherImage, Command: []string{"/usr/bin/virt-launcher-monitor"}},
			},
		},
	}
	if serialConsoleLogged(vmi, s.opts.DisableSerialConsoleLog) {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: ContainerConsoleLog, Image: launcherImage,
			Command: []string{"/usr/bin/virt-tail"}, Args: []string{"--logfile", "/var/run/kubevirt-private/" + string(vmi.UID) + "/virt-serial0-log"}})
	}
	if err := s.cl.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating virt-launcher pod: %w", err)
	}
	b.update(func(b *bootedGuest) { b.pod = pod.Name })
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", StartTime: ptr.To(metav1.Now())}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		})
	}
	// The pod's status is cosmetic (the API server serves its logs by
	// spec.nodeName): a failure here is not worth a retry.
	_ = s.cl.Status().Update(ctx, pod)
	return nil
}

func podSuffix() string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

// serveContainerLogs is the kubelet's GET /containerLogs/{ns}/{pod}/{c}:
// the guest's serial console for guest-console-log (tailLines, limitBytes
// and timestamps honoured; follow is not: the log so far is returned),
// QEMU's start for compute.
func (s *Sim) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	ns, podName, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	var b *bootedGuest
	s.mu.Lock()
	for _, g := range s.boots {
		if g.namespace == ns && g.state().pod == podName {
			b = g
		}
	}
	s.mu.Unlock()
	if b == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s not found", ns, podName), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	tail := -1
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "tailLines: want a non-negative integer", http.StatusBadRequest)
			return
		}
		tail = n
	}
	limit := -1
	if v := q.Get("limitBytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			http.Error(w, "limitBytes: want a positive integer", http.StatusBadRequest)
			return
		}
		limit = n
	}
	st := b.state()
	var lines []string
	switch container {
	case ContainerConsoleLog:
		if st.guest != nil && tail != 0 {
			lines = st.guest.ConsoleTail(max(tail, 0))
		}
	case ContainerCompute:
		lines = computeLog(st)
		if tail >= 0 && len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
	default:
		http.Error(w, fmt.Sprintf("container %q not found in pod %s/%s", container, ns, podName), http.StatusNotFound)
		return
	}
	var out strings.Builder
	for _, l := range lines {
		if q.Get("timestamps") == "true" {
			out.WriteString(time.Now().UTC().Format(time.RFC3339Nano) + " ")
		}
		out.WriteString(l)
		out.WriteByte('\n')
	}
	text := out.String()
	if limit >= 0 && len(text) > limit {
		text = text[:limit]
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(text))
}

// computeLog is the compute container's log: virt-launcher's JSON lines
// about the domain.
func computeLog(st bootState) []string {
	entry := func(level, msg string) string {
		b, _ := json.Marshal(map[string]string{"component": "virt-launcher", "level": level, "msg": msg})
		return string(b)
	}
	var out []string
	switch {
	case st.startErr != nil:
		out = append(out, entry("error", "Failed to start the domain: "+st.startErr.Error()))
	case st.guest != nil:
		out = append(out, entry("info", "Domain started: qemu-system-x86_64 "+strings.Join(st.guest.Args(), " ")))
	}
	if st.exited {
		out = append(out, entry("info", "Domain stopped: "+st.exitMsg))
	}
	return out
}

// serialConsoleLogged follows KubeVirt v1.7.0's isSerialConsoleLogEnabled
// (pkg/virt-controller/services/serialconsolelog.go), which decides
// whether the virt-launcher pod gets its guest-console-log container: not
// without the serial console (autoattachSerialConsole false); else as the
// VMI's logSerialConsole says; else unless the cluster sets
// disableSerialConsoleLog.
func serialConsoleLogged(vmi *kubevirtv1.VirtualMachineInstance, clusterDisabled bool) bool {
	d := vmi.Spec.Domain.Devices
	if d.AutoattachSerialConsole != nil && !*d.AutoattachSerialConsole {
		return false
	}
	if d.LogSerialConsole != nil {
		return *d.LogSerialConsole
	}
	return !clusterDisabled
}
