package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// A Job's wait starts afresh once it was seen running: a conversion that
// ran for an hour and whose Job the Job controller marks a poll late (a
// busy control plane) is not a Job that "has not started" for an hour. A
// Job the controller never marks stops, after the stall timeout, saying
// what to check; a pod that never starts stops naming the image.
func TestJobWaitsStartAfreshWhenRunning(t *testing.T) {
	r := &run{e: &Engine{deps: Deps{WorkerImage: "registry.example/worker@sha256:1"}}, spec: Spec{DataVolumeStallTimeout: 10 * time.Minute}}
	w := jobWaits{}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "convert-1", UID: "u1"}}
	pending := clusterjob.Outcome{State: clusterjob.Pending}
	ended := clusterjob.Outcome{State: clusterjob.Pending, Ended: true, Reason: "its pod convert-1-x ended (exit 0); the Job controller has not marked the Job yet"}
	stalled := func(out clusterjob.Outcome, at time.Time) error {
		return r.jobStalled("conversion Job", "ConversionJob", job, out, w.waited(job, out, at), out.Reason)
	}
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	if err := stalled(pending, t0); err != nil {
		t.Fatalf("a Job first seen pending: %v", err)
	}
	if err := stalled(pending, t0.Add(time.Minute)); err != nil {
		t.Fatalf("pending for a minute: %v", err)
	}
	w.running(job)
	done := t0.Add(time.Hour) // it ran for an hour, then its worker ended
	for _, d := range []time.Duration{0, 2 * time.Second, 9 * time.Minute} {
		if err := stalled(ended, done.Add(d)); err != nil {
			t.Fatalf("the worker ended %s ago, the Job not marked yet: %v; want a wait", d, err)
		}
	}
	err := stalled(ended, done.Add(10*time.Minute))
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Class != fault.NeedsHuman || fe.Reason != "ConversionJobNotMarked" ||
		!strings.Contains(fe.Message, "has not been marked finished in 10m0s") || !strings.Contains(fe.Action, "kube-controller-manager") {
		t.Fatalf("a Job never marked: %v; want a stop naming the Job controller", err)
	}

	// Seen running, then waiting for a pod again: a fresh wait.
	w.running(job)
	if err := stalled(pending, done.Add(time.Hour)); err != nil {
		t.Fatalf("pending again after it ran: %v; want a fresh wait", err)
	}
	// A worker that ran between two polls (never seen running) after a
	// long wait for its pod: waiting for the Job controller is a wait of
	// its own.
	quick := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "convert-3", UID: "u3"}}
	if d := w.waited(quick, pending, t0); d != 0 {
		t.Fatalf("first wait %s", d)
	}
	if d := w.waited(quick, ended, t0.Add(9*time.Minute)); d != 0 {
		t.Fatalf("the wait for the Job controller began %s before its worker was seen ended", d)
	}

	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "convert-2", UID: "u2"}}
	if d := w.waited(other, pending, done); d != 0 {
		t.Fatalf("another Job's wait: %s, want its own from 0", d)
	}
	err = r.jobStalled("conversion Job", "ConversionJob", other, pending, w.waited(other, pending, done.Add(10*time.Minute)), "its pod is not running yet")
	if !errors.As(err, &fe) || fe.Reason != "ConversionJobNotStarted" || !strings.Contains(fe.Action, "registry.example/worker@sha256:1") {
		t.Fatalf("a Job whose pod never started: %v; want a stop naming the image", err)
	}
}
