package podrun

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/childproc"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/loopdev"
	backoff "github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// minimumGracePeriod is the kubelet's minimumGracePeriodInSeconds
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go, v1.37): a container
// always gets this long between SIGTERM and SIGKILL.
const minimumGracePeriod = 2 * time.Second

// retryPrepare is how long a pod whose volumes or images are not ready
// waits before the next try (the kubelet retries on its sync loop).
const retryPrepare = time.Second

// defaultPath is PATH when the container sets none (images usually do).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// podWorker runs one pod, from its first sighting until it is deleted.
type podWorker struct {
	r               *Runner
	namespace, name string
	uid             types.UID
	dir             string
	wake            chan struct{} // a new state was observed

	// loops are the loop devices attached for the pod's file-backed
	// block volumes, detached when the pod's worker ends.
	loops []*loopdev.Device

	mu         sync.Mutex
	latest     *corev1.Pod
	gone       bool
	containers []*container
	startTime  metav1.Time
}

// container is one container's process and what it left.
type container struct {
	spec     corev1.Container
	id       string
	logPath  string
	termPath string
	proc     *childproc.Process
	started  metav1.Time
	finished metav1.Time
	exitCode int32
	reason   string
	message  string
	done     chan struct{} // closed once the process is reaped and the fields above set
}

func newPodWorker(r *Runner, pod *corev1.Pod) *podWorker {
	return &podWorker{
		r: r, namespace: pod.Namespace, name: pod.Name, uid: pod.UID,
		dir:    filepath.Join(r.dir, "pods", string(pod.UID)),
		wake:   make(chan struct{}, 1),
		latest: pod.DeepCopy(),
	}
}

func (w *podWorker) observe(pod *corev1.Pod, gone bool) {
	w.mu.Lock()
	w.latest = pod.DeepCopy()
	w.gone = w.gone || gone
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) snapshot() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.gone
}

func (w *podWorker) pid(name string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		if c.spec.Name == name && c.proc != nil && !c.proc.Exited() {
			return c.proc.Pid(), true
		}
	}
	return 0, false
}

// deleting reports whether the pod is being deleted, and with which grace
// period (the kubelet's setTerminationGracePeriod, kuberuntime_container.go).
func deleting(pod *corev1.Pod, gone bool) (bool, time.Duration) {
	if !gone && pod.DeletionTimestamp == nil {
		return false, 0
	}
	grace := minimumGracePeriod
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return true, max(grace, minimumGracePeriod)
}

func (w *podWorker) run(ctx context.Context) {
	defer func() {
		w.r.server.forget(w.namespace, w.name)
		w.detachLoops()
		_ = os.RemoveAll(w.dir)
	}()
	w.startTime = metav1.Now()
	pod, gone := w.snapshot()
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		w.fail(ctx, "UnsupportedRestartPolicy", fmt.Sprintf("podrun runs pods with restartPolicy Never only, not %s", pod.Spec.RestartPolicy))
		w.awaitDeletion(ctx)
		return
	}
	for {
		if del, _ := deleting(pod, gone); del {
			w.finishDeletion(ctx)
			return
		}
		reason, err := w.start(ctx, pod)
		if err == nil {
			break
		}
		w.waiting(ctx, reason, err.Error())
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-time.After(retryPrepare):
		}
		pod, gone = w.snapshot()
	}
	w.updateStatus(ctx)

	// Wait for every container to end, or for the pod's deletion.
	for !w.allDone() {
		select {
		case <-ctx.Done():
			w.killAll()
			return
		case <-w.anyDone():
			w.updateStatus(ctx)
		case <-w.wake:
			if del, grace := deleting(w.snapshot()); del {
				w.terminate(grace)
			}
		}
	}
	w.updateStatus(ctx)
	w.awaitDeletion(ctx)
}

// awaitDeletion waits for the pod's deletion and completes it.
func (w *podWorker) awaitDeletion(ctx context.Context) {
	for {
		if del, _ := deleting(w.snapshot()); del {
			w.finishDeletion(ctx)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
	}
}

// finishDeletion removes the pod from the API server once its containers
// are gone, as the kubelet's status manager does (a delete with grace
// period 0, preconditioned on the UID).
func (w *podWorker) finishDeletion(ctx context.Context) {
	if _, gone := w.snapshot(); gone {
		return
	}
	err := w.r.cs.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		// Nothing else will retry: say it in the pod's log folder's place,
		// the runner's log.
		fmt.Fprintf(os.Stderr, "podrun: deleting pod %s/%s: %v\n", w.namespace, w.name, err)
	}
}

// terminate sends SIGTERM to every running container and SIGKILL to those
// still running after grace: the CRI StopContainer contract
// (cri-api's api.proto) that the kubelet's killContainer relies on.
func (w *podWorker) terminate(grace time.Duration) {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	for _, c := range cs {
		if !c.proc.Exited() {
			_ = syscall.Kill(c.proc.Pid(), syscall.SIGTERM)
		}
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, c := range cs {
		select {
		case <-c.done:
		case <-timer.C:
			w.killAll()
			return
		}
	}
}

func (w *podWorker) killAll() {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	for _, c := range cs {
		c.proc.Kill()
		<-c.done
	}
}

func (w *podWorker) allDone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.containers {
		select {
		case <-c.done:
		default:
			return false
		}
	}
	return true
}

// anyDone returns a channel closed when one more container has ended.
func (w *podWorker) anyDone() <-chan struct{} {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	ch := make(chan struct{})
	var once sync.Once
	for _, c := range cs {
		select {
		case <-c.done:
			continue
		default:
		}
		go func() {
			select {
			case <-c.done:
				once.Do(func() { close(ch) })
			case <-ch:
			}
		}()
	}
	return ch
}

// start prepares the volumes and starts every container. On failure it
// returns the waiting reason to report, having started nothing.
func (w *podWorker) start(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, c := range pod.Spec.Containers {
		if c.Command == nil {
			if _, ok := w.r.opts.Images[c.Image]; !ok {
				return "ErrImagePull", fmt.Errorf("image %q is not one podrun was given (Options.Images)", c.Image)
			}
		}
	}
	if len(pod.Spec.InitContainers) > 0 {
		return "CreateContainerConfigError", errors.New("podrun does not run init containers")
	}
	vols, err := w.prepareVolumes(ctx, pod)
	if err != nil {
		return "ContainerCreating", err
	}
	var specs []*containerSetup
	for _, c := range pod.Spec.Containers {
		s, err := w.setupContainer(ctx, pod, c, vols)
		if err != nil {
			return "CreateContainerConfigError", fmt.Errorf("container %s: %w", c.Name, err)
		}
		specs = append(specs, s)
	}
	for _, s := range specs {
		w.launch(s)
	}
	return "", nil
}

// containerSetup is what launch needs to start a container.
type containerSetup struct {
	c                 *container
	args, env         []string
	logFile           *os.File
	stdout, stderrLog *criLogWriter
	// started is created by the setup script once the container's file
	// system is ready, just before the container's command starts.
	started string
}

func (w *podWorker) setupContainer(ctx context.Context, pod *corev1.Pod, c corev1.Container, vols map[string]volume) (*containerSetup, error) {
	cdir := filepath.Join(w.dir, "containers", c.Name)
	root := filepath.Join(cdir, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	termPath := filepath.Join(cdir, "termination-log")
	if err := os.WriteFile(termPath, nil, 0o666); err != nil {
		return nil, err
	}
	plan, err := newRootPlan(root)
	if err != nil {
		return nil, err
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no volume of that name", m.Name)
		}
		src := v.path
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("volumeMount %s: %w", m.Name, err)
		}
		target := m.MountPath
		if st.IsDir() {
			if target, err = plan.ensureDir(m.MountPath); err != nil {
				return nil, fmt.Errorf("volumeMount %s: %w", m.Name, err)
			}
			plan.addBind(src, target)
		} else {
			if err := plan.ensureFile(m.MountPath, src); err != nil {
				return nil, fmt.Errorf("volumeMount %s: %w", m.Name, err)
			}
		}
		if m.ReadOnly || v.readOnly {
			plan.readOnly(target)
		}
	}
	for _, d := range c.VolumeDevices {
		v, ok := vols[d.Name]
		if !ok {
			return nil, fmt.Errorf("volumeDevice %s: no volume of that name", d.Name)
		}
		dev, err := w.blockDevice(v.path)
		if err != nil {
			return nil, fmt.Errorf("volumeDevice %s: %w", d.Name, err)
		}
		if err := plan.ensureFile(d.DevicePath, dev); err != nil {
			return nil, fmt.Errorf("volumeDevice %s: %w", d.Name, err)
		}
	}
	tmp := c.TerminationMessagePath
	if tmp == "" {
		tmp = corev1.TerminationMessagePathDefault
	}
	if err := plan.ensureFile(tmp, termPath); err != nil {
		return nil, fmt.Errorf("terminationMessagePath: %w", err)
	}
	workDir := "/"
	if c.WorkingDir != "" {
		if workDir, err = plan.ensureDir(c.WorkingDir); err != nil {
			return nil, fmt.Errorf("workingDir: %w", err)
		}
	}
	env, err := w.containerEnv(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if c.Command == nil {
		// The entrypoint is in the container's own file system, as an
		// image's is: a volume mounted over the folder that holds the
		// program on this machine (a /tmp emptyDir) does not hide it.
		if err := plan.ensureFile(EntrypointPath, w.r.opts.Images[c.Image]); err != nil {
			return nil, fmt.Errorf("entrypoint: %w", err)
		}
		argv = append([]string{EntrypointPath}, c.Args...)
	}
	if len(argv) == 0 {
		return nil, errors.New("no command")
	}
	logPath := filepath.Join(cdir, "log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	return &containerSetup{
		c: &container{
			spec: c, id: "podrun://" + string(w.uid) + "/" + c.Name, logPath: logPath, termPath: termPath,
			done: make(chan struct{}),
		},
		args: plan.args(workDir, filepath.Join(cdir, "started"), argv), env: env, logFile: f,
		started: filepath.Join(cdir, "started"),
		stdout:  &criLogWriter{w: f, mu: &mu, stream: "stdout"}, stderrLog: &criLogWriter{w: f, mu: &mu, stream: "stderr"},
	}, nil
}

// launch starts a prepared container; a failure to start is a container
// that ended with exit code 128 (StartError).
func (w *podWorker) launch(s *containerSetup) {
	c := s.c
	c.started = metav1.Now()
	w.r.server.remember(w.namespace, w.name, c.spec.Name, c.logPath)
	p, err := childproc.Start("/usr/bin/unshare", s.args, s.env, s.stdout, s.stderrLog)
	w.mu.Lock()
	c.proc = p
	w.containers = append(w.containers, c)
	w.mu.Unlock()
	if err != nil {
		_, _ = s.stderrLog.Write([]byte(err.Error() + "\n"))
		s.logFile.Close()
		c.exitCode, c.reason, c.message, c.finished = 128, "StartError", err.Error(), metav1.Now()
		close(c.done)
		return
	}
	// Running, as a runtime reports it, once the command is about to
	// start rather than while its mounts are being made.
	tick := time.NewTicker(5 * time.Millisecond)
	for {
		if _, err := os.Stat(s.started); err == nil || p.Exited() {
			break
		}
		<-tick.C
	}
	tick.Stop()
	c.started = metav1.Now()
	go func() {
		<-p.Done()
		// When a container's main process ends, the rest of it goes too.
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		s.stdout.flush()
		s.stderrLog.flush()
		s.logFile.Close()
		c.finished = metav1.Now()
		c.exitCode = exitCode(p.Err())
		c.reason = "Completed"
		if c.exitCode != 0 {
			c.reason = "Error"
		}
		c.message = terminationMessage(c.termPath, c.logPath,
			c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError && c.exitCode != 0)
		close(c.done)
	}()
}

// exitCode is the code a runtime reports for a process's end: its exit
// status, or 128 plus the signal that killed it.
func exitCode(err error) int32 {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return 128 + int32(ws.Signal())
			}
			return int32(ws.ExitStatus())
		}
	}
	return 128
}

// containerEnv is the container's environment: env in order, valueFrom
// resolved, envFrom first, PATH defaulted, HOSTNAME the pod's name.
func (w *podWorker) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]string, error) {
	vars := map[string]string{"HOSTNAME": pod.Name, "PATH": defaultPath}
	order := []string{"PATH", "HOSTNAME"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		data, err := w.envSource(ctx, ef)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(data) {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		v, err := w.envValue(ctx, pod, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func (w *podWorker) envSource(ctx context.Context, ef corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case ef.SecretRef != nil:
		s, err := w.r.cs.CoreV1().Secrets(w.namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ptr.Deref(ef.SecretRef.Optional, false) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	case ef.ConfigMapRef != nil:
		cm, err := w.r.cs.CoreV1().ConfigMaps(w.namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ptr.Deref(ef.ConfigMapRef.Optional, false) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return cm.Data, nil
	}
	return nil, errors.New("envFrom: only secretRef and configMapRef are supported")
}

func (w *podWorker) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	vf := e.ValueFrom
	switch {
	case vf == nil:
		return e.Value, nil
	case vf.SecretKeyRef != nil:
		s, err := w.r.cs.CoreV1().Secrets(w.namespace).Get(ctx, vf.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := s.Data[vf.SecretKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("secret %s has no key %s", vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
		}
		return string(v), nil
	case vf.ConfigMapKeyRef != nil:
		cm, err := w.r.cs.CoreV1().ConfigMaps(w.namespace).Get(ctx, vf.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := cm.Data[vf.ConfigMapKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("config map %s has no key %s", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key)
		}
		return v, nil
	case vf.FieldRef != nil:
		switch vf.FieldRef.FieldPath {
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		}
		return "", fmt.Errorf("fieldRef %s is not supported", vf.FieldRef.FieldPath)
	}
	return "", errors.New("only value, secretKeyRef, configMapKeyRef and fieldRef are supported")
}

// Status reporting.

// waiting reports the pod Pending with every container waiting for reason.
func (w *podWorker) waiting(ctx context.Context, reason, message string) {
	w.patchStatus(ctx, func(pod *corev1.Pod) {
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
			})
		}
	})
}

// fail reports the pod Failed without running it.
func (w *podWorker) fail(ctx context.Context, reason, message string) {
	w.patchStatus(ctx, func(pod *corev1.Pod) {
		pod.Status.Phase = corev1.PodFailed
		pod.Status.Reason = reason
		pod.Status.Message = message
	})
}

// updateStatus reports the containers' states and the phase they make
// (the kubelet's getPhase for restartPolicy Never: Running while one
// runs, then Succeeded if every container exited 0, else Failed).
func (w *podWorker) updateStatus(ctx context.Context) {
	w.mu.Lock()
	cs := w.containers
	w.mu.Unlock()
	var statuses []corev1.ContainerStatus
	running, failed := false, false
	for _, c := range cs {
		st := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image, ContainerID: c.id}
		select {
		case <-c.done:
			st.State.Terminated = &corev1.ContainerStateTerminated{
				ExitCode: c.exitCode, Reason: c.reason, Message: c.message,
				StartedAt: c.started, FinishedAt: c.finished, ContainerID: c.id,
			}
			st.Started = ptr.To(false)
			failed = failed || c.exitCode != 0
		default:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: c.started}
			st.Started, st.Ready = ptr.To(true), true
			running = true
		}
		statuses = append(statuses, st)
	}
	phase := corev1.PodSucceeded
	switch {
	case running:
		phase = corev1.PodRunning
	case failed:
		phase = corev1.PodFailed
	}
	w.patchStatus(ctx, func(pod *corev1.Pod) {
		pod.Status.Phase = phase
		pod.Status.ContainerStatuses = statuses
		ready, reason := corev1.ConditionTrue, ""
		if phase != corev1.PodRunning {
			ready, reason = corev1.ConditionFalse, "PodCompleted"
		}
		setCondition(pod, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "")
		setCondition(pod, corev1.PodInitialized, corev1.ConditionTrue, "")
		setCondition(pod, corev1.ContainersReady, ready, reason)
		setCondition(pod, corev1.PodReady, ready, reason)
	})
}

func setCondition(pod *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, reason string) {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == t {
			if c.Status != s {
				c.Status, c.LastTransitionTime = s, metav1.Now()
			}
			c.Reason = reason
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()})
}

// patchStatus applies change to the pod's current status and writes it,
// retrying on conflicts, and, like the kubelet's status manager, until the
// API server takes it: a container that ends while the API server is down
// is reported once it is back. A pod that is gone needs no status.
func (w *podWorker) patchStatus(ctx context.Context, change func(*corev1.Pod)) {
	_ = backoff.Do(ctx, statusRetry, func(err error) bool { return !apierrors.IsNotFound(err) },
		func(ctx context.Context) error { return w.patchStatusOnce(ctx, change) })
}

// statusRetry paces status writes the API server did not take, for as
// long as the pod's worker runs.
var statusRetry = backoff.Policy{Attempts: math.MaxInt32, Initial: 100 * time.Millisecond, Max: 2 * time.Second}

func (w *podWorker) patchStatusOnce(ctx context.Context, change func(*corev1.Pod)) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := w.r.cs.CoreV1().Pods(w.namespace).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != w.uid {
			return nil
		}
		change(pod)
		pod.Status.HostIP = "127.0.0.1"
		pod.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		if pod.Status.StartTime == nil {
			pod.Status.StartTime = ptr.To(w.startTime)
		}
		_, err = w.r.cs.CoreV1().Pods(w.namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "podrun: status of pod %s/%s: %v (retrying)\n", w.namespace, w.name, err)
	}
	return err
}
