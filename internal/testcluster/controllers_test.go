package testcluster

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// With Options.Controllers the real Job controller creates a Job's pod and
// the real scheduler reports that no node can take it; both survive a
// restart.
func TestControllersActOnJobs(t *testing.T) {
	c := StartT(t, Options{NoCRDs: true, Controllers: true})
	// Bounded by the test binary's deadline (a busy machine is slower,
	// not broken).
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	cl := c.AdminClient()

	waitUnschedulable := func(name string) {
		t.Helper()
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "example:1", Command: []string{"true"}}},
				}},
			},
		}
		if err := cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		for {
			var pods corev1.PodList
			if err := cl.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"job-name": name}); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("job %s: no pod marked unschedulable: %v (pods %+v)", name, ctx.Err(), pods.Items)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	waitUnschedulable("first")

	c.mu.Lock()
	pids := []int{c.kcm.pid, c.sched.pid}
	c.mu.Unlock()
	c.StopControllers()
	assertGone(t, pids, nil)
	if err := c.StartControllers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartControllers(ctx); err == nil {
		t.Error("StartControllers while they run: no error")
	}
	waitUnschedulable("second")
}

// Without Options.Controllers nothing acts on a Job.
func TestNoControllersByDefault(t *testing.T) {
	c := cluster.Get(t)
	if c.kcm != nil || c.sched != nil {
		t.Fatal("controllers run without Options.Controllers")
	}
	if err := c.StartControllers(t.Context()); err == nil {
		t.Error("StartControllers without Options.Controllers: no error")
	}
}
