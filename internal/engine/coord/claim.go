package coord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// One source VM, one migration.
//
// A migration's lease and record are named after its destination, so two
// migrations of the same source to different destinations would not see
// each other, and both could power the source off. Before anything acts on
// the source, the Validated checkpoint claims it: it creates the ConfigMap
// SourceClaimName(host identity, vmxPath) in the claim namespace, holding the
// claiming migration's namespace/name. Creating an object of a given name
// succeeds once, so of two concurrent migrations exactly one holds the
// claim; the other stops at Validated (ManualInterventionRequired) naming
// the first. The claim is kept while the holder's record exists and is
// released by Forget.
//
// The claims live in one well-known namespace (DefaultClaimNamespace,
// the engine's Deps.ClaimNamespace) because two migrations of one source
// may go to different destination namespaces, and Kubernetes has no
// cluster-scoped object for such a lock without a CRD. Claims creates that
// namespace when it is missing; the provider's credentials need get,
// create, update, list and delete on ConfigMaps there.

// DefaultClaimNamespace is where source claims live unless the engine is
// told otherwise.
const DefaultClaimNamespace = "vmmigration-system"

// Source claim data keys and labels.
const (
	claimKeyHost      = "host"
	claimKeyVMXPath   = "vmxPath"
	claimKeyNamespace = "namespace"
	claimKeyName      = "name"
	claimKeyClaimedAt = "claimedAt"
	// LabelClaimNamespace and kube.LabelMigration on a claim name its
	// holder.
	LabelClaimNamespace = "vmmigration.io/namespace"
	labelClaimKind      = "vmmigration.io/kind"
	claimKindValue      = "source-claim"
)

// SourceClaimName is the name of the claim ConfigMap of a source VM: a
// hash of the ESXi host's identity (see the engine's hostIdentity) and the
// VM's .vmx path.
func SourceClaimName(hostID, vmxPath string) string {
	h := sha256.Sum256([]byte(hostID + "\x00" + vmxPath))
	return "vmmigration-source-" + hex.EncodeToString(h[:12])
}

// SourceClaim says which migration holds a source VM.
type SourceClaim struct {
	Host, VMXPath   string
	Namespace, Name string
	ClaimedAt       string
}

// Holder is the claiming migration's namespace/name.
func (c SourceClaim) Holder() string { return c.Namespace + "/" + c.Name }

func claimOf(cm *corev1.ConfigMap) SourceClaim {
	return SourceClaim{Host: cm.Data[claimKeyHost], VMXPath: cm.Data[claimKeyVMXPath],
		Namespace: cm.Data[claimKeyNamespace], Name: cm.Data[claimKeyName], ClaimedAt: cm.Data[claimKeyClaimedAt]}
}

// Claims reads, takes and releases the claims on source VMs. A source VM
// is named by its host's configured name (host), the identity of the
// physical host behind it (hostID, which names the claim) and its .vmx
// path.
type Claims struct {
	Kube *kube.Client
	// Namespace holds the claims.
	Namespace string
	// Records tells whether a claim's holder still has a record.
	Records Store
	// Now tells the time of a claim.
	Now func() time.Time
}

// Of returns the live claim on a source VM by a migration other than
// namespace/name, or nil. A claim whose holder has no record any more
// (forgotten by an older version, or its record deleted by hand) is not
// live.
func (cl Claims) Of(ctx context.Context, hostID, vmxPath, namespace, name string) (*SourceClaim, error) {
	cm, err := cl.Kube.GetConfigMap(ctx, cl.Namespace, SourceClaimName(hostID, vmxPath))
	switch {
	case kube.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	c := claimOf(cm)
	if c.Namespace == namespace && c.Name == name {
		return nil, nil
	}
	live, err := cl.holderLive(ctx, c)
	if err != nil || !live {
		return nil, err
	}
	return &c, nil
}

// holderLive reports whether a claim's holder still has a record. When
// that cannot be read (no permission in its namespace), it counts as live.
func (cl Claims) holderLive(ctx context.Context, c SourceClaim) (bool, error) {
	if len(validation.IsDNS1123Label(c.Namespace)) > 0 || len(validation.IsDNS1123Label(c.Name)) > 0 {
		return false, nil
	}
	_, err := cl.Records.Load(ctx, c.Namespace, c.Name)
	switch {
	case errors.Is(err, ErrNoRecord):
		return false, nil
	case err == nil:
		return true, nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		// A ConfigMap of that name that is not a readable record of that
		// migration: the holder is gone.
		return false, nil
	}
	if kube.Classify(err) == kube.Transient {
		return false, err
	}
	return true, nil
}

// Take makes migration namespace/name the holder of the claim on a source
// VM. It returns the holder when another live migration has it, and
// whether this call took it.
func (cl Claims) Take(ctx context.Context, host, hostID, vmxPath, namespace, name string) (*SourceClaim, bool, error) {
	kc := cl.Kube
	ns, claimName := cl.Namespace, SourceClaimName(hostID, vmxPath)
	want := map[string]string{
		claimKeyHost: host, claimKeyVMXPath: vmxPath,
		claimKeyNamespace: namespace, claimKeyName: name, claimKeyClaimedAt: cl.Now().Format(time.RFC3339),
	}
	labels := map[string]string{kube.LabelManagedBy: kube.ManagedByValue, labelClaimKind: claimKindValue,
		LabelClaimNamespace: namespace, kube.LabelMigration: name}
	holds := func(obj client.Object) (string, bool) {
		c := claimOf(obj.(*corev1.ConfigMap))
		return c.Holder(), c.Namespace == namespace && c.Name == name
	}
	for attempt := 0; attempt < 5; attempt++ {
		cm, err := kc.GetConfigMap(ctx, ns, claimName)
		switch {
		case kube.IsNotFound(err):
			if err := cl.ensureNamespace(ctx); err != nil {
				return nil, false, err
			}
			// Someone may claim it first, or our create may be applied
			// and its reply lost: EnsureOwned looks again.
			var took bool
			_, took, err = kube.EnsureOwned(ctx, kc,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claimName, Labels: labels}, Data: want},
				kc.CreateConfigMap, holds)
			var other *kube.NotOwnedError
			switch {
			case err == nil:
				return nil, took, nil
			case errors.As(err, &other):
				cm = other.Object.(*corev1.ConfigMap)
			case kube.Classify(err) == kube.Transient:
				continue
			default:
				return nil, false, claimError(ns, claimName, err)
			}
		case err != nil:
			return nil, false, claimError(ns, claimName, err)
		}
		c := claimOf(cm)
		if c.Namespace == namespace && c.Name == name {
			return nil, false, nil
		}
		live, err := cl.holderLive(ctx, c)
		if err != nil {
			return nil, false, err
		}
		if live {
			return &c, false, nil
		}
		// The holder's record is gone: take the claim over (the update
		// fails on a conflict if another run does the same).
		cm.Data, cm.Labels = want, labels
		if err := kc.UpdateConfigMap(ctx, cm); err != nil {
			if kube.IsConflict(err) || kube.IsNotFound(err) {
				continue
			}
			return nil, false, claimError(ns, claimName, err)
		}
		return nil, true, nil
	}
	return nil, false, &fault.Error{Class: fault.Transient, Reason: "SourceClaimContended",
		Message: "the claim on the source VM " + vmxPath + " kept changing while this run tried to take it"}
}

// claimError is err, from an operation on the claim ConfigMap ns/name,
// as a transient error, or as a stop that says which permission the
// provider lacks.
func claimError(ns, name string, err error) error {
	if kube.Classify(err) == kube.Transient {
		return err
	}
	op := "access"
	var ke *kube.Error
	if errors.As(err, &ke) {
		op = ke.Op
	}
	cause := kube.Cause(err)
	return &fault.Error{Class: fault.NeedsHuman, Reason: "SourceClaimUnavailable",
		Message: fmt.Sprintf("cannot %s the claim on the source VM (ConfigMap %s/%s): %v", op, ns, name, cause),
		Action:  "grant the provider's credentials get, list, create, update and delete on ConfigMaps in namespace " + ns + ", then run apply again",
		Err:     cause}
}

// ensureNamespace creates the claim namespace if it is missing.
func (cl Claims) ensureNamespace(ctx context.Context) error {
	return ensureNamespace(ctx, cl.Kube, cl.Namespace, "SourceClaimUnavailable",
		"the claims that keep two migrations from moving one source VM", "ConfigMaps")
}

// ensureNamespace creates namespace ns, which holds what (for people),
// if it is missing. A namespace that cannot be created stops with reason,
// saying to create it and grant access to kinds there.
func ensureNamespace(ctx context.Context, kc *kube.Client, ns, reason, what, kinds string) error {
	ok, err := kc.NamespaceExists(ctx, ns)
	switch {
	case ok:
		return nil
	case err != nil && kube.Classify(err) == kube.Transient:
		return err
	}
	err = kc.CreateNamespace(ctx, ns, map[string]string{kube.LabelManagedBy: kube.ManagedByValue})
	if err == nil || kube.IsAlreadyExists(err) {
		return nil
	}
	cause := kube.Cause(err)
	return &fault.Error{Class: fault.NeedsHuman, Reason: reason,
		Message: fmt.Sprintf("the namespace %s, which holds %s, does not exist and cannot be created: %v", ns, what, cause),
		Action:  "create namespace " + ns + " (kubectl create namespace " + ns + ") and grant the provider's credentials access to " + kinds + " there, then run apply again",
		Err:     cause}
}

// Release deletes the claims migration namespace/name holds and says, for
// each, what was released.
func (cl Claims) Release(ctx context.Context, namespace, name string) ([]string, error) {
	kc := cl.Kube
	items, err := kc.ListConfigMaps(ctx, cl.Namespace,
		map[string]string{labelClaimKind: claimKindValue, LabelClaimNamespace: namespace, kube.LabelMigration: name})
	if err != nil {
		if kube.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for i := range items {
		cm := &items[i]
		c := claimOf(cm)
		if c.Namespace != namespace || c.Name != name {
			continue
		}
		if err := kc.DeleteConfigMapIfUnchanged(ctx, cm); err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("released the claim on the source VM %s on host %s", c.VMXPath, c.Host))
	}
	return out, nil
}
