package clusterjob

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// The conversion Job: one per VM, every claim of the VM mounted, running
// virt-v2v-in-place (package convertjob) as Forklift's conversion pod
// does.
const (
	// ComponentConvert marks a VM's conversion Job.
	ComponentConvert = "convert"
	// ConvertContainer is the conversion pod's one container.
	ConvertContainer = "convert"
	// DisksDir holds each claim at DisksDir/<index>, its image at
	// DisksDir/<index>/disk.img.
	DisksDir = "/disks"
	// ResourceKVM is the device plugin resource KubeVirt's virt-handler
	// offers on nodes with /dev/kvm: requested when the cluster offers it,
	// so that libguestfs's helper VM runs with KVM rather than TCG.
	ResourceKVM corev1.ResourceName = "devices.kubevirt.io/kvm"
)

// Conversion resources: libguestfs's helper VM takes about 1.3 GiB
// (LIBGUESTFS_MEMSIZE's default 1280 MiB plus QEMU); virt-v2v itself and
// nbdkit little.
var (
	convertCPURequest    = resource.MustParse("1")
	convertMemoryRequest = resource.MustParse("1536Mi")
	convertMemoryLimit   = resource.MustParse("3Gi")
	// scratchLimit bounds each emptyDir (virt-v2v's and libguestfs's
	// temporary files and its appliance, about 300 MiB).
	scratchLimit = resource.MustParse("4Gi")
)

// Convert is everything a VM's conversion Job is rendered from.
type Convert struct {
	Namespace string
	// Migration is the migration's name (the kube.LabelMigration value);
	// Base is the name its objects derive from (its record's name).
	Migration, Base string
	// Attempt is the attempt number (from 1), recorded before the Job is
	// created.
	Attempt int
	// Image is the worker image, digest-pinned.
	Image string
	// Claims are the VM's disks' claims in disk order; Sizes their
	// images' sizes; IDs their DataVolumes' UIDs (convertjob.Disk.ID).
	Claims []string
	Sizes  []int64
	IDs    []string
	// Block says the claims are in Block volume mode: each is attached as
	// a device (ConvertDevicePath). JournalClaims, when set, are the
	// disks' journal claims in disk order, mounted at JournalDir/<index>,
	// which keep the overlays; Block-mode claims need them (a device has
	// nothing beside it). Without them the overlays are kept beside
	// disk.img.
	Block         bool
	JournalClaims []string
	// KVM requests ResourceKVM.
	KVM bool
	// StallSeconds: see convertjob.Spec.
	StallSeconds int
	// Owner, when set, owns the Job (the migration's record).
	Owner *metav1.OwnerReference
}

// ConvertJobName is the name of a VM's conversion Job at attempt:
// "<base>-convert-<attempt>", within 63 characters.
func ConvertJobName(base string, attempt int) string {
	return boundedName(base, "-convert-"+strconv.Itoa(attempt))
}

// Spec is the worker's spec for c, as the pod sees its files.
func (c Convert) Spec() convertjob.Spec {
	s := convertjob.Spec{StallSeconds: c.StallSeconds}
	for i := range c.Claims {
		var size int64
		var id string
		if i < len(c.Sizes) {
			size = c.Sizes[i]
		}
		if i < len(c.IDs) {
			id = c.IDs[i]
		}
		d := convertjob.Disk{Path: diskDir(i) + "/" + convertjob.ImageName, SizeBytes: size, ID: id}
		if c.Block {
			d.Path, d.Device = ConvertDevicePath(i), true
		}
		if len(c.JournalClaims) > 0 {
			d.OverlayDir = journalDir(i)
		}
		s.Disks = append(s.Disks, d)
	}
	return s
}

func diskDir(i int) string { return DisksDir + "/" + strconv.Itoa(i) }

// ConvertDevicePath is where the conversion pod finds disk i's device
// when its claim is in Block mode.
func ConvertDevicePath(i int) string { return DevicePath + "-" + strconv.Itoa(i) }

// journalDir is where the conversion pod mounts disk i's journal claim.
func journalDir(i int) string { return JournalDir + "/" + strconv.Itoa(i) }

// Validate checks c before anything is rendered.
func (c Convert) Validate() error {
	var errs []error
	for _, f := range []struct{ field, v string }{{"namespace", c.Namespace}, {"migration", c.Migration}, {"base", c.Base}} {
		if msgs := validation.IsDNS1123Subdomain(f.v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %v", f.field, f.v, msgs))
		}
	}
	for i, claim := range c.Claims {
		if msgs := validation.IsDNS1123Subdomain(claim); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("claim %d %q: %v", i, claim, msgs))
		}
	}
	if len(c.Sizes) != len(c.Claims) {
		errs = append(errs, fmt.Errorf("%d sizes for %d claims", len(c.Sizes), len(c.Claims)))
	}
	if c.Block || len(c.JournalClaims) > 0 {
		if len(c.JournalClaims) != len(c.Claims) {
			errs = append(errs, fmt.Errorf("%d journal claims for %d claims", len(c.JournalClaims), len(c.Claims)))
		}
		for i, claim := range c.JournalClaims {
			if msgs := validation.IsDNS1123Subdomain(claim); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("journal claim %d %q: %v", i, claim, msgs))
			}
		}
	}
	if c.Attempt < 1 {
		errs = append(errs, fmt.Errorf("attempt %d: want >= 1", c.Attempt))
	}
	if c.Image == "" {
		errs = append(errs, errors.New("no worker image"))
	}
	if err := c.Spec().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RenderConvert is c's Job: one pod, never restarted, no retries of its
// own, every claim mounted read-write at DisksDir/<index>.
func RenderConvert(c Convert) (*batchv1.Job, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("conversion job of %s/%s: %w", c.Namespace, c.Migration, err)
	}
	spec, err := json.Marshal(c.Spec())
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		kube.LabelMigration: c.Migration,
		LabelComponent:      ComponentConvert,
		LabelAttempt:        strconv.Itoa(c.Attempt),
	}
	scratch := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &scratchLimit}}
	vols := []corev1.Volume{{Name: "tmp", VolumeSource: scratch}, {Name: "var-tmp", VolumeSource: scratch}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "var-tmp", MountPath: "/var/tmp"}}
	var devices []corev1.VolumeDevice
	for i, claim := range c.Claims {
		name := "disk-" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		if c.Block {
			devices = append(devices, corev1.VolumeDevice{Name: name, DevicePath: ConvertDevicePath(i)})
		} else {
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: diskDir(i)})
		}
		if len(c.JournalClaims) == 0 {
			continue
		}
		jname := "journal-" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: jname, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.JournalClaims[i]}}})
		mounts = append(mounts, corev1.VolumeMount{Name: jname, MountPath: journalDir(i)})
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: convertCPURequest, corev1.ResourceMemory: convertMemoryRequest},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: convertMemoryLimit},
	}
	if c.KVM {
		res.Requests[ResourceKVM] = resource.MustParse("1")
		res.Limits[ResourceKVM] = resource.MustParse("1")
	}
	ctr := corev1.Container{
		Name:  ConvertContainer,
		Image: c.Image,
		Args:  []string{"convert", "-spec-json", string(spec), "-result", corev1.TerminationMessagePathDefault},
		// libguestfs keeps its helper VM's appliance in its cache; both
		// it and virt-v2v's temporary overlays go to the pod's scratch.
		Env:                      []corev1.EnvVar{{Name: "LIBGUESTFS_CACHEDIR", Value: "/var/tmp"}, {Name: "TMPDIR", Value: "/tmp"}, {Name: "HOME", Value: "/tmp"}},
		ImagePullPolicy:          corev1.PullIfNotPresent,
		VolumeMounts:             mounts,
		VolumeDevices:            devices,
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources:                res,
		SecurityContext:          workerSecurity(),
	}
	return workerJob(c.Namespace, ConvertJobName(c.Base, c.Attempt), labels, ctr, vols, c.Owner), nil
}

// ObserveConvert reads the outcome of a conversion Job, as ObserveCopy
// does a copy Job's.
func ObserveConvert(job *batchv1.Job, pods []corev1.Pod) Outcome {
	var res *convertjob.Result
	out := observe(job, pods, ConvertContainer, func(msg string) (verdict, error) {
		r, err := convertjob.ParseResult(msg)
		if err != nil {
			return verdict{}, err
		}
		res = &r
		return verdict{ok: r.OK, class: r.Class, err: r.Error}, nil
	})
	out.Conversion = res
	return out
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// CheckConversion checks a conversion's result against what the runner
// knows before it believes it: one image per disk, each of its disk's
// size with a SHA-256, and virt-v2v's account of what it converted.
func CheckConversion(c Convert, r convertjob.Result) error {
	switch {
	case !r.OK:
		return fmt.Errorf("the conversion did not succeed: %s", r.Error)
	case r.Digest != diskdigest.Name:
		return otherDigest(r.Digest)
	case len(r.Disks) != len(c.Claims):
		return fmt.Errorf("the conversion reports %d image(s), the VM has %d disk(s)", len(r.Disks), len(c.Claims))
	case r.Evidence == nil || r.Evidence.Converted == "":
		return errors.New("the conversion reports no guest converted")
	}
	for i, d := range r.Disks {
		if d.Bytes != c.Sizes[i] {
			return fmt.Errorf("disk %d: the converted image has %d bytes, the disk %d", i, d.Bytes, c.Sizes[i])
		}
		if !sha256Hex.MatchString(d.SHA256) {
			return fmt.Errorf("disk %d: the converted image's digest %q is not one", i, d.SHA256)
		}
	}
	return nil
}
