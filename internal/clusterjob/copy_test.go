package clusterjob_test

import (
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func sampleCopy() clusterjob.Copy {
	return clusterjob.Copy{Namespace: "apps", Migration: "web", Disk: 1, Attempt: 3,
		Image: "registry.example/vmmigration-worker@sha256:" + strings.Repeat("ab", 32),
		Claim: "web-disk-1", Secret: clusterjob.SecretName("vmmigration-web"),
		Host: copyjob.Host{Name: "esxi-a", Address: "10.1.2.3", User: "root",
			HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43)},
		Source: copyjob.Disk{Path: "/vmfs/volumes/ds1/web/web_1-flat.vmdk", SizeBytes: 8 << 30}, ChunkSize: 64 << 20, Streams: 2}
}

// The copy Job: a deterministic name from the claim and the attempt, no
// retries of its own, the credential only as a 0400 file from the
// migration's Secret (never in an argument or the environment), the
// worker's spec inline, and the spec-hash annotation.
func TestRenderCopy(t *testing.T) {
	c := sampleCopy()
	job, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "web-disk-1-copy-3" || job.Namespace != "apps" {
		t.Errorf("Job %s/%s", job.Namespace, job.Name)
	}
	if job.Labels[kube.LabelMigration] != "web" || job.Labels[clusterjob.LabelAttempt] != "3" || job.Labels[clusterjob.LabelDisk] != "1" {
		t.Errorf("labels %v", job.Labels)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0", job.Spec.BackoffLimit)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("restartPolicy %s, automount token %v", pod.RestartPolicy, pod.AutomountServiceAccountToken)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if len(ctr.Env) != 0 || len(ctr.EnvFrom) != 0 || ctr.Command != nil {
		t.Errorf("env %v, envFrom %v, command %v: the worker takes only its arguments", ctr.Env, ctr.EnvFrom, ctr.Command)
	}
	if len(ctr.Args) != 5 || ctr.Args[0] != "copy" || ctr.Args[1] != "-spec-json" || ctr.Args[3] != "-result" {
		t.Fatalf("args %q", ctr.Args)
	}
	spec, err := copyjob.ParseSpec([]byte(ctr.Args[2]), "args")
	if err != nil {
		t.Fatalf("the Job's spec does not parse as the worker parses it: %v", err)
	}
	if spec.Host.PasswordFile != clusterjob.CredentialDir+"/password" || spec.Target.Path != "/data/disk.img" || spec.Target.Kind != copyjob.TargetFile {
		t.Errorf("spec %+v", spec)
	}
	var secretVol *corev1.SecretVolumeSource
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretVol = v.Secret
		}
	}
	if secretVol == nil || secretVol.SecretName != "vmmigration-web-esxi" || len(secretVol.Items) != 1 ||
		secretVol.Items[0].Key != "password" || *secretVol.Items[0].Mode != 0o400 || *secretVol.DefaultMode != 0o400 {
		t.Errorf("secret volume %+v", secretVol)
	}
	sc := ctr.SecurityContext
	if sc == nil || *sc.RunAsUser != 0 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("security context %+v", sc)
	}
	if ctr.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination message policy %s", ctr.TerminationMessagePolicy)
	}
	if job.Annotations[clusterjob.AnnotationSpecHash] != clusterjob.SpecHash(job) || len(clusterjob.SpecHash(job)) != 64 {
		t.Errorf("spec hash annotation %q", job.Annotations[clusterjob.AnnotationSpecHash])
	}
	again, _ := clusterjob.RenderCopy(c)
	if again.Annotations[clusterjob.AnnotationSpecHash] != job.Annotations[clusterjob.AnnotationSpecHash] {
		t.Error("the same copy renders with another hash")
	}
}

// A Block-mode claim is attached as a device, with the journal on its
// own Filesystem claim; without one the Job is not rendered.
func TestRenderCopyBlock(t *testing.T) {
	c := sampleCopy()
	c.Block = true
	if _, err := clusterjob.RenderCopy(c); err == nil || !strings.Contains(err.Error(), "journal claim") {
		t.Errorf("a Block-mode copy without a journal claim: %v", err)
	}
	c.JournalClaim = "web-journal"
	c.ClaimID = "../etc"
	if _, err := clusterjob.RenderCopy(c); err == nil || !strings.Contains(err.Error(), "claim ID") {
		t.Errorf("a claim ID that is no name: %v", err)
	}
	c.ClaimID = "5f1c6a2e-0b1d-4c59-9d7e-3a8b2f6c1e90"
	job, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	if len(ctr.VolumeDevices) != 1 || ctr.VolumeDevices[0].DevicePath != clusterjob.DevicePath {
		t.Errorf("volume devices %+v", ctr.VolumeDevices)
	}
	if len(ctr.VolumeMounts) != 2 || ctr.VolumeMounts[1].MountPath != clusterjob.JournalDir {
		t.Errorf("volume mounts %+v: want the credential and the journal claim", ctr.VolumeMounts)
	}
	spec, err := copyjob.ParseSpec([]byte(ctr.Args[2]), "args")
	if err != nil || spec.Target.Kind != copyjob.TargetBlock || spec.JournalPath != "/journal/disk-1-5f1c6a2e-0b1d-4c59-9d7e-3a8b2f6c1e90.journal" {
		t.Errorf("spec %+v, %v", spec, err)
	}
}

// A Filesystem-mode claim with a journal claim is mounted as a folder
// holding disk.img, and the journal (and with it the chain's side files)
// goes to the journal claim: the disk's claim holds the disk alone.
func TestRenderCopyFilesystemWithJournalClaim(t *testing.T) {
	c := sampleCopy()
	c.JournalClaim, c.ClaimID = "web-journal", "5f1c6a2e-0b1d-4c59-9d7e-3a8b2f6c1e90"
	job, err := clusterjob.RenderCopy(c)
	if err != nil {
		t.Fatal(err)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	if at := mountedClaims(job); len(ctr.VolumeDevices) != 0 || at[clusterjob.DataDir] != c.Claim || at[clusterjob.JournalDir] != "web-journal" {
		t.Errorf("devices %+v, claims mounted %v: want the claim at %s and the journal claim at %s", ctr.VolumeDevices, at, clusterjob.DataDir, clusterjob.JournalDir)
	}
	spec, err := copyjob.ParseSpec([]byte(ctr.Args[2]), "args")
	if err != nil || spec.Target != (copyjob.Target{Kind: copyjob.TargetFile, Path: clusterjob.DataDir + "/disk.img"}) ||
		spec.JournalPath != "/journal/disk-1-5f1c6a2e-0b1d-4c59-9d7e-3a8b2f6c1e90.journal" {
		t.Errorf("spec %+v, %v", spec, err)
	}
}

// Untrusted names and paths are refused before anything is rendered.
func TestRenderCopyRefusesBadInput(t *testing.T) {
	for name, change := range map[string]func(*clusterjob.Copy){
		"claim with a slash":      func(c *clusterjob.Copy) { c.Claim = "../x" },
		"upper-case namespace":    func(c *clusterjob.Copy) { c.Namespace = "Apps" },
		"attempt 0":               func(c *clusterjob.Copy) { c.Attempt = 0 },
		"no image":                func(c *clusterjob.Copy) { c.Image = "" },
		"no host key":             func(c *clusterjob.Copy) { c.Host.HostKeyFingerprint = "" },
		"disk path with newline":  func(c *clusterjob.Copy) { c.Source.Path = "/vmfs/volumes/ds1/a\nb-flat.vmdk" },
		"disk path outside vmfs":  func(c *clusterjob.Copy) { c.Source.Path = "/etc/shadow.vmdk" },
		"host address as an flag": func(c *clusterjob.Copy) { c.Host.Address = "-oProxyCommand=x" },
	} {
		t.Run(name, func(t *testing.T) {
			c := sampleCopy()
			change(&c)
			if job, err := clusterjob.RenderCopy(c); err == nil {
				t.Errorf("rendered %s", job.Name)
			}
		})
	}
}

// Job and Secret names stay within 63 characters, deterministic and
// distinct for distinct inputs.
func TestNamesBounded(t *testing.T) {
	long := strings.Repeat("a", 50) + "-disk-12"
	n1, n2 := clusterjob.CopyJobName(long, 1), clusterjob.CopyJobName(long, 2)
	if len(n1) > 63 || len(n2) > 63 || n1 == n2 || !strings.HasSuffix(n2, "-copy-2") {
		t.Errorf("names %q %q", n1, n2)
	}
	if n1 != clusterjob.CopyJobName(long, 1) {
		t.Error("not deterministic")
	}
	other := strings.Repeat("a", 50) + "-disk-13"
	if clusterjob.CopyJobName(other, 1) == n1 {
		t.Error("two claims share a Job name")
	}
	for _, n := range []string{n1, n2, clusterjob.SecretName("vmmigration-" + strings.Repeat("b", 60))} {
		if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
			t.Errorf("%q: %v", n, msgs)
		}
	}
}

// The Secret carries one credential, never both, labelled as the
// migration's.
func TestRenderSecret(t *testing.T) {
	s, err := clusterjob.RenderSecret("apps", "vmmigration-web-esxi", "web", clusterjob.Credential{PrivateKeyPEM: "-----BEGIN KEY-----"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Data) != 1 || string(s.Data[clusterjob.SecretKeyPrivateKey]) != "-----BEGIN KEY-----" || s.Labels[kube.LabelMigration] != "web" {
		t.Errorf("secret %+v", s)
	}
	for _, cred := range []clusterjob.Credential{{}, {Password: "p", PrivateKeyPEM: "k"}} {
		if _, err := clusterjob.RenderSecret("apps", "x", "web", cred, nil); err == nil {
			t.Errorf("rendered a Secret with %+v", cred)
		}
	}
}

// A Job is adopted only when it is the one the runner would render: as
// the API server stores it (defaults and the Job controller's labels
// added), but not with another spec, a changed template or another owner.
func TestAdoptable(t *testing.T) {
	want, err := clusterjob.RenderCopy(sampleCopy())
	if err != nil {
		t.Fatal(err)
	}
	stored := want.DeepCopy()
	stored.Labels["batch.kubernetes.io/job-name"] = stored.Name
	stored.Spec.Template.Labels["batch.kubernetes.io/controller-uid"] = "u-1"
	stored.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "u-1"}}
	ps := &stored.Spec.Template.Spec
	ps.SecurityContext = &corev1.PodSecurityContext{}
	ps.DNSPolicy, ps.SchedulerName = corev1.DNSClusterFirst, "default-scheduler"
	ps.TerminationGracePeriodSeconds = new(int64)
	if err := clusterjob.Adoptable(stored, want); err != nil {
		t.Errorf("the stored Job: %v", err)
	}

	otherSpec := sampleCopy()
	otherSpec.Source.SizeBytes *= 2
	other, _ := clusterjob.RenderCopy(otherSpec)
	if err := clusterjob.Adoptable(other, want); err == nil || !strings.Contains(err.Error(), "another spec") {
		t.Errorf("another spec: %v", err)
	}
	edited := stored.DeepCopy()
	edited.Spec.Template.Spec.Containers[0].Args[2] = strings.Replace(edited.Spec.Template.Spec.Containers[0].Args[2], "10.1.2.3", "10.6.6.6", 1)
	if err := clusterjob.Adoptable(edited, want); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("an edited template: %v", err)
	}
	foreign := stored.DeepCopy()
	foreign.Labels[kube.LabelMigration] = "db"
	if err := clusterjob.Adoptable(foreign, want); err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Errorf("another migration's Job: %v", err)
	}
}

func resultJSON(t *testing.T, r copyjob.Result) string {
	t.Helper()
	return string(r.Encode())
}

func terminated(code int32, reason, msg string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: clusterjob.CopyContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}}}}}
}

func jobWith(cond batchv1.JobConditionType, reason string) *batchv1.Job {
	return &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: reason}}}}
}

// The outcome comes from the Job's conditions and the pod's termination,
// and a result is accepted only when it is well formed and agrees with
// the exit code.
func TestObserveCopy(t *testing.T) {
	sha := strings.Repeat("0f", 32)
	ok := copyjob.Result{OK: true, SHA256: sha, Digest: diskdigest.Name, Bytes: 8 << 20, ChunksCopied: 8}
	okLine, _ := json.Marshal(copyjob.Line{Event: "result", Result: &ok})
	progress, _ := json.Marshal(copyjob.Line{Event: "progress", ChunksDone: 7})
	tests := []struct {
		name      string
		job       *batchv1.Job
		pods      []corev1.Pod
		state     clusterjob.State
		class     fault.Class
		reasonHas string
	}{
		{"complete with result", jobWith(batchv1.JobComplete, "CompletionsReached"), []corev1.Pod{terminated(0, "Completed", resultJSON(t, ok))}, clusterjob.Succeeded, 0, "Complete"},
		{"complete, result from the log's last lines", jobWith(batchv1.JobComplete, ""), []corev1.Pod{terminated(0, "Completed", "cut line\n"+string(progress)+"\n"+string(okLine)+"\n")}, clusterjob.Succeeded, 0, ""},
		{"complete without a pod", jobWith(batchv1.JobComplete, ""), nil, clusterjob.Failed, fault.Transient, "pod"},
		{"complete with a malformed result", jobWith(batchv1.JobComplete, ""), []corev1.Pod{terminated(0, "Completed", `{"ok":true,"sha256":"xyz"}`)}, clusterjob.Failed, fault.Transient, "cannot be used"},
		{"complete but the result failed", jobWith(batchv1.JobComplete, ""), []corev1.Pod{terminated(0, "Completed", resultJSON(t, copyjob.Result{Error: "x", Class: "transient"}))}, clusterjob.Failed, fault.Transient, "exited 0"},
		{"failed with a needs-human result", jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), []corev1.Pod{terminated(12, "Error", resultJSON(t, copyjob.Result{Error: "host key mismatch", Class: "needs-human"}))}, clusterjob.Failed, fault.NeedsHuman, "host key mismatch"},
		{"SIGKILL, no result", jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), []corev1.Pod{terminated(137, "Error", "")}, clusterjob.Failed, fault.Interrupted, "exited 137"},
		{"OOM killed", jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), []corev1.Pod{terminated(137, "OOMKilled", "")}, clusterjob.Failed, fault.Interrupted, "OOMKilled"},
		{"usage error", jobWith(batchv1.JobFailed, ""), []corev1.Pod{terminated(64, "Error", "")}, clusterjob.Failed, fault.Permanent, "exited 64"},
		{"pod deleted before it ran", jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), nil, clusterjob.Failed, fault.Interrupted, "deleted or lost"},
		{"failure target set", jobWith(batchv1.JobFailureTarget, "PodFailurePolicy"), []corev1.Pod{terminated(11, "Error", "")}, clusterjob.Failed, fault.Transient, "PodFailurePolicy"},
		{"running", &batchv1.Job{}, []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: clusterjob.CopyContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}}, clusterjob.Running, 0, ""},
		{"image pull waiting", &batchv1.Job{}, []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: clusterjob.CopyContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}}}}}}}, clusterjob.Pending, 0, "ImagePullBackOff"},
		{"a failed pod before the Job decides", &batchv1.Job{}, []corev1.Pod{terminated(11, "Error", "")}, clusterjob.Pending, 0, "not marked"},
		// The Job controller marks a Job a second or more after its pod
		// ends: a pod that exited 0 with an OK result is the Job's success.
		{"a succeeded pod before the Job is marked", &batchv1.Job{}, []corev1.Pod{terminated(0, "Completed", resultJSON(t, ok))}, clusterjob.Succeeded, 0, "succeeded"},
		{"exit 0 with a failed result before the Job decides", &batchv1.Job{}, []corev1.Pod{terminated(0, "Completed", resultJSON(t, copyjob.Result{Error: "x", Class: "transient"}))}, clusterjob.Pending, 0, "not marked"},
		{"exit 0 with no result before the Job decides", &batchv1.Job{}, []corev1.Pod{terminated(0, "Completed", "")}, clusterjob.Pending, 0, "not marked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := clusterjob.ObserveCopy(tt.job, tt.pods)
			if o.State != tt.state || (tt.state == clusterjob.Failed && o.Class != tt.class) || !strings.Contains(o.Reason, tt.reasonHas) {
				t.Errorf("outcome %+v (class %s), want %s, class %s, reason with %q", o, o.Class, tt.state, tt.class, tt.reasonHas)
			}
			// A worker that ended while the Job is undecided waits for
			// the Job controller, not for a pod to start.
			if ended := o.State == clusterjob.Pending && len(tt.pods) > 0 && tt.pods[0].Status.ContainerStatuses[0].State.Terminated != nil; o.Ended != ended {
				t.Errorf("Ended %v, want %v", o.Ended, ended)
			}
			if o.State == clusterjob.Succeeded && (o.Result == nil || o.Result.SHA256 != sha) {
				t.Errorf("result %+v", o.Result)
			}
		})
	}
}

// A result is believed only when it accounts for the whole source disk
// and the pinned host key.
func TestCheckResult(t *testing.T) {
	c := sampleCopy()
	c.Source.SizeBytes = 130 << 20 // three 64 MiB chunks, the last partial
	good := copyjob.Result{OK: true, SHA256: strings.Repeat("ab", 32), Digest: diskdigest.Name, Bytes: 130 << 20, ZeroBytes: 1 << 20,
		ChunksCopied: 2, ChunksSkipped: 1, HostKeyFingerprint: c.Host.HostKeyFingerprint}
	if err := clusterjob.CheckResult(c, good); err != nil {
		t.Fatalf("a good result: %v", err)
	}
	fromJournal := good
	fromJournal.HostKeyFingerprint, fromJournal.ChunksCopied, fromJournal.ChunksSkipped = "", 0, 3
	if err := clusterjob.CheckResult(c, fromJournal); err != nil {
		t.Errorf("a copy answered from its journal: %v", err)
	}
	for name, change := range map[string]func(*copyjob.Result){
		"failed":        func(r *copyjob.Result) { r.OK = false },
		"short":         func(r *copyjob.Result) { r.Bytes -= 512 },
		"chunk missing": func(r *copyjob.Result) { r.ChunksSkipped = 0 },
		"zeros too many": func(r *copyjob.Result) {
			r.ZeroBytes = r.Bytes + 1
		},
		"another host key": func(r *copyjob.Result) { r.HostKeyFingerprint = "SHA256:" + strings.Repeat("B", 43) },
		// A worker of a version before the disk digest: plain SHA-256s.
		"plain SHA-256": func(r *copyjob.Result) { r.Digest = "" },
	} {
		r := good
		change(&r)
		if err := clusterjob.CheckResult(c, r); err == nil {
			t.Errorf("%s: believed %+v", name, r)
		}
	}
}

// A flattened chain's result is believed only with the base's evidence
// and every delta of the spec applied, each at the size the runner saw.
func TestCheckResultOfChain(t *testing.T) {
	c := sampleCopy()
	c.Source.SizeBytes = 128 << 20
	c.Deltas = []copyjob.Delta{{Path: "/vmfs/volumes/ds1/web/web-000001-sesparse.vmdk", Format: "seSparse", SizeBytes: 3 << 20},
		{Path: "/vmfs/volumes/ds1/web/web-000002-delta.vmdk", Format: "vmfsSparse", SizeBytes: 70 << 20}}
	good := copyjob.Result{OK: true, SHA256: strings.Repeat("ab", 32), Digest: diskdigest.Name, BaseSHA256: strings.Repeat("cd", 32), Bytes: 128 << 20,
		ChunksCopied: 5, HostKeyFingerprint: c.Host.HostKeyFingerprint,
		Deltas: []copyjob.DeltaResult{{SHA256: strings.Repeat("01", 32), Bytes: 3 << 20}, {SHA256: strings.Repeat("02", 32), Bytes: 70 << 20}}}
	if err := clusterjob.CheckResult(c, good); err != nil {
		t.Fatalf("a good result: %v", err)
	}
	for name, change := range map[string]func(*copyjob.Result){
		"no base":         func(r *copyjob.Result) { r.BaseSHA256 = "" },
		"a delta missing": func(r *copyjob.Result) { r.Deltas = r.Deltas[:1]; r.ChunksCopied = 4 },
		"delta resized": func(r *copyjob.Result) {
			r.Deltas = []copyjob.DeltaResult{r.Deltas[0], {SHA256: r.Deltas[1].SHA256, Bytes: 71 << 20}}
		},
		"delta unhashed": func(r *copyjob.Result) { r.Deltas = []copyjob.DeltaResult{r.Deltas[0], {Bytes: 70 << 20}} },
		"delta chunks":   func(r *copyjob.Result) { r.ChunksCopied = 2 },
	} {
		r := good
		change(&r)
		if err := clusterjob.CheckResult(c, r); err == nil {
			t.Errorf("%s: believed %+v", name, r)
		}
	}
	if _, err := clusterjob.RenderCopy(c); err != nil {
		t.Errorf("render: %v", err)
	}
}

// A journal claim is a Filesystem-mode claim of the disk's class, owned
// by the record, sized for the journal and the delta copies.
func TestRenderJournalClaim(t *testing.T) {
	owner := &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "rec", UID: "u1"}
	size := clusterjob.JournalClaimSize(2<<30, 64<<20, 100<<20)
	if size < 164<<20 || size%(1<<20) != 0 {
		t.Errorf("journal claim size %d: want at least the room and the base, whole MiB", size)
	}
	pvc := clusterjob.RenderJournalClaim(clusterjob.JournalClaim{Namespace: "apps", Migration: "web", Claim: "web-disk-0", Disk: 0,
		StorageClass: "fast", Size: size, Owner: owner})
	if pvc.Name != "web-disk-0-journal" || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || *pvc.Spec.StorageClassName != "fast" ||
		len(pvc.OwnerReferences) != 1 || pvc.Labels[clusterjob.LabelComponent] != clusterjob.ComponentJournal {
		t.Errorf("journal claim %+v", pvc)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Value() != size {
		t.Errorf("request %s, want %d", q.String(), size)
	}
	if pvc := clusterjob.RenderJournalClaim(clusterjob.JournalClaim{Namespace: "apps", Migration: "web", Claim: "web-disk-0", Size: size}); pvc.Spec.StorageClassName != nil {
		t.Errorf("no class asked: %v, want the cluster's default", *pvc.Spec.StorageClassName)
	}
	if long := clusterjob.JournalClaimName(strings.Repeat("a", 70)); len(long) > 63 || !strings.HasSuffix(long, "-journal") {
		t.Errorf("journal claim name %q", long)
	}
}

// mountedClaims maps each folder the Job's container mounts a claim at to
// the claim's name.
func mountedClaims(job *batchv1.Job) map[string]string {
	claims := map[string]string{}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	at := map[string]string{}
	for _, m := range job.Spec.Template.Spec.Containers[0].VolumeMounts {
		if c, ok := claims[m.Name]; ok {
			at[m.MountPath] = c
		}
	}
	return at
}
