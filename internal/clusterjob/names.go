package clusterjob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// CopyJobName is the name of the copy Job of the disk whose claim is
// claim, at attempt: "<claim>-copy-<attempt>". A Job's name ends up in a
// label of its pods (job-name), so it is kept to 63 characters: a longer
// one keeps its end and shortens the claim's name, with a hash of the
// whole so that two claims never share a Job name.
func CopyJobName(claim string, attempt int) string {
	return boundedName(claim, "-copy-"+strconv.Itoa(attempt))
}

// SecretName is the name of a migration's Secret, beside its record
// (base is the record's name, coord.RecordName).
func SecretName(base string) string { return boundedName(base, "-esxi") }

// boundedName is base+suffix within a DNS label's 63 characters.
func boundedName(base, suffix string) string {
	name := base + suffix
	if len(name) <= validation.DNS1123LabelMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tag := "-" + hex.EncodeToString(sum[:])[:8]
	keep := validation.DNS1123LabelMaxLength - len(tag) - len(suffix)
	return trimDashes(base[:keep]) + tag + suffix
}

// trimDashes drops trailing dashes and dots a cut may leave.
func trimDashes(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '-' || s[len(s)-1] == '.') {
		s = s[:len(s)-1]
	}
	return s
}

// Credential is the ESXi login a migration's Secret carries: exactly one
// of Password and PrivateKeyPEM.
type Credential struct {
	Password      string
	PrivateKeyPEM string
}

// RenderSecret is the migration's Secret: the credential under
// SecretKeyPassword or SecretKeyPrivateKey, nothing else (the host key
// fingerprint is pinned in each Job's spec). owner, when set, is the
// migration's record, so the Secret goes with it.
func RenderSecret(namespace, name, migration string, cred Credential, owner *metav1.OwnerReference) (*corev1.Secret, error) {
	if (cred.Password == "") == (cred.PrivateKeyPEM == "") {
		return nil, errors.New("clusterjob: a Secret carries exactly one of a password and a private key")
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("clusterjob: Secret name %q: %v", name, msgs)
	}
	data := map[string][]byte{SecretKeyPassword: []byte(cred.Password)}
	if cred.PrivateKeyPEM != "" {
		data = map[string][]byte{SecretKeyPrivateKey: []byte(cred.PrivateKeyPEM)}
	}
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{kube.LabelMigration: migration}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return s, nil
}
