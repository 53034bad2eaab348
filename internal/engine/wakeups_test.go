package engine_test

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// A wait that follows Jobs is woken by a change of the Jobs it names or of
// their pods, in the order the API server reports changes, and by no
// other; one feed per kind and namespace serves every follower and closes
// with the last.
func TestWakeupsFollowNamedObjects(t *testing.T) {
	e := newEnv(t)
	en := e.engine()
	ctx := e.ctx(2 * time.Minute)
	job := func(name string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}}}
	}
	// received waits for a signal on c; a missed one fails at the
	// test's deadline, not at a guessed time.
	received := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatalf("no wake-up for %s", what)
		}
	}
	wanted, live, stopWanted := en.Follow(kube.WatchJobs, e.ns, "wanted")
	if err := e.admin.Create(ctx, job("other")); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Create(ctx, job("wanted")); err != nil {
		t.Fatal(err)
	}
	received(wanted, "the followed Job's creation")
	if !live() {
		t.Fatal("a change was signalled, but the watch is not said to be open: the waits would poll early as without it")
	}
	// Changes of another Job, then a marker Job that a second follower
	// waits on: once the marker's change arrived, the other Job's
	// changes before it were seen, and must not have woken the first.
	for i := range 3 {
		var j batchv1.Job
		if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "other"}, &j); err != nil {
			t.Fatal(err)
		}
		j.Labels = map[string]string{"round": string(rune('a' + i))}
		if err := e.admin.Update(ctx, &j); err != nil {
			t.Fatal(err)
		}
	}
	marker, _, stopMarker := en.Follow(kube.WatchJobs, e.ns, "marker")
	if got := en.Watches(); got != 1 {
		t.Fatalf("%d watches for one kind in one namespace, want 1", got)
	}
	if err := e.admin.Create(ctx, job("marker")); err != nil {
		t.Fatal(err)
	}
	received(marker, "the marker Job")
	select {
	case <-wanted:
		t.Fatal("changes of a Job not followed woke the wait")
	default:
	}
	// A change of the followed Job wakes it again.
	var j batchv1.Job
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "wanted"}, &j); err != nil {
		t.Fatal(err)
	}
	j.Labels = map[string]string{"changed": "yes"}
	if err := e.admin.Update(ctx, &j); err != nil {
		t.Fatal(err)
	}
	received(wanted, "the followed Job's update")
	// Its pod's change wakes it too, under the Job's name: a pod that
	// ended is seen before the Job controller marks the Job. A pod of
	// another Job wakes no one.
	pod := func(name, jobName string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{batchv1.JobNameLabel: jobName}},
			Spec: corev1.PodSpec{NodeName: "no-such-node", RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}
	}
	if err := e.admin.Create(ctx, pod("other-x1", "other")); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Create(ctx, pod("marker-x1", "marker")); err != nil {
		t.Fatal(err)
	}
	received(marker, "the marker Job's pod")
	select {
	case <-wanted:
		t.Fatal("a pod of a Job not followed woke the wait")
	default:
	}
	if err := e.admin.Create(ctx, pod("wanted-x1", "wanted")); err != nil {
		t.Fatal(err)
	}
	received(wanted, "the followed Job's pod")
	stopWanted()
	stopMarker()
	if got := en.Watches(); got != 0 {
		t.Fatalf("%d watches open after the last follower stopped, want 0", got)
	}
}
