//go:build linux

package clusterjob_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// These tests run copy Jobs as a cluster runs them: the real kube-apiserver,
// kube-controller-manager (Job controller, garbage collector) and
// kube-scheduler, with podrun as the node's kubelet running the worker
// binary built from cmd/vmmigration-worker; the ESXi host is esxisim over
// real SSH on loopback.

const (
	mib         = 1 << 20
	workerImage = "vmmigration-worker:test"
	password    = "job-test'pw"
)

var (
	cluster testcluster.Shared
	env     struct {
		runner *podrun.Runner
		cs     kubernetes.Interface
		host   *esxisim.Server
		// hostRoot holds the host's datastores.
		hostRoot string
		claims   map[string]string // claim -> folder (a claim per test)
		// claimOf is the claim of each namespace made by setup; runs
		// numbers the namespaces (-count may repeat a test).
		claimOf map[string]string
		runs    int
		bin     string
	}
)

// The tests, each with a claim of its name backed by its own folder.
var claims = []string{"copy-completes", "copy-killed", "copy-deleted", "copy-adopted", "copy-restart"}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	cluster.Options = testcluster.Options{NoCRDs: true, Controllers: true}
	defer func() {
		if env.runner != nil {
			if err := env.runner.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the runner:", err)
			}
		}
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test cluster:", err)
		}
		if env.host != nil {
			env.host.Close()
		}
		if env.hostRoot != "" {
			os.RemoveAll(env.hostRoot)
		}
		for _, d := range env.claims {
			os.RemoveAll(d)
		}
	}()
	return m.Run()
}

// setup starts the shared parts once and returns a new namespace holding
// claim test, bound and emptied.
func setup(t *testing.T, test string) string {
	t.Helper()
	c := cluster.Get(t)
	if env.runner == nil {
		var err error
		if env.bin, err = testcluster.WorkerBinary(); err != nil {
			t.Fatal(err)
		}
		env.claims, env.claimOf = map[string]string{}, map[string]string{}
		for _, n := range claims {
			d, err := os.MkdirTemp("", "clusterjob-claim-")
			if err != nil {
				t.Fatal(err)
			}
			env.claims[n] = d
		}
		// The host outlives this test: its datastores too.
		root, err := os.MkdirTemp("", "clusterjob-esxi-")
		if err != nil {
			t.Fatal(err)
		}
		env.hostRoot = root
		env.host, err = esxisim.New(esxisim.Options{Root: root, Users: []esxisim.User{{Name: "root", Password: password}}})
		if err != nil {
			t.Fatal(err)
		}
		env.host.SetPython("") // dd reads: one command per chunk
		if err := env.host.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		env.runner, err = podrun.Start(context.Background(), podrun.Options{Config: c.RESTConfig(),
			Images: map[string]string{workerImage: env.bin}, Claims: env.claims})
		if err != nil {
			t.Fatal(err)
		}
		if env.cs, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
			t.Fatal(err)
		}
	}
	env.runs++
	ns := fmt.Sprintf("%s-%d", test, env.runs)
	if _, err := env.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := env.claims[test]
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	// The disk's claim, as CDI leaves a blank DataVolume's: bound, in
	// Filesystem mode.
	pv, err := podrun.BindClaim(t.Context(), env.cs, ns, test, dir, false)
	t.Cleanup(func() {
		_ = env.cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv, metav1.DeleteOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	env.claimOf[ns] = test
	return ns
}

// claimDir is the folder behind the claim of namespace ns.
func claimDir(ns string) string { return env.claims[env.claimOf[ns]] }

// copyOf is the copy of the VM's one disk into claim disk-0 of ns.
func copyOf(t *testing.T, ns string, disk esxisim.DiskFiles, attempt int) clusterjob.Copy {
	t.Helper()
	addr, portS, err := net.SplitHostPort(env.host.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portS)
	return clusterjob.Copy{Namespace: ns, Migration: "web", Disk: 0, Attempt: attempt, Image: workerImage,
		Claim: env.claimOf[ns], Secret: clusterjob.SecretName("vmmigration-web"),
		Host: copyjob.Host{Name: "esxi-sim", Address: addr, Port: port, User: "root",
			HostKeyFingerprint: env.host.Fingerprint()},
		Source: copyjob.Disk{Path: disk.Flat, SizeBytes: disk.CapacityBytes}, ChunkSize: mib, Streams: 2}
}

// create renders and creates the migration's Secret (once) and c's Job.
func create(t *testing.T, c clusterjob.Copy) *batchv1.Job {
	t.Helper()
	ctx := t.Context()
	if _, err := env.cs.CoreV1().Secrets(c.Namespace).Get(ctx, c.Secret, metav1.GetOptions{}); err != nil {
		s, err := clusterjob.RenderSecret(c.Namespace, c.Secret, c.Migration, clusterjob.Credential{Password: password}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.cs.CoreV1().Secrets(c.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	job, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.cs.BatchV1().Jobs(c.Namespace).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// observe reads the Job and its pods.
func observe(t *testing.T, ctx context.Context, job *batchv1.Job) (clusterjob.Outcome, error) {
	j, err := env.cs.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		return clusterjob.Outcome{}, err
	}
	pods, err := env.cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		return clusterjob.Outcome{}, err
	}
	return clusterjob.ObserveCopy(j, pods.Items), nil
}

// waitFor observes the Job until cond holds, bounded by the test
// binary's deadline (a busy machine is slower, not broken).
func waitFor(t *testing.T, job *batchv1.Job, what string, cond func(clusterjob.Outcome) bool) clusterjob.Outcome {
	t.Helper()
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-10*time.Second))
		defer cancel()
	}
	var last clusterjob.Outcome
	var lastErr error
	for {
		o, err := observe(t, ctx, job)
		if err == nil && cond(o) {
			return o
		}
		last, lastErr = o, err
		select {
		case <-ctx.Done():
			t.Fatalf("Job %s: waiting for %s: last outcome %+v (error %v)", job.Name, what, last, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func terminal(o clusterjob.Outcome) bool {
	return o.State == clusterjob.Succeeded || o.State == clusterjob.Failed
}

// sha256File is the disk digest of the first n bytes of p.
func sha256File(t *testing.T, p string, n int64) string {
	t.Helper()
	s, err := sparsefile.HashPrefix(t.Context(), p, n)
	if err != nil {
		t.Fatal(err)
	}
	return s.SHA256
}

func addDisk(t *testing.T, name string, size int64, content []esxisim.Extent) esxisim.DiskFiles {
	t.Helper()
	_, files, err := env.host.AddVM(esxisim.VMSpec{Name: fmt.Sprintf("%s-%d", name, env.runs), Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: content}}})
	if err != nil {
		t.Fatal(err)
	}
	return files.Disks[0]
}

// A copy Job writes the disk into its claim's disk.img: the real Job
// controller marks it Complete, the runner reads the worker's result from
// the pod's termination message, and that result, the claim's bytes and
// the source agree. The Job read back from the cluster is adoptable.
func TestCopyJobCompletes(t *testing.T) {
	const size = 24 * mib
	ns := setup(t, "copy-completes")
	disk := addDisk(t, "completes", size, []esxisim.Extent{
		{Offset: 0, Length: mib, Seed: 1}, {Offset: 9*mib + 4096, Length: 2 * mib, Seed: 2}, {Offset: size - mib, Length: mib, Seed: 3}})
	c := copyOf(t, ns, disk, 1)
	job := create(t, c)

	o := waitFor(t, job, "the Job to end", terminal)
	if o.State != clusterjob.Succeeded || o.Result == nil {
		t.Fatalf("outcome %+v", o)
	}
	claim := claimDir(ns)
	if o.Result.SHA256 != disk.SHA256() || sha256File(t, filepath.Join(claim, "disk.img"), size) != disk.SHA256() {
		t.Errorf("result %+v; source sha %s", o.Result, disk.SHA256())
	}
	if o.Result.HostKeyFingerprint != env.host.Fingerprint() || o.Result.ChunksCopied != size/mib {
		t.Errorf("result %+v", o.Result)
	}
	if _, err := os.Stat(filepath.Join(claim, "disk.img.journal")); err != nil {
		t.Errorf("journal beside the data: %v", err)
	}

	want, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	found, err := env.cs.BatchV1().Jobs(ns).Get(t.Context(), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterjob.Adoptable(found, want); err != nil {
		t.Errorf("the Job as the cluster holds it is not adoptable: %v", err)
	}
}

// A worker SIGKILLed mid-copy fails its Job (no retries of the Job's
// own); the runner reads an interrupted outcome, and the next attempt, a
// new Job, resumes from the journal in the claim: the disk equals the
// source and at most one chunk per stream is read twice.
func TestKilledCopyResumesInNextAttempt(t *testing.T) {
	const size, streams = 40 * mib, 2
	ns := setup(t, "copy-killed")
	disk := addDisk(t, "killed", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 7}})
	env.host.ResetStats()
	env.host.SetCommandDelay(40 * time.Millisecond)
	t.Cleanup(func() { env.host.SetCommandDelay(0) })
	job := create(t, copyOf(t, ns, disk, 1))

	o := waitFor(t, job, "the worker to run", func(o clusterjob.Outcome) bool { return o.State == clusterjob.Running || terminal(o) })
	landed := waitForChunks(t, job, o.Pod, 8)
	pid, ok := env.runner.Pid(ns, o.Pod, clusterjob.CopyContainer)
	if !ok {
		t.Fatal("no worker process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o = waitFor(t, job, "the Job to fail", terminal)
	if o.State != clusterjob.Failed || o.Class != fault.Interrupted || !strings.Contains(o.Reason, "exited 137") {
		t.Fatalf("outcome after SIGKILL: %+v", o)
	}
	before := map[int64]bool{}
	for _, r := range env.host.DDReads() {
		if r.Length == mib {
			before[r.Offset] = true
		}
	}
	env.host.SetCommandDelay(0)
	env.host.ResetStats()

	job2 := create(t, copyOf(t, ns, disk, 2))
	if job2.Name == job.Name {
		t.Fatalf("attempt 2 reuses the Job name %s", job.Name)
	}
	o = waitFor(t, job2, "attempt 2 to end", terminal)
	if o.State != clusterjob.Succeeded {
		t.Fatalf("attempt 2: %+v", o)
	}
	if o.Result.SHA256 != disk.SHA256() || sha256File(t, filepath.Join(claimDir(ns), "disk.img"), size) != disk.SHA256() {
		t.Errorf("result %+v; source sha %s", o.Result, disk.SHA256())
	}
	if o.Result.ChunksSkipped < landed {
		t.Errorf("attempt 2 skipped %d chunks; %d were verified before the kill", o.Result.ChunksSkipped, landed)
	}
	var again []int64
	for _, r := range env.host.DDReads() {
		if r.Length == mib && before[r.Offset] {
			again = append(again, r.Offset/mib)
		}
	}
	t.Logf("killed with %d chunks verified; attempt 2 skipped %d, copied %d, re-read chunks %v",
		landed, o.Result.ChunksSkipped, o.Result.ChunksCopied, again)
	// Per stream, the chunk being read or the one being recorded, never
	// both (transfer's runStreams).
	if len(again) > streams {
		t.Errorf("chunks %v were read by both attempts: more than one per stream", again)
	}
}

// A copy pod deleted mid-copy (as by a drain or a person) gets SIGTERM
// and is gone with its termination message; the real Job controller fails
// the Job (backoffLimit 0) and the runner reads an interrupted outcome, to
// retry with a new attempt that resumes from the journal.
func TestDeletedCopyPodIsInterrupted(t *testing.T) {
	const size = 40 * mib
	ns := setup(t, "copy-deleted")
	disk := addDisk(t, "deleted", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 8}})
	env.host.SetCommandDelay(40 * time.Millisecond)
	t.Cleanup(func() { env.host.SetCommandDelay(0) })
	job := create(t, copyOf(t, ns, disk, 1))
	o := waitFor(t, job, "the worker to run", func(o clusterjob.Outcome) bool { return o.State == clusterjob.Running || terminal(o) })
	waitForChunks(t, job, o.Pod, 4)
	if err := env.cs.CoreV1().Pods(ns).Delete(t.Context(), o.Pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	o = waitFor(t, job, "the Job to fail", terminal)
	if o.State != clusterjob.Failed || o.Class != fault.Interrupted {
		t.Fatalf("outcome after the pod's deletion: %+v", o)
	}
	t.Logf("outcome: %s, %s", o.State, o.Reason)
}

// waitForChunks follows the pod's log through the API server until the
// worker says n chunks are verified, and returns how many are.
func waitForChunks(t *testing.T, job *batchv1.Job, pod string, n int) int {
	t.Helper()
	best := 0
	var lastErr error
	waitFor(t, job, fmt.Sprintf("the worker to verify %d chunks", n), func(o clusterjob.Outcome) bool {
		if terminal(o) {
			t.Fatalf("the Job ended before the worker verified %d chunks (log: %d, %v): %+v", n, best, lastErr, o)
		}
		rc, err := env.cs.CoreV1().Pods(job.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: clusterjob.CopyContainer}).Stream(t.Context())
		if err != nil {
			lastErr = err
			return false
		}
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			var l copyjob.Line
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Event == "progress" {
				best = max(best, l.ChunksDone)
			}
		}
		return best >= n
	})
	return best
}

// The runner's side, through the provider's own Kubernetes client: the
// Secret is made once and follows a rotated credential; the copy Job is
// created once, and a second runner (one that restarted after a crash)
// adopts it instead of starting another copy; its result is checked
// against the copy before it is believed. A Job under the wanted name
// from another spec, or of another migration, is never adopted.
func TestEnsureCopyAdopts(t *testing.T) {
	const size = 16 * mib
	ns := setup(t, "copy-adopted")
	kc := kube.NewForRESTConfig(cluster.Get(t).RESTConfig())
	ctx := t.Context()
	disk := addDisk(t, "adopted", size, []esxisim.Extent{{Offset: 2 * mib, Length: 3 * mib, Seed: 5}})
	c := copyOf(t, ns, disk, 1)

	secret, err := clusterjob.RenderSecret(ns, c.Secret, c.Migration, clusterjob.Credential{Password: "old"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clusterjob.EnsureSecret(ctx, kc, secret); err != nil {
		t.Fatal(err)
	}
	secret, _ = clusterjob.RenderSecret(ns, c.Secret, c.Migration, clusterjob.Credential{Password: password}, nil)
	s, err := clusterjob.EnsureSecret(ctx, kc, secret)
	if err != nil || string(s.Data[clusterjob.SecretKeyPassword]) != password {
		t.Fatalf("the rotated credential: %v, %v", s, err)
	}

	want, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := clusterjob.EnsureCopy(ctx, kc, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if active, err := clusterjob.JobActive(ctx, kc, ns, first.Name, time.Now(), 0, time.Now()); err != nil || !active {
		t.Errorf("a Job just created: active %v, %v", active, err)
	}
	var o clusterjob.Outcome
	polls := 0
	waitFor(t, first, "the adopted Job to end", func(clusterjob.Outcome) bool {
		// As a later runner finds it: created again and read back, or
		// read by the caller first.
		var again, found *batchv1.Job
		if polls++; polls%2 == 0 {
			if found, err = kc.GetJob(ctx, ns, want.Name); err != nil {
				t.Fatal(err)
			}
		}
		o, again, err = clusterjob.EnsureCopy(ctx, kc, want, found)
		if err != nil {
			t.Fatalf("a later runner's EnsureCopy: %v", err)
		}
		if again.UID != first.UID {
			t.Fatalf("the Job was made again: UID %s, then %s", first.UID, again.UID)
		}
		return terminal(o)
	})
	// A finished Job no longer holds its host's copy slot once the Job
	// controller marked it (its pod's success ends the copy a little
	// earlier: until the mark, other runners count the slot as held); a
	// missing one holds it only within the grace after it was taken.
	waitFor(t, first, "the Job controller to mark the Job", func(clusterjob.Outcome) bool {
		j, err := kc.GetJob(ctx, ns, first.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	now := time.Now()
	for _, tc := range []struct {
		name       string
		since      time.Time
		wantActive bool
	}{{first.Name, now, false}, {"no-such-job", now, true}, {"no-such-job", now.Add(-time.Hour), false}} {
		active, err := clusterjob.JobActive(ctx, kc, ns, tc.name, tc.since, time.Minute, now)
		if err != nil || active != tc.wantActive {
			t.Errorf("JobActive(%s, since %s): %v, %v; want %v", tc.name, tc.since, active, err, tc.wantActive)
		}
	}
	jobs, err := env.cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("%d Jobs (%v), want 1", len(jobs.Items), err)
	}
	if o.State != clusterjob.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	if err := clusterjob.CheckResult(c, *o.Result); err != nil {
		t.Errorf("the result does not check: %v", err)
	}
	if o.Result.SHA256 != disk.SHA256() {
		t.Errorf("result %+v, source sha %s", o.Result, disk.SHA256())
	}

	// Another spec under attempt 2's name: the migration's own, not run.
	c2 := copyOf(t, ns, disk, 2)
	other := c2
	other.Streams = 1
	squatter, _ := clusterjob.RenderCopy(other)
	if _, err := env.cs.BatchV1().Jobs(ns).Create(ctx, squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want2, _ := clusterjob.RenderCopy(c2)
	var na *clusterjob.NotAdoptableError
	for _, found := range []*batchv1.Job{nil, squatter} {
		if _, _, err := clusterjob.EnsureCopy(ctx, kc, want2, found); !errors.As(err, &na) || na.Foreign || na.FaultClass() != fault.Transient {
			t.Errorf("a Job from another spec (found by the caller: %v): %v", found != nil, err)
		}
	}
	// Another migration's Job under attempt 3's name: a person's call.
	c3 := copyOf(t, ns, disk, 3)
	foreign, _ := clusterjob.RenderCopy(c3)
	foreign.Labels[kube.LabelMigration] = "db"
	if _, err := env.cs.BatchV1().Jobs(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want3, _ := clusterjob.RenderCopy(c3)
	for _, found := range []*batchv1.Job{nil, foreign} {
		if _, _, err := clusterjob.EnsureCopy(ctx, kc, want3, found); !errors.As(err, &na) || !na.Foreign || na.FaultClass() != fault.NeedsHuman {
			t.Errorf("another migration's Job (found by the caller: %v): %v", found != nil, err)
		}
	}
}

// The control plane goes down under a running copy: the API server and
// the controllers are killed, the worker keeps copying (it never talks to
// the API server) and finishes while they are down. Once they are back,
// the node reports the pod's end, the Job controller completes the Job,
// and the runner adopts it and reads its result: one Job, one pod, no
// second copy.
func TestCopySurvivesControlPlaneRestart(t *testing.T) {
	const size = 24 * mib
	ns := setup(t, "copy-restart")
	c0 := cluster.Get(t)
	kc := kube.NewForRESTConfig(c0.RESTConfig())
	disk := addDisk(t, "restart", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 12}})
	env.host.SetCommandDelay(40 * time.Millisecond)
	t.Cleanup(func() { env.host.SetCommandDelay(0) })
	c := copyOf(t, ns, disk, 1)
	job := create(t, c)
	o := waitFor(t, job, "the worker to run", func(o clusterjob.Outcome) bool { return o.State == clusterjob.Running || terminal(o) })
	waitForChunks(t, job, o.Pod, 2)
	pid, ok := env.runner.Pid(ns, o.Pod, clusterjob.CopyContainer)
	if !ok {
		t.Fatal("no worker process")
	}

	c0.StopControllers()
	c0.StopAPIServer()
	// The worker ends while nothing can hear of it.
	env.host.SetCommandDelay(0)
	for !processGone(pid) {
		select {
		case <-t.Context().Done():
			t.Fatal("the worker did not end")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := c0.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c0.StartControllers(t.Context()); err != nil {
		t.Fatal(err)
	}

	want, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	var found *batchv1.Job
	waitFor(t, job, "the Job to end after the restart", func(clusterjob.Outcome) bool {
		o, found, err = clusterjob.EnsureCopy(t.Context(), kc, want, nil)
		return err == nil && terminal(o)
	})
	if o.State != clusterjob.Succeeded || found.UID != job.UID {
		t.Fatalf("outcome %+v, Job %s (created %s)", o, found.UID, job.UID)
	}
	if err := clusterjob.CheckResult(c, *o.Result); err != nil || o.Result.SHA256 != disk.SHA256() {
		t.Errorf("result %+v (%v), source sha %s", o.Result, err, disk.SHA256())
	}
	pods, err := kc.ListPods(t.Context(), ns, map[string]string{batchv1.ControllerUidLabel: string(job.UID)})
	if err != nil || len(pods) != 1 {
		t.Errorf("%d pods (%v), want 1", len(pods), err)
	}
}

// processGone says whether pid has exited (and been reaped).
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
