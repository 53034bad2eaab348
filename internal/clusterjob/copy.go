// Package clusterjob renders the Kubernetes objects of cluster execution
// and reads back what they did. A copy Job runs the worker
// (cmd/vmmigration-worker, contract in package copyjob) against one ESXi
// disk, writing straight into the disk's claim; its Secret carries the
// ESXi credential as a file. The runner only renders, observes and
// records: it never trusts a Job it did not render (the spec-hash
// annotation), owns every retry (backoffLimit 0, one Job per attempt) and
// reads the outcome from the pod's status through the API server
// (termination message, exit code), never from the pod's network.
package clusterjob

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Labels and annotations of the objects this package renders.
const (
	// LabelComponent says which part of a migration a Job is:
	// ComponentCopy.
	LabelComponent = "vmmigration.io/component"
	// LabelDisk is the disk's index in the migration.
	LabelDisk = "vmmigration.io/disk"
	// LabelAttempt is the attempt number the Job belongs to.
	LabelAttempt = "vmmigration.io/attempt"
	// AnnotationSpecHash is the hash of everything the runner rendered
	// into a Job (SpecHash). A Job found under the name the runner wants
	// is adopted only when it carries the same hash.
	AnnotationSpecHash = "vmmigration.io/spec-hash"

	// ComponentCopy marks a disk's copy Job.
	ComponentCopy = "copy"
)

// Where the copy pod finds things.
const (
	// CredentialDir is where the migration's Secret is mounted.
	CredentialDir = "/var/run/vmmigration/esxi"
	// DataDir is where a Filesystem-mode claim is mounted; the disk is
	// DataDir/disk.img, as CDI lays a claim out.
	DataDir = "/data"
	// DevicePath is where a Block-mode claim's device appears.
	DevicePath = "/dev/vmmigration-disk"
	// JournalDir is where the disk's journal claim is mounted.
	JournalDir = "/journal"
	// CopyContainer is the copy pod's one container.
	CopyContainer = "copy"
)

// Keys of the migration's Secret: exactly one of them is set.
const (
	SecretKeyPassword   = "password"
	SecretKeyPrivateKey = "private-key"
)

// Worker resources: the copy holds four 1 MiB write buffers and a read
// buffer per stream (the bench's peak is about 125 MiB with two streams
// in the provider, which also uploads); the limit leaves room for four.
var (
	copyCPURequest    = resource.MustParse("250m")
	copyMemoryRequest = resource.MustParse("128Mi")
	copyMemoryLimit   = resource.MustParse("512Mi")
)

// Copy is everything a disk's copy Job is rendered from. The credential is
// not in it: only which key of the migration's Secret holds it.
type Copy struct {
	Namespace string
	// Migration is the migration's name (the kube.LabelMigration value).
	Migration string
	// Disk is the disk's index in the migration; Attempt is the attempt
	// number (from 1), recorded before the Job is created.
	Disk, Attempt int
	// Image is the worker image, digest-pinned.
	Image string
	// Claim is the disk's PersistentVolumeClaim (its DataVolume's name).
	Claim string
	// Block says the claim is in Block volume mode. JournalClaim, when
	// set, is a Filesystem-mode claim that keeps the journal and the
	// chain's side files, so that the claim holds the disk alone; a
	// Block-mode claim needs one (a device has no room beside the data).
	// Without it they are kept beside disk.img.
	Block        bool
	JournalClaim string
	// ClaimID identifies the claim's content (its DataVolume's UID): the
	// journal's files in the journal claim are named for it, so that a
	// claim replaced since never resumes from the old claim's journal.
	ClaimID string
	// Secret is the migration's Secret (SecretName); PrivateKey says it
	// holds SecretKeyPrivateKey rather than SecretKeyPassword.
	Secret     string
	PrivateKey bool
	// Host, Source, ChunkSize and Streams are the copy itself. Host's
	// credential file fields are set by Render.
	Host   copyjob.Host
	Source copyjob.Disk
	// Deltas are the snapshot deltas over Source (its chain's base),
	// oldest first; the worker applies them in the claim.
	Deltas []copyjob.Delta
	// OnSnapshots: Source is a chain's base even without Deltas
	// (copyjob.Spec.OnSnapshots).
	OnSnapshots bool
	ChunkSize   int64
	Streams     int
	// Owner, when set, owns the Job (the migration's record), so that the
	// garbage collector removes the Job with the record.
	Owner *metav1.OwnerReference
}

// Spec is the worker's spec for c, as the pod sees its files.
func (c Copy) Spec() copyjob.Spec {
	h := c.Host
	h.PasswordFile, h.PrivateKeyFile = "", ""
	if c.PrivateKey {
		h.PrivateKeyFile = CredentialDir + "/" + SecretKeyPrivateKey
	} else {
		h.PasswordFile = CredentialDir + "/" + SecretKeyPassword
	}
	s := copyjob.Spec{Host: h, Disk: c.Source, Deltas: c.Deltas, OnSnapshots: c.OnSnapshots, ChunkSize: c.ChunkSize, Streams: c.Streams,
		Target: copyjob.Target{Kind: copyjob.TargetFile, Path: DataDir + "/disk.img"}}
	if c.Block {
		s.Target = copyjob.Target{Kind: copyjob.TargetBlock, Path: DevicePath}
	}
	if c.JournalClaim != "" {
		s.JournalPath = JournalDir + "/disk-" + strconv.Itoa(c.Disk) + "-" + c.ClaimID + ".journal"
	}
	return s
}

// Validate checks c before anything is rendered.
func (c Copy) Validate() error {
	var errs []error
	for _, f := range []struct{ field, v string }{{"namespace", c.Namespace}, {"migration", c.Migration}, {"claim", c.Claim}, {"secret", c.Secret}} {
		if msgs := validation.IsDNS1123Subdomain(f.v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %v", f.field, f.v, msgs))
		}
	}
	if c.Block || c.JournalClaim != "" {
		if msgs := validation.IsDNS1123Subdomain(c.JournalClaim); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("journal claim %q: %v", c.JournalClaim, msgs))
		}
		if msgs := validation.IsDNS1123Label(c.ClaimID); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("claim ID %q of the journal's files: %v", c.ClaimID, msgs))
		}
	}
	if c.Disk < 0 || c.Attempt < 1 {
		errs = append(errs, fmt.Errorf("disk %d, attempt %d: want disk >= 0 and attempt >= 1", c.Disk, c.Attempt))
	}
	if c.Image == "" {
		errs = append(errs, errors.New("no worker image"))
	}
	if err := c.Spec().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RenderCopy is c's Job: one pod, never restarted, no retries of its own.
func RenderCopy(c Copy) (*batchv1.Job, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("copy job of disk %d of %s/%s: %w", c.Disk, c.Namespace, c.Migration, err)
	}
	spec, err := json.Marshal(c.Spec())
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		kube.LabelMigration: c.Migration,
		LabelComponent:      ComponentCopy,
		LabelDisk:           strconv.Itoa(c.Disk),
		LabelAttempt:        strconv.Itoa(c.Attempt),
	}
	vols := []corev1.Volume{{Name: "esxi", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: c.Secret,
		// Only the one key, readable by its owner only: the worker
		// refuses a credential others may read.
		Items:       []corev1.KeyToPath{{Key: secretKey(c.PrivateKey), Path: secretKey(c.PrivateKey), Mode: ptr.To[int32](0o400)}},
		DefaultMode: ptr.To[int32](0o400),
	}}}, {Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Claim}}}}
	ctr := corev1.Container{
		Name:  CopyContainer,
		Image: c.Image,
		// The image's entrypoint is the worker; the spec holds no secret.
		Args:            []string{"copy", "-spec-json", string(spec), "-result", corev1.TerminationMessagePathDefault},
		ImagePullPolicy: corev1.PullIfNotPresent,
		VolumeMounts:    []corev1.VolumeMount{{Name: "esxi", MountPath: CredentialDir, ReadOnly: true}},
		// The worker writes its result to the termination message; were
		// that lost, the last lines of its log end with the same result.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: copyCPURequest, corev1.ResourceMemory: copyMemoryRequest},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: copyMemoryLimit},
		},
		SecurityContext: workerSecurity(),
	}
	if c.Block {
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: DevicePath}}
	} else {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "disk", MountPath: DataDir})
	}
	if c.JournalClaim != "" {
		vols = append(vols, corev1.Volume{Name: "journal", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.JournalClaim}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "journal", MountPath: JournalDir})
	}
	return workerJob(c.Namespace, CopyJobName(c.Claim, c.Attempt), labels, ctr, vols, c.Owner), nil
}

// workerSecurity is the worker container's security context: root, as
// CDI's importer writes a claim, so that any claim's file or device is
// writable; no other privilege.
func workerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr.To[int64](0),
		RunAsNonRoot:             ptr.To(false),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"DAC_OVERRIDE"}},
	}
}

// workerJob is a Job of one worker pod: never restarted, no retries of its
// own, owned by owner when set, with its spec-hash annotation.
func workerJob(namespace, name string, labels map[string]string, ctr corev1.Container, vols []corev1.Volume, owner *metav1.OwnerReference) *batchv1.Job {
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			// The runner owns retries: a failed pod fails the Job, and the
			// next attempt is a new Job with its own recorded number.
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false), // the worker never calls the API server
					EnableServiceLinks:           ptr.To(false),
					Containers:                   []corev1.Container{ctr},
					Volumes:                      vols,
				},
			},
		},
	}
	if owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	job.Annotations = map[string]string{AnnotationSpecHash: SpecHash(job)}
	return job
}

func secretKey(privateKey bool) string {
	if privateKey {
		return SecretKeyPrivateKey
	}
	return SecretKeyPassword
}

// SpecHash is the hash of what the runner decides in a Job: its labels,
// owners and pod template (the worker's spec included). Fields the API
// server or the Job controller fill in (selector, defaults, status) and
// the annotation itself are not part of it, so a Job read back from the
// cluster hashes as rendered only if its template was not changed.
func SpecHash(job *batchv1.Job) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode(job.Namespace + "/" + job.Name)
	_ = enc.Encode(ourLabels(job.Labels))
	_ = enc.Encode(job.OwnerReferences)
	_ = enc.Encode(job.Spec.BackoffLimit)
	_ = enc.Encode(ourLabels(job.Spec.Template.Labels))
	_ = enc.Encode(comparablePodSpec(job.Spec.Template.Spec))
	return hex.EncodeToString(h.Sum(nil))
}

// ourLabels are the labels the runner sets (the Job controller adds its
// own, job-name and controller-uid, to the Job and its template).
func ourLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if strings.HasPrefix(k, labelPrefix) {
			out[k] = v
		}
	}
	return out
}

// labelPrefix starts every label the runner sets.
const labelPrefix = "vmmigration.io/"

// comparablePodSpec is the part of a pod spec the runner renders, with
// the API server's defaults taken out again.
func comparablePodSpec(s corev1.PodSpec) any {
	type ctr struct {
		Name, Image  string
		Command      []string
		Args         []string
		Mounts       []corev1.VolumeMount
		Devices      []corev1.VolumeDevice
		Resources    corev1.ResourceRequirements
		Security     *corev1.SecurityContext
		TermPath     string
		TermPolicy   corev1.TerminationMessagePolicy
		Env          []corev1.EnvVar
		EnvFrom      []corev1.EnvFromSource
		WorkingDir   string
		PullPolicy   corev1.PullPolicy
		StdinOrTTY   bool
		ProbesOrHook bool
	}
	type vol struct {
		Name        string
		SecretName  string
		Items       []corev1.KeyToPath
		DefaultMode *int32
		Claim       *corev1.PersistentVolumeClaimVolumeSource
		Other       bool
	}
	var out struct {
		Restart        corev1.RestartPolicy
		Automount      *bool
		ServiceLinks   *bool
		ServiceAccount string
		NodeName       string
		NodeSelector   map[string]string
		HostNetworkPID bool
		Security       *corev1.PodSecurityContext
		Init           int
		Containers     []ctr
		Volumes        []vol
	}
	out.Restart, out.Automount, out.ServiceLinks = s.RestartPolicy, s.AutomountServiceAccountToken, s.EnableServiceLinks
	out.ServiceAccount, out.NodeName, out.NodeSelector = s.ServiceAccountName, s.NodeName, s.NodeSelector
	out.HostNetworkPID = s.HostNetwork || s.HostPID || s.HostIPC
	if s.SecurityContext != nil && !equality.Semantic.DeepEqual(*s.SecurityContext, corev1.PodSecurityContext{}) {
		out.Security = s.SecurityContext
	}
	out.Init = len(s.InitContainers) + len(s.EphemeralContainers)
	for _, c := range s.Containers {
		out.Containers = append(out.Containers, ctr{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args,
			Mounts: c.VolumeMounts, Devices: c.VolumeDevices, Resources: c.Resources, Security: c.SecurityContext,
			TermPath: c.TerminationMessagePath, TermPolicy: c.TerminationMessagePolicy, Env: c.Env, EnvFrom: c.EnvFrom,
			WorkingDir: c.WorkingDir, PullPolicy: c.ImagePullPolicy, StdinOrTTY: c.Stdin || c.TTY,
			ProbesOrHook: c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil || c.Lifecycle != nil})
	}
	for _, v := range s.Volumes {
		x := vol{Name: v.Name, Claim: v.PersistentVolumeClaim}
		switch {
		case v.Secret != nil:
			x.SecretName, x.Items, x.DefaultMode = v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode
		case v.PersistentVolumeClaim != nil:
		default:
			x.Other = true
		}
		out.Volumes = append(out.Volumes, x)
	}
	return out
}

// Adoptable says whether a Job found under the name the runner wants is
// the one it would render (want): ours by label, and with want's hash both
// in its annotation and recomputed from what it holds now. Anything else
// is not adopted: the caller records a new attempt (a new name) or asks a
// person, never runs a Job someone else wrote or changed.
func Adoptable(found, want *batchv1.Job) error {
	if found.Labels[kube.LabelMigration] != want.Labels[kube.LabelMigration] {
		return fmt.Errorf("Job %s/%s belongs to %q, not to migration %q", found.Namespace, found.Name,
			found.Labels[kube.LabelMigration], want.Labels[kube.LabelMigration])
	}
	wantHash := want.Annotations[AnnotationSpecHash]
	if got := found.Annotations[AnnotationSpecHash]; got != wantHash {
		return fmt.Errorf("Job %s/%s was rendered from another spec (hash %.12s, want %.12s)", found.Namespace, found.Name, got, wantHash)
	}
	if got := SpecHash(found); got != wantHash {
		return fmt.Errorf("Job %s/%s was changed after it was created (its spec hashes to %.12s, its annotation says %.12s)", found.Namespace, found.Name, got, wantHash)
	}
	return nil
}
