package podrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// The tests share one cluster with the real controllers and one runner.
var (
	cluster testcluster.Shared
	envOnce sync.Once
	env     *testEnv
	envErr  error
	// namespaces numbers the tests' namespaces (-count may repeat a test).
	namespaces atomic.Int32
)

// shellImage is an image whose entrypoint is /bin/sh; tmpImage one whose
// entrypoint is a script in a folder of this machine's /tmp.
const (
	shellImage = "shell:dev"
	tmpImage   = "in-tmp:dev"
)

type testEnv struct {
	runner   *Runner
	cs       kubernetes.Interface
	claimDir string // backs claim "disk" in every namespace
	entryDir string // holds tmpImage's entrypoint
}

func TestMain(m *testing.M) {
	cluster.Options = testcluster.Options{NoCRDs: true, Controllers: true}
	code := m.Run()
	// The runner first: it deletes its Node through the API server.
	if env != nil {
		if err := env.runner.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the runner:", err)
			code = 1
		}
		_ = os.RemoveAll(env.claimDir)
		_ = os.RemoveAll(env.entryDir)
	}
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test cluster:", err)
		code = 1
	}
	os.Exit(code)
}

// setup returns the shared environment and a fresh namespace.
func setup(t *testing.T) (*testEnv, string) {
	t.Helper()
	c := cluster.Get(t)
	envOnce.Do(func() {
		claimDir, err := os.MkdirTemp("", "podrun-claim-")
		if err != nil {
			envErr = err
			return
		}
		entryDir, err := os.MkdirTemp("", "podrun-entry-")
		if err != nil {
			envErr = err
			return
		}
		entry := filepath.Join(entryDir, "entry")
		if err := os.WriteFile(entry, []byte("#!/bin/sh\nprintf 'entry %s' \"$*\" > /dev/termination-log\n"), 0o755); err != nil {
			envErr = err
			return
		}
		r, err := Start(context.Background(), Options{
			Config: c.RESTConfig(),
			Images: map[string]string{shellImage: "/bin/sh", tmpImage: entry},
			Claims: map[string]string{"disk": claimDir},
		})
		if err != nil {
			envErr = err
			return
		}
		cs, err := kubernetes.NewForConfig(c.RESTConfig())
		if err != nil {
			envErr = err
			return
		}
		env = &testEnv{runner: r, cs: cs, claimDir: claimDir, entryDir: entryDir}
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	ns := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), namespaces.Add(1))
	if _, err := env.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return env, ns
}

// waitCtx bounds a wait by two minutes and by the test's own deadline.
func waitCtx(t *testing.T) context.Context {
	// Bounded by the test binary's deadline, not by a number of seconds
	// that only holds on an idle machine: a busy one is slower, not
	// broken. A stuck wait still ends, a little before the binary's
	// deadline, and says what it waited for.
	d, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), d.Add(-5*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// poll calls cond until it returns true or ctx ends.
func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func newJob(ns, name string, c corev1.Container, vols ...corev1.Volume) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers:                    []corev1.Container{c},
				Volumes:                       vols,
			}},
		},
	}
}

// runJob creates the Job and waits until it has condition Complete or
// Failed, returning that condition and its pod.
func runJob(t *testing.T, e *testEnv, job *batchv1.Job) (batchv1.JobConditionType, *corev1.Pod) {
	t.Helper()
	ctx := waitCtx(t)
	if _, err := e.cs.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var done batchv1.JobConditionType
	t.Cleanup(func() {
		if t.Failed() {
			pods, err := e.cs.CoreV1().Pods(job.Namespace).List(context.Background(), metav1.ListOptions{})
			if err == nil {
				for _, p := range pods.Items {
					t.Logf("pod %s: node %q, status %+v", p.Name, p.Spec.NodeName, p.Status)
				}
			}
		}
	})
	poll(t, ctx, "job "+job.Name+" to finish", func() (bool, error) {
		j, err := e.cs.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				done = c.Type
				return true, nil
			}
		}
		return false, nil
	})
	pods, err := e.cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of job %s: %v, %d pods; want 1", job.Name, err, len(pods.Items))
	}
	return done, &pods.Items[0]
}

func terminated(t *testing.T, pod *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod %s: container statuses %+v, want one terminated", pod.Name, pod.Status.ContainerStatuses)
	}
	return pod.Status.ContainerStatuses[0].State.Terminated
}

// A Job whose container succeeds is Complete; its pod Succeeded with the
// termination message and the log served through pods/log. The container
// has no command: the image's entrypoint (here /bin/sh) runs.
func TestJobComplete(t *testing.T) {
	e, ns := setup(t)
	job := newJob(ns, "ok", corev1.Container{Name: "main", Image: shellImage,
		Args: []string{"-c", "echo hello from $HOSTNAME; printf result > /dev/termination-log; exit 0"}})
	cond, pod := runJob(t, e, job)
	if cond != batchv1.JobComplete {
		t.Fatalf("job condition %s, want Complete", cond)
	}
	if pod.Status.Phase != corev1.PodSucceeded || pod.Spec.NodeName != e.runner.NodeName() {
		t.Errorf("pod phase %s on node %q, want Succeeded on %q", pod.Status.Phase, pod.Spec.NodeName, e.runner.NodeName())
	}
	st := terminated(t, pod)
	if st.ExitCode != 0 || st.Reason != "Completed" || st.Message != "result" || st.StartedAt.IsZero() || st.FinishedAt.IsZero() {
		t.Errorf("terminated %+v, want exit 0, Completed, message %q, times set", st, "result")
	}
	b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(t.Context())
	if want := "hello from " + pod.Name + "\n"; err != nil || string(b) != want {
		t.Errorf("pods/log: %q, %v; want %q", b, err, want)
	}
}

// An image's entrypoint is in the container's own file system: an
// emptyDir mounted at /tmp does not hide it, though the program it stands
// for is in a folder of this machine's /tmp.
func TestEntrypointNotHiddenByVolumes(t *testing.T) {
	e, ns := setup(t)
	job := newJob(ns, "entry", corev1.Container{Name: "main", Image: tmpImage, Args: []string{"a", "b"},
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/tmp"}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	cond, pod := runJob(t, e, job)
	if st := terminated(t, pod); cond != batchv1.JobComplete || st.Message != "entry a b" {
		t.Errorf("job %s, exit %d, message %q; want Complete, %q", cond, st.ExitCode, st.Message, "entry a b")
	}
}

// A Job whose container exits 3 is Failed; its pod Failed with exit code
// 3 and, with FallbackToLogsOnError, the log's end as message.
func TestJobFailed(t *testing.T) {
	e, ns := setup(t)
	job := newJob(ns, "fail", corev1.Container{Name: "main", Image: "unused:dev", Command: []string{"/bin/sh", "-c", "echo disk is gone >&2; exit 3"},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError})
	cond, pod := runJob(t, e, job)
	if cond != batchv1.JobFailed {
		t.Fatalf("job condition %s, want Failed", cond)
	}
	st := terminated(t, pod)
	if pod.Status.Phase != corev1.PodFailed || st.ExitCode != 3 || st.Reason != "Error" || st.Message != "disk is gone\n" {
		t.Errorf("pod %s, terminated %+v; want Failed, exit 3, Error, message from the log", pod.Status.Phase, st)
	}
}

// A secret volume's files have the requested mode and the secret's bytes.
func TestSecretVolume(t *testing.T) {
	e, ns := setup(t)
	if _, err := e.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"password": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := newJob(ns, "secret", corev1.Container{Name: "main", Image: "unused:dev",
		Command:      []string{"/bin/sh", "-c", `{ stat -c %a /var/run/secrets/vmmigration/password; cat /var/run/secrets/vmmigration/password; } > /dev/termination-log`},
		VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/var/run/secrets/vmmigration"}}},
		corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr.To[int32](0o400)}}})
	cond, pod := runJob(t, e, job)
	if st := terminated(t, pod); cond != batchv1.JobComplete || st.Message != "400\ns3cret" {
		t.Errorf("job %s, message %q; want Complete, %q", cond, st.Message, "400\ns3cret")
	}
	if _, err := os.Stat("/var/run/secrets/vmmigration"); err == nil {
		t.Error("the mount point was created on this machine")
	}
}

// A claim's folder is the mount: what the container writes lands in the
// path the test gave for the claim.
func TestClaimMount(t *testing.T) {
	e, ns := setup(t)
	writeThroughClaim(t, e, ns, "disk", e.claimDir, "out", "written by the job")
	if _, err := os.Stat("/srv/podrun-test"); err == nil {
		t.Error("the mount point was created on this machine")
	}
}

// A claim the runner was not told about is mounted from the hostPath of
// the volume the PersistentVolume binder bound it to, as a kubelet mounts
// it: what the container writes lands in that folder.
func TestClaimMountFromVolume(t *testing.T) {
	e, ns := setup(t)
	writeThroughClaim(t, e, ns, "provisioned", t.TempDir(), "out-pv", "through the volume")
	if _, err := os.Stat(filepath.Join(e.claimDir, "out-pv")); err == nil {
		t.Error("written to the folder of another claim")
	}
}

// writeThroughClaim binds claim to a volume on dir, runs a Job that
// writes text into file of the claim's mount, and checks that dir holds
// it.
func writeThroughClaim(t *testing.T, e *testEnv, ns, claim, dir, file, text string) {
	t.Helper()
	pv, err := BindClaim(waitCtx(t), e.cs, ns, claim, dir, false)
	t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv, metav1.DeleteOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	const mount = "/srv/podrun-test/claim"
	job := newJob(ns, "write", corev1.Container{Name: "main", Image: "unused:dev", WorkingDir: mount,
		Command:      []string{"/bin/sh", "-c", fmt.Sprintf("printf '%s' > %s", text, file)},
		VolumeMounts: []corev1.VolumeMount{{Name: "claim", MountPath: mount}}},
		corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	if cond, pod := runJob(t, e, job); cond != batchv1.JobComplete {
		t.Fatalf("job %s, pod %+v; want Complete", cond, pod.Status)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || string(b) != text {
		t.Errorf("%s in the claim's folder: %q, %v; want %q", file, b, err, text)
	}
}

// waitRunning waits until the runner runs the pod's container and returns
// its pid.
func waitRunning(t *testing.T, ctx context.Context, e *testEnv, ns, selector string) (string, int) {
	t.Helper()
	var name string
	var pid int
	poll(t, ctx, "a running container", func() (bool, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		name = pods.Items[0].Name
		var ok bool
		pid, ok = e.runner.Pid(ns, name, "main")
		return ok && pods.Items[0].Status.Phase == corev1.PodRunning, nil
	})
	return name, pid
}

func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// Deleting a Job (propagation Background) has the real garbage collector
// delete its pod, and the runner stop the process and remove the pod.
func TestJobDeletionKillsContainer(t *testing.T) {
	e, ns := setup(t)
	ctx := waitCtx(t)
	job := newJob(ns, "sleeper", corev1.Container{Name: "main", Image: "unused:dev", Command: []string{"/bin/sh", "-c", "exec sleep 300"}})
	if _, err := e.cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, pid := waitRunning(t, ctx, e, ns, "job-name=sleeper")
	if err := e.cs.BatchV1().Jobs(ns).Delete(ctx, "sleeper", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the pod to be gone", func() (bool, error) {
		_, err := e.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	poll(t, ctx, "the process to be gone", func() (bool, error) { return processGone(pid), nil })
}

// A container killed by SIGKILL ends with exit code 137.
func TestKilledContainer(t *testing.T) {
	e, ns := setup(t)
	ctx := waitCtx(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim", Labels: map[string]string{"app": "victim"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "unused:dev", Command: []string{"/bin/sh", "-c", "exec sleep 300"}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, pid := waitRunning(t, ctx, e, ns, "app=victim")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the pod to fail", func() (bool, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodFailed {
			return false, err
		}
		st := terminated(t, p)
		if st.ExitCode != 137 || st.Reason != "Error" {
			t.Errorf("terminated %+v, want exit 137, Error", st)
		}
		return true, nil
	})
}

// A container that ignores SIGTERM is killed once the grace period (here
// the kubelet's minimum, 2 s) is over, and then the pod is removed.
func TestGracePeriodThenSIGKILL(t *testing.T) {
	e, ns := setup(t)
	ctx := waitCtx(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stubborn", Labels: map[string]string{"app": "stubborn"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "main", Image: "unused:dev",
				Command: []string{"/bin/sh", "-c", "trap '' TERM; echo ignoring TERM; exec sleep 300"}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, pid := waitRunning(t, ctx, e, ns, "app=stubborn")
	// Running says the command started, not that it set its trap yet.
	poll(t, ctx, "the trap to be set", func() (bool, error) {
		b, err := e.cs.CoreV1().Pods(ns).GetLogs("stubborn", &corev1.PodLogOptions{}).DoRaw(ctx)
		return strings.Contains(string(b), "ignoring TERM"), err
	})
	start := time.Now()
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, "stubborn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the process to be gone", func() (bool, error) { return processGone(pid), nil })
	if took := time.Since(start); took < minimumGracePeriod {
		t.Errorf("killed after %v, before the %v minimum grace period", took, minimumGracePeriod)
	}
	poll(t, ctx, "the pod to be gone", func() (bool, error) {
		_, err := e.cs.CoreV1().Pods(ns).Get(ctx, "stubborn", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}
