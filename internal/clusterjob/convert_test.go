package clusterjob_test

import (
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func sampleConvert() clusterjob.Convert {
	return clusterjob.Convert{Namespace: "apps", Migration: "web", Base: "vmmigration-web", Attempt: 2,
		Image:  "registry.example/vmmigration-worker@sha256:" + strings.Repeat("ab", 32),
		Claims: []string{"web-disk-0", "web-disk-1"}, Sizes: []int64{8 << 30, 2 << 30}}
}

// The conversion Job: a deterministic name from the record and the
// attempt, no retries of its own, every claim mounted at its index with
// the worker's spec naming each disk.img, scratch for libguestfs, no
// credential, and KVM asked for only when the cluster offers it.
func TestRenderConvert(t *testing.T) {
	c := sampleConvert()
	job, err := clusterjob.RenderConvert(c)
	if err != nil {
		t.Fatal(err)
	}
	if job.Name != "vmmigration-web-convert-2" || job.Namespace != "apps" {
		t.Errorf("Job %s/%s", job.Namespace, job.Name)
	}
	if job.Labels[kube.LabelMigration] != "web" || job.Labels[clusterjob.LabelComponent] != clusterjob.ComponentConvert || job.Labels[clusterjob.LabelAttempt] != "2" {
		t.Errorf("labels %v", job.Labels)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0", job.Spec.BackoffLimit)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
		t.Fatalf("restartPolicy %s, %d containers", pod.RestartPolicy, len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if ctr.Name != clusterjob.ConvertContainer || len(ctr.Args) != 5 || ctr.Args[0] != "convert" || ctr.Args[1] != "-spec-json" {
		t.Fatalf("container %s, args %q", ctr.Name, ctr.Args)
	}
	spec, err := convertjob.ParseSpec([]byte(ctr.Args[2]), "args")
	if err != nil {
		t.Fatalf("the worker's spec: %v", err)
	}
	claims := map[string]string{}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
		if v.Secret != nil {
			t.Errorf("volume %s: the conversion needs no credential", v.Name)
		}
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for i, d := range spec.Disks {
		dir := strings.TrimSuffix(d.Path, "/"+convertjob.ImageName)
		if claims[mounts[dir]] != c.Claims[i] || d.SizeBytes != c.Sizes[i] {
			t.Errorf("disk %d: %s (%d bytes) is in claim %q, want %q (%d)", i, d.Path, d.SizeBytes, claims[mounts[dir]], c.Claims[i], c.Sizes[i])
		}
	}
	if mounts["/var/tmp"] == "" || mounts["/tmp"] == "" {
		t.Errorf("mounts %v: libguestfs needs scratch at /var/tmp and /tmp (the root is read-only)", mounts)
	}
	if _, ok := ctr.Resources.Limits[clusterjob.ResourceKVM]; ok {
		t.Error("KVM asked for although the cluster does not offer it")
	}
	c.KVM = true
	withKVM, err := clusterjob.RenderConvert(c)
	if err != nil {
		t.Fatal(err)
	}
	if q := withKVM.Spec.Template.Spec.Containers[0].Resources.Limits[clusterjob.ResourceKVM]; q.Value() != 1 {
		t.Errorf("KVM limit %v, want 1", q)
	}
	if job.Annotations[clusterjob.AnnotationSpecHash] == withKVM.Annotations[clusterjob.AnnotationSpecHash] {
		t.Error("the spec hash does not change with the KVM request")
	}
	if err := clusterjob.Adoptable(withKVM, job); err == nil {
		t.Error("a Job rendered with KVM is adoptable for one without")
	}

	bad := sampleConvert()
	bad.Claims = []string{"web-disk-0", "Web_Disk"}
	if _, err := clusterjob.RenderConvert(bad); err == nil {
		t.Error("a claim name that is not a DNS subdomain was rendered")
	}
	bad = sampleConvert()
	bad.Sizes = bad.Sizes[:1]
	if _, err := clusterjob.RenderConvert(bad); err == nil {
		t.Error("sizes for fewer disks than claims were rendered")
	}
}

func convertResult(t *testing.T, r convertjob.Result) string {
	t.Helper()
	return string(r.Encode())
}

func convertTerminated(code int32, msg string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: clusterjob.ConvertContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: msg}}}}}}
}

// The conversion Job's outcome is read as a copy Job's, from its own
// container, with the conversion's result.
func TestObserveConvert(t *testing.T) {
	ok := convertjob.Result{OK: true, Digest: diskdigest.Name, Disks: []convertjob.Checked{{SHA256: strings.Repeat("0f", 32), Bytes: 8 << 30}, {SHA256: strings.Repeat("1e", 32), Bytes: 2 << 30}},
		Evidence: &convertjob.Evidence{Tool: "virt-v2v-in-place", Converted: "Converting Debian 12 to run on KVM", OS: convertjob.GuestOS{Type: "linux"}}}
	o := clusterjob.ObserveConvert(jobWith(batchv1.JobComplete, ""), []corev1.Pod{convertTerminated(0, convertResult(t, ok))})
	if o.State != clusterjob.Succeeded || o.Conversion == nil || o.Result != nil {
		t.Fatalf("outcome %+v", o)
	}
	if err := clusterjob.CheckConversion(sampleConvert(), *o.Conversion); err != nil {
		t.Errorf("a good result: %v", err)
	}
	failed := convertjob.Result{Error: "no OS found", Class: fault.NeedsHuman.String(), Reason: convertjob.ReasonFailed}
	o = clusterjob.ObserveConvert(jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), []corev1.Pod{convertTerminated(12, convertResult(t, failed))})
	if o.State != clusterjob.Failed || o.Class != fault.NeedsHuman || o.Conversion == nil || o.Conversion.Reason != convertjob.ReasonFailed {
		t.Errorf("failed conversion: %+v", o)
	}
	o = clusterjob.ObserveConvert(jobWith(batchv1.JobFailed, "BackoffLimitExceeded"), []corev1.Pod{convertTerminated(137, "")})
	if o.State != clusterjob.Failed || o.Class != fault.Interrupted {
		t.Errorf("killed conversion: %+v", o)
	}
	// A copy container's status is not the conversion's.
	o = clusterjob.ObserveConvert(&batchv1.Job{}, []corev1.Pod{terminated(0, "Completed", "{}")})
	if o.State != clusterjob.Pending {
		t.Errorf("a pod without the conversion container: %+v", o)
	}

	for name, change := range map[string]func(*convertjob.Result){
		"one disk short":  func(r *convertjob.Result) { r.Disks = r.Disks[:1] },
		"size differs":    func(r *convertjob.Result) { r.Disks[1].Bytes-- },
		"not a SHA-256":   func(r *convertjob.Result) { r.Disks[0].SHA256 = "xyz" },
		"nothing said":    func(r *convertjob.Result) { r.Evidence = nil },
		"plain SHA-256":   func(r *convertjob.Result) { r.Digest = "" },
		"nothing convert": func(r *convertjob.Result) { r.Evidence = &convertjob.Evidence{Tool: "virt-v2v-in-place"} },
	} {
		var r convertjob.Result
		b, _ := json.Marshal(ok)
		_ = json.Unmarshal(b, &r)
		change(&r)
		if err := clusterjob.CheckConversion(sampleConvert(), r); err == nil {
			t.Errorf("%s: believed %+v", name, r)
		}
	}
}

// Block-mode claims are attached as devices, each disk's journal claim
// mounted where the worker keeps its overlay; without one journal claim
// per disk nothing is rendered.
func TestRenderConvertBlock(t *testing.T) {
	c := sampleConvert()
	c.Block = true
	if _, err := clusterjob.RenderConvert(c); err == nil || !strings.Contains(err.Error(), "journal claims") {
		t.Errorf("Block-mode claims without journal claims: %v", err)
	}
	c.JournalClaims = []string{"web-disk-0-journal", "web-disk-1-journal"}
	job, err := clusterjob.RenderConvert(c)
	if err != nil {
		t.Fatal(err)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	if len(ctr.VolumeDevices) != 2 || ctr.VolumeDevices[1].DevicePath != clusterjob.ConvertDevicePath(1) {
		t.Errorf("volume devices %+v", ctr.VolumeDevices)
	}
	at := mountedClaims(job)
	if at["/journal/1"] != "web-disk-1-journal" || at["/disks/0"] != "" {
		t.Errorf("claims mounted %v: want each journal claim at /journal/<index> and no claim mounted as a folder", at)
	}
	spec := c.Spec()
	if d := spec.Disks[1]; d.Path != clusterjob.ConvertDevicePath(1) || !d.Device || d.OverlayDir != "/journal/1" || d.SizeBytes != 2<<30 {
		t.Errorf("disk 1 in the worker's spec: %+v", d)
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("the worker's spec: %v", err)
	}
}

// Filesystem-mode claims with journal claims are mounted as folders, each
// disk's journal claim where the worker keeps its overlay: the claims
// hold their disks alone.
func TestRenderConvertFilesystemWithJournalClaims(t *testing.T) {
	c := sampleConvert()
	c.JournalClaims = []string{"web-disk-0-journal"}
	if _, err := clusterjob.RenderConvert(c); err == nil || !strings.Contains(err.Error(), "journal claims") {
		t.Errorf("one journal claim for two claims: %v", err)
	}
	c.JournalClaims = []string{"web-disk-0-journal", "web-disk-1-journal"}
	job, err := clusterjob.RenderConvert(c)
	if err != nil {
		t.Fatal(err)
	}
	ctr := job.Spec.Template.Spec.Containers[0]
	at := mountedClaims(job)
	if len(ctr.VolumeDevices) != 0 || at["/disks/1"] != c.Claims[1] || at["/journal/1"] != "web-disk-1-journal" {
		t.Errorf("devices %+v, claims mounted %v: want each claim at /disks/<index> and its journal claim at /journal/<index>", ctr.VolumeDevices, at)
	}
	spec := c.Spec()
	if d := spec.Disks[1]; d.Path != "/disks/1/disk.img" || d.Device || d.OverlayDir != "/journal/1" {
		t.Errorf("disk 1 in the worker's spec: %+v", d)
	}
	if err := spec.Validate(); err != nil {
		t.Errorf("the worker's spec: %v", err)
	}
}
