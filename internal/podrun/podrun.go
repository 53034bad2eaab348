// Package podrun is a simulated kubelet for the test cluster: it registers
// a Node that the real kube-scheduler can bind pods to, and runs each
// container of a pod bound there as a process on this machine, so that a
// Job created in a test cluster with the real controllers
// (testcluster.Options.Controllers) ends Complete or Failed from real
// controller logic, with the provider's worker doing real work.
//
// It is a package of its own rather than part of kubesim because it needs
// none of kubesim's KubeVirt and CDI machinery (QEMU, qemu-img, CDI's upload
// server), and kubesim's kubelet only pretends to run virt-launcher pods.
// Each runs its own Node, so both can serve one cluster.
//
// What a container gets (see rootfs.go for how the paths become real
// without a container engine; it needs root):
//
//   - its command and args; without a command, the image's entrypoint,
//     which is the local program Options.Images maps the image to, seen
//     at EntrypointPath (an image not mapped leaves the container Waiting
//     in ErrImagePull);
//   - the environment from env (value and valueFrom secretKeyRef,
//     configMapKeyRef, fieldRef of metadata.name/namespace/uid,
//     spec.nodeName), PATH defaulted and HOSTNAME set to the pod's name;
//   - workingDir, created when missing;
//   - volumes: secret and configMap (files with the requested modes,
//     mounted read-only), emptyDir (a folder removed with the pod) and
//     persistentVolumeClaim (the path Options.Claims gives for the claim,
//     else the hostPath of the PersistentVolume it is bound to: a folder
//     for volumeMounts, a file or block device for volumeDevices),
//     with subPath and readOnly honoured;
//   - a termination log at terminationMessagePath.
//
// The pod goes Pending, Running (containerStatuses running, startedAt),
// then Succeeded or Failed with each container's exit code (128+signal when
// killed by one), reason Completed or Error, and its termination message,
// read as the kubelet does (see terminationMessage). Logs are kept in the
// CRI format and served through the API server's pods/log. Deleting the
// pod sends SIGTERM, then SIGKILL after the grace period, as the kubelet
// does, and removes the pod once its containers are gone.
//
// Only restartPolicy Never is supported (Jobs use it; a pod asking for
// another is failed at once). Not supported: init and sidecar containers,
// probes, lifecycle hooks, resource limits, service account tokens,
// service environment variables, pods/exec and pods/attach, following
// logs, other volume types (the pod stays Pending, saying which).
package podrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// EntrypointPath is where a container without a command finds its
// image's entrypoint (the program Options.Images names), bound there
// as an image would hold it, whatever volumes are mounted.
const EntrypointPath = "/.podrun/entrypoint"

// DefaultNodeName is the Node a Runner registers unless told otherwise.
const DefaultNodeName = "podrun-node"

// Options configure Start.
type Options struct {
	// Config is an admin client configuration of the cluster (for example
	// testcluster.Cluster.RESTConfig()).
	Config *rest.Config
	// NodeName is the Node to register and run pods for. Default
	// DefaultNodeName.
	NodeName string
	// Images maps an image reference, exactly as pods name it, to the local
	// program that is its entrypoint.
	Images map[string]string
	// Claims maps a PersistentVolumeClaim, as "namespace/name" or just
	// "name", to the path on this machine that backs it: a folder for a
	// claim mounted with volumeMounts, a file or block device for one
	// attached with volumeDevices. A claim not listed is mounted from the
	// hostPath of the PersistentVolume it is bound to.
	Claims map[string]string
	// Dir holds the pods' volumes, termination logs and container logs.
	// Default: a temporary folder that Stop removes.
	Dir string
	// CPU, Memory and Pods are the Node's capacity and allocatable.
	// Defaults: this machine's CPUs, 8Gi, 110.
	CPU, Memory, Pods resource.Quantity
}

// Runner is a running simulated kubelet. Its methods are safe for
// concurrent use.
type Runner struct {
	opts   Options
	cs     kubernetes.Interface
	dir    string
	ownDir bool
	server *logServer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	pods map[types.UID]*podWorker
}

// Start registers the Node, starts serving container logs on a free
// 127.0.0.1 port, and runs the pods bound to the Node until Stop.
func Start(ctx context.Context, opts Options) (*Runner, error) {
	if opts.Config == nil {
		return nil, errors.New("podrun: Options.Config is required")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("podrun: containers run in private mount namespaces, which needs root")
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if opts.CPU.IsZero() {
		opts.CPU = *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)
	}
	if opts.Memory.IsZero() {
		opts.Memory = resource.MustParse("8Gi")
	}
	if opts.Pods.IsZero() {
		opts.Pods = resource.MustParse("110")
	}
	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("podrun: %w", err)
	}
	r := &Runner{opts: opts, cs: cs, dir: opts.Dir, pods: map[types.UID]*podWorker{}}
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "podrun-"); err != nil {
			return nil, fmt.Errorf("podrun: %w", err)
		}
		r.ownDir = true
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			_ = r.Stop()
		}
	}()
	if r.server, err = startLogServer(r); err != nil {
		return nil, err
	}
	if err := r.registerNode(ctx); err != nil {
		return nil, err
	}
	if err := r.watchPods(ctx); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// NodeName is the Node the runner registered.
func (r *Runner) NodeName() string { return r.opts.NodeName }

// registerNode creates the Node, Ready, reachable at 127.0.0.1 only, its
// kubelet endpoint the runner's log server.
func (r *Runner) registerNode(ctx context.Context) error {
	name := r.opts.NodeName
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: goruntime.GOOS, corev1.LabelArchStable: goruntime.GOARCH,
	}}}
	created, err := r.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = r.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("podrun: node %s: %w", name, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{corev1.ResourceCPU: r.opts.CPU, corev1.ResourceMemory: r.opts.Memory, corev1.ResourcePods: r.opts.Pods}
	created.Status = corev1.NodeStatus{
		// The API server dials the first address of its preferred types
		// for pods/log: a Hostname address would send it to DNS.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(r.server.port)}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Capacity:    capacity,
		Allocatable: capacity,
		NodeInfo:    corev1.NodeSystemInfo{OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH, KubeletVersion: "podrun"},
	}
	updated, err := r.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("podrun: node %s status: %w", name, err)
	}
	// The API server's TaintNodesByCondition admission gives a new Node
	// the node.kubernetes.io/not-ready:NoSchedule taint, which the node
	// lifecycle controller removes once the Node is Ready. The test
	// cluster does not run that controller (it would want Lease heartbeats
	// from every Node, the sim's too): the runner removes the taint in its
	// place.
	var taints []corev1.Taint
	for _, t := range updated.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			taints = append(taints, t)
		}
	}
	if len(taints) != len(updated.Spec.Taints) {
		updated.Spec.Taints = taints
		if _, err := r.cs.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("podrun: node %s taints: %w", name, err)
		}
	}
	return nil
}

// watchPods runs an informer on the pods bound to the Node, as the
// kubelet's API source does (field selector spec.nodeName).
func (r *Runner) watchPods(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.opts.NodeName).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj, false) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			r.observe(obj, true)
		},
	})
	if err != nil {
		return fmt.Errorf("podrun: %w", err)
	}
	factory.Start(r.ctx.Done())
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		cache.WaitForCacheSync(r.ctx.Done(), inf.HasSynced)
	}()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("podrun: listing pods: %w", ctx.Err())
	}
}

// observe hands a pod's new state to its worker, starting one for a pod
// seen for the first time that has not finished.
func (r *Runner) observe(obj any, gone bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return
	}
	w := r.pods[pod.UID]
	if w == nil {
		if gone || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		w = newPodWorker(r, pod)
		r.pods[pod.UID] = w
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			w.run(r.ctx)
			r.mu.Lock()
			delete(r.pods, pod.UID)
			r.mu.Unlock()
		}()
	}
	w.observe(pod, gone)
}

// Pid returns the process id of a running container, for tests that
// signal it.
func (r *Runner) Pid(namespace, pod, container string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.pods {
		if w.namespace == namespace && w.name == pod {
			return w.pid(container)
		}
	}
	return 0, false
}

// Stop kills every container (SIGKILL), stops serving, deletes the Node if
// it is still the runner's, and removes Options.Dir when the runner made
// it. Pods are left as they are.
func (r *Runner) Stop() error { return r.stop(true) }

// Crash stops the runner as a machine that is lost does: every container
// killed, nothing more said to the API server (its Node and pods keep the
// status they had, until a controller or a person acts on them), and
// Options.Dir removed when the runner made it.
func (r *Runner) Crash() error { return r.stop(false) }

func (r *Runner) stop(deleteNode bool) error {
	r.cancel()
	r.wg.Wait()
	var errs []error
	if r.server != nil && !deleteNode {
		r.server.close()
		r.server = nil
	}
	if r.server != nil {
		r.server.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		node, err := r.cs.CoreV1().Nodes().Get(ctx, r.opts.NodeName, metav1.GetOptions{})
		if err == nil && node.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(r.server.port) {
			err = r.cs.CoreV1().Nodes().Delete(ctx, r.opts.NodeName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &node.UID}})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("podrun: deleting node %s: %w", r.opts.NodeName, err))
		}
		r.server = nil
	}
	if r.ownDir {
		if err := os.RemoveAll(r.dir); err != nil {
			errs = append(errs, err)
		}
		r.ownDir = false
	}
	return errors.Join(errs...)
}
