package clusterjob

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// A disk's claim holds the disk and nothing else: a Block-mode claim is a
// device with nothing beside it, and a Filesystem-mode claim larger than
// its disk.img would show the guest a larger disk where KubeVirt's
// ExpandDisks grows disk.img to fill its claim. So a disk copied in the
// cluster keeps its journal, its chain's state and the snapshot deltas'
// copies (and the conversion its overlay) in a journal claim of its own:
// a small Filesystem-mode claim mounted at JournalDir, kept from attempt
// to attempt so that a pod that is killed or evicted resumes where it
// was, and deleted with the migration's other cluster objects once it
// has Completed (or with its record, which owns it).

// ComponentJournal marks a disk's journal claim.
const ComponentJournal = "journal"

// JournalClaimName is the journal claim of a disk's claim:
// "<claim>-journal", within 63 characters.
func JournalClaimName(claim string) string { return boundedName(claim, "-journal") }

// journalBytesPerChunk bounds what a journal holds per chunk of the disk
// (a SHA-256 in hex and a count in JSON, about 100 bytes), with room for
// the journal's next version written beside it and a delta copy's own
// journal.
const (
	journalBytesPerChunk = 1 << 10
	journalBaseBytes     = 64 << 20
)

// JournalClaimSize is what a disk's journal claim asks for: the journal of
// a disk of size bytes copied in chunks of chunk bytes, and room for the
// copies of the snapshot deltas applied over it (room bytes), whole MiB.
func JournalClaimSize(size, chunk, room int64) int64 {
	chunks := int64(1)
	if chunk > 0 {
		chunks = (size + chunk - 1) / chunk
	}
	n := journalBaseBytes + chunks*journalBytesPerChunk + room
	return (n + (1<<20 - 1)) &^ (1<<20 - 1)
}

// OverlayRoom is the room a disk of size bytes gets in its journal claim
// for the conversion's overlay (what virt-v2v writes, typically tens to a
// few hundred MiB): what a Filesystem-mode claim has beside its disk.img,
// CDI's default file system overhead of 5.5%, and at least 256 MiB.
func OverlayRoom(size int64) int64 {
	n := max(size/1000*55, 256<<20)
	return (n + (1<<20 - 1)) &^ (1<<20 - 1)
}

// JournalClaim is everything a disk's journal claim is rendered from.
type JournalClaim struct {
	Namespace, Migration string
	// Claim is the disk's Block-mode claim; Disk its index.
	Claim string
	Disk  int
	// StorageClass is the class to ask ("" for the cluster's default);
	// Size the request (JournalClaimSize).
	StorageClass string
	Size         int64
	// Owner, when set, owns the claim (the migration's record).
	Owner *metav1.OwnerReference
}

// RenderJournalClaim is j's claim: Filesystem mode, ReadWriteOnce (one
// copy pod at a time writes it), of the disk's storage class.
func RenderJournalClaim(j JournalClaim) *corev1.PersistentVolumeClaim {
	mode := corev1.PersistentVolumeFilesystem
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: JournalClaimName(j.Claim), Labels: map[string]string{
			kube.LabelMigration: j.Migration,
			LabelComponent:      ComponentJournal,
			LabelDisk:           strconv.Itoa(j.Disk),
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(j.Size, resource.BinarySI),
			}},
		},
	}
	if j.StorageClass != "" {
		sc := j.StorageClass
		pvc.Spec.StorageClassName = &sc
	}
	if j.Owner != nil {
		pvc.OwnerReferences = []metav1.OwnerReference{*j.Owner}
	}
	return pvc
}
