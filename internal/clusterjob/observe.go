package clusterjob

import (
	"fmt"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// State is where a Job is, as its status and its pods show it.
type State int

const (
	// Pending: no pod has started its container yet (scheduling, image
	// pull, a claim or Secret not yet mounted).
	Pending State = iota
	// Running: the worker is running.
	Running
	// Succeeded: the Job is Complete and its pod left a well-formed OK
	// result.
	Succeeded
	// Failed: the Job failed, or completed without evidence the runner
	// can check. Outcome.Class says what the next attempt should be.
	Failed
)

func (s State) String() string {
	return [...]string{"Pending", "Running", "Succeeded", "Failed"}[s]
}

// Outcome is what a copy or conversion Job did.
type Outcome struct {
	State State
	// Result is a copy worker's result from its pod's termination
	// message (nil when there is none to read); Conversion is a
	// conversion worker's.
	Result     *copyjob.Result
	Conversion *convertjob.Result
	// Class is the fault class of a Failed outcome: the result's, else
	// the one the exit code or the pod's fate implies.
	Class fault.Class
	// Reason says why, for the record and for people: the Job's
	// condition, the pod's exit, or why the result was not accepted.
	Reason string
	// Pod is the pod the outcome was read from ("" when none).
	Pod string
	// Ended, in a Pending outcome, says the worker has ended and the Job
	// controller has not marked the Job yet: the wait is the controller's,
	// not the pod's start.
	Ended bool
}

// ObserveCopy reads the outcome of a copy Job from the Job and its pods
// (those the Job controller made for it, in any order). The Job's own
// terminal conditions end it, and so does its one pod's success with an
// OK result; a pod that is gone or failed while the Job controller has not
// yet decided is still Running or Pending.
func ObserveCopy(job *batchv1.Job, pods []corev1.Pod) Outcome {
	var res *copyjob.Result
	out := observe(job, pods, CopyContainer, func(msg string) (verdict, error) {
		r, err := copyjob.ParseResult(msg)
		if err != nil {
			return verdict{}, err
		}
		res = &r
		return verdict{ok: r.OK, class: r.Class, err: r.Error}, nil
	})
	out.Result = res
	return out
}

// verdict is what a worker's result says, whatever the Job's kind.
type verdict struct {
	ok         bool
	class, err string
}

// observe reads the outcome of a Job whose worker runs in container from
// the Job and its pods; parse reads the worker's result from a
// termination message.
func observe(job *batchv1.Job, pods []corev1.Pod, container string, parse func(string) (verdict, error)) Outcome {
	tpod, term := lastTerminated(pods, container)
	out := Outcome{}
	if tpod != nil {
		out.Pod = tpod.Name
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		return completed(out, term, parse)
	case jobCondition(job, batchv1.JobFailed) || jobCondition(job, batchv1.JobFailureTarget):
		return failed(out, job, term, parse)
	}
	// A worker that exited 0 with a well-formed OK result has done its
	// work: with one completion and backoffLimit 0 the Job controller can
	// only mark its Job Complete, which it does after batching pod
	// updates (a second or more later, time a cutover would add to the
	// downtime). Anything less waits for the controller's verdict.
	if term != nil && term.ExitCode == 0 && tpod == newestPod(pods) {
		if o := completed(out, term, parse); o.State == Succeeded {
			o.Reason = fmt.Sprintf("its pod %s succeeded (the Job controller has not marked the Job yet)", tpod.Name)
			return o
		}
	}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Running != nil {
				out.State, out.Pod = Running, p.Name
				return out
			}
		}
	}
	out.State = Pending
	if pod := newestPod(pods); pod != nil {
		out.Pod, out.Reason = pod.Name, waitingReason(pod, container)
		if term != nil && pod == tpod && out.Reason == "" {
			out.Ended = true
			out.Reason = fmt.Sprintf("its pod %s ended (exit %d); the Job controller has not marked the Job yet", pod.Name, term.ExitCode)
		}
	}
	return out
}

// completed: the Job says Complete; the result must agree.
func completed(out Outcome, term *corev1.ContainerStateTerminated, parse func(string) (verdict, error)) Outcome {
	out.State, out.Class = Failed, fault.Transient
	if term == nil {
		// Complete with no pod left to read (deleted after the fact): the
		// next attempt answers from what the worker kept in the claim.
		out.Reason = "the Job completed but its pod, with the worker's result, is gone"
		return out
	}
	v, err := parse(term.Message)
	if err != nil {
		out.Reason = "the Job completed but its result cannot be used: " + err.Error()
		return out
	}
	if !v.ok || term.ExitCode != copyjob.ExitOK {
		out.Reason = fmt.Sprintf("the Job completed but the worker exited %d with result %q", term.ExitCode, v.err)
		return out
	}
	out.State, out.Class, out.Reason = Succeeded, 0, "Complete"
	return out
}

// failed: the Job failed; the result's class if there is one, else the
// exit code's, else the pod's fate.
func failed(out Outcome, job *batchv1.Job, term *corev1.ContainerStateTerminated, parse func(string) (verdict, error)) Outcome {
	out.State = Failed
	cond := jobConditionReason(job)
	switch {
	case term == nil:
		// Deleted, evicted before it started, or on a node that was lost:
		// nothing the worker did is known; what it kept in the claim is.
		out.Class, out.Reason = fault.Interrupted, fmt.Sprintf("the Job failed (%s) with no worker exit to read: its pod was deleted or lost", cond)
		return out
	case term.Message != "":
		if v, err := parse(term.Message); err == nil && !v.ok {
			out.Class = classOf(v.class)
			out.Reason = fmt.Sprintf("the worker exited %d: %s", term.ExitCode, v.err)
			return out
		}
	}
	out.Class = exitClass(term)
	out.Reason = fmt.Sprintf("the Job failed (%s): the worker exited %d (%s) with no result", cond, term.ExitCode, term.Reason)
	return out
}

// exitClass is the fault class of a worker exit without a usable result.
func exitClass(term *corev1.ContainerStateTerminated) fault.Class {
	switch term.ExitCode {
	case copyjob.ExitTransient:
		return fault.Transient
	case copyjob.ExitNeedsHuman:
		return fault.NeedsHuman
	case copyjob.ExitInterrupted, 128 + 9, 128 + 15:
		// A signal: deletion, eviction, the OOM killer. The journal
		// keeps what landed; an OOM kill repeats only with the same
		// limit, so the runner counts these against its retry budget.
		return fault.Interrupted
	case copyjob.ExitPermanent, copyjob.ExitUsage:
		return fault.Permanent
	}
	return fault.Transient
}

func classOf(name string) fault.Class {
	for _, c := range []fault.Class{fault.Transient, fault.NeedsHuman, fault.Interrupted, fault.Permanent} {
		if c.String() == name {
			return c
		}
	}
	return fault.Permanent
}

// lastTerminated is the newest pod whose container has terminated,
// and that termination.
func lastTerminated(pods []corev1.Pod, container string) (*corev1.Pod, *corev1.ContainerStateTerminated) {
	sorted := byNewest(pods)
	for _, p := range sorted {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Terminated != nil {
				return p, cs.State.Terminated
			}
		}
	}
	if len(sorted) > 0 {
		return sorted[0], nil
	}
	return nil, nil
}

func newestPod(pods []corev1.Pod) *corev1.Pod {
	if s := byNewest(pods); len(s) > 0 {
		return s[0]
	}
	return nil
}

func byNewest(pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return out[i].Name > out[j].Name
	})
	return out
}

// waitingReason is why a pod's container has not started, if its
// status says ("" when it does not).
func waitingReason(p *corev1.Pod, container string) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Waiting != nil {
			return cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobConditionReason is the reason of the Job's failure condition.
func jobConditionReason(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return "Failed"
}
