package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
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
// Deps.ClaimNamespace) because two migrations of one source may go to
// different destination namespaces, and Kubernetes has no cluster-scoped
// object for such a lock without a CRD. The engine creates that namespace
// when it is missing; the provider's credentials need get, create, update,
// list and delete on ConfigMaps there.

// DefaultClaimNamespace is where source claims live unless
// Deps.ClaimNamespace says otherwise.
const DefaultClaimNamespace = "vmmigration-system"

// Source claim data keys and labels.
const (
	claimKeyHost      = "host"
	claimKeyVMXPath   = "vmxPath"
	claimKeyNamespace = "namespace"
	claimKeyName      = "name"
	claimKeyClaimedAt = "claimedAt"
	// LabelClaimNamespace and LabelMigration on a claim name its holder.
	LabelClaimNamespace = "vmmigration.io/namespace"
	labelClaimKind      = "vmmigration.io/kind"
	claimKindValue      = "source-claim"
)

// SourceClaimName is the name of the claim ConfigMap of a source VM: a
// hash of the ESXi host's identity (see hostIdentity) and the VM's .vmx
// path.
func SourceClaimName(hostID, vmxPath string) string {
	h := sha256.Sum256([]byte(hostID + "\x00" + vmxPath))
	return "vmmigration-source-" + hex.EncodeToString(h[:12])
}

// hostIdentity names the physical host behind a configured host name: its
// pinned SSH host key when there is one (the same host under two names is
// one host, two hosts that different configurations both call "esx1" are
// two), else its address and port, else the name.
func (e *Engine) hostIdentity(host string) string {
	c, err := e.deps.ESXi.Client(host)
	if err != nil {
		return "name:" + host
	}
	cfg := c.Config()
	switch {
	case cfg.HostKeyFingerprint != "":
		return "hostkey:" + cfg.HostKeyFingerprint
	case cfg.Address != "":
		return fmt.Sprintf("address:%s:%d", strings.ToLower(cfg.Address), cfg.Port)
	}
	return "name:" + host
}

// SourceClaim says which migration holds a source VM.
type SourceClaim struct {
	Host, VMXPath   string
	Namespace, Name string
	ClaimedAt       string
}

func (c SourceClaim) holder() string { return c.Namespace + "/" + c.Name }

func (e *Engine) claimNamespace() string {
	if e.deps.ClaimNamespace != "" {
		return e.deps.ClaimNamespace
	}
	return DefaultClaimNamespace
}

func claimOf(cm *corev1.ConfigMap) SourceClaim {
	return SourceClaim{Host: cm.Data[claimKeyHost], VMXPath: cm.Data[claimKeyVMXPath],
		Namespace: cm.Data[claimKeyNamespace], Name: cm.Data[claimKeyName], ClaimedAt: cm.Data[claimKeyClaimedAt]}
}

// SourceClaimOf returns the live claim on a source VM (host is its
// configured name) by a migration
// other than namespace/name, or nil. A claim whose holder has no record
// any more (forgotten by an older version, or its record deleted by hand)
// is not live.
func (e *Engine) SourceClaimOf(ctx context.Context, host, vmxPath, namespace, name string) (*SourceClaim, error) {
	cm, err := e.deps.Kube.GetConfigMap(ctx, e.claimNamespace(), SourceClaimName(e.hostIdentity(host), vmxPath))
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
	live, err := e.holderLive(ctx, c)
	if err != nil || !live {
		return nil, err
	}
	return &c, nil
}

// holderLive reports whether a claim's holder still has a record. When
// that cannot be read (no permission in its namespace), it counts as live.
func (e *Engine) holderLive(ctx context.Context, c SourceClaim) (bool, error) {
	if validPathIdentity(c.Namespace, c.Name) != nil {
		return false, nil
	}
	_, err := e.load(ctx, c.Namespace, c.Name)
	switch {
	case errors.Is(err, ErrNoRecord):
		return false, nil
	case err == nil:
		return true, nil
	}
	var sc *stopCause
	if errors.As(err, &sc) {
		// A ConfigMap of that name that is not a readable record of that
		// migration: the holder is gone.
		return false, nil
	}
	if kube.Classify(err) == kube.Transient {
		return false, err
	}
	return true, nil
}

// claimSource makes this migration the holder of its source VM's claim,
// or stops naming the migration that holds it.
func (r *run) claimSource(ctx context.Context, vm *esxi.VM) error {
	holder, took, err := r.e.takeClaim(ctx, r.spec.Host, vm.VMXPath, r.spec.Namespace, r.spec.Name)
	if err != nil {
		return err
	}
	if holder != nil {
		return onField(FieldSource, needsHuman("SourceClaimed",
			fmt.Sprintf("the source VM %s on ESXi host %s is already being migrated by %s (claimed at %s in ConfigMap %s/%s); one VM is migrated by one migration only, so nothing was done to it",
				vm.VMXPath, r.spec.Host, holder.holder(), holder.ClaimedAt, r.e.claimNamespace(), SourceClaimName(r.e.hostIdentity(r.spec.Host), vm.VMXPath)),
			fmt.Sprintf("remove this migration from the configuration, or forget %s first (destroy it), then run apply again", holder.holder()), nil))
	}
	if took {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("claimed the source VM %s on host %s (ConfigMap %s/%s)",
			vm.VMXPath, r.spec.Host, r.e.claimNamespace(), SourceClaimName(r.e.hostIdentity(r.spec.Host), vm.VMXPath))})
	}
	return nil
}

// takeClaim makes migration namespace/name the holder of the claim on a
// source VM (host is its configured name). It returns the holder when
// another live migration has it, and whether this call took it.
func (e *Engine) takeClaim(ctx context.Context, host, vmxPath, namespace, name string) (*SourceClaim, bool, error) {
	kc := e.deps.Kube
	ns, claimName := e.claimNamespace(), SourceClaimName(e.hostIdentity(host), vmxPath)
	want := map[string]string{
		claimKeyHost: host, claimKeyVMXPath: vmxPath,
		claimKeyNamespace: namespace, claimKeyName: name, claimKeyClaimedAt: e.now().Format(time.RFC3339),
	}
	labels := map[string]string{kube.LabelManagedBy: kube.ManagedByValue, labelClaimKind: claimKindValue,
		LabelClaimNamespace: namespace, kube.LabelMigration: name}
	holds := func(obj client.Object) (string, bool) {
		c := claimOf(obj.(*corev1.ConfigMap))
		return c.holder(), c.Namespace == namespace && c.Name == name
	}
	for attempt := 0; attempt < 5; attempt++ {
		cm, err := kc.GetConfigMap(ctx, ns, claimName)
		switch {
		case kube.IsNotFound(err):
			if err := e.ensureClaimNamespace(ctx); err != nil {
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
		live, err := e.holderLive(ctx, c)
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
	return nil, false, transient("SourceClaimContended", "the claim on the source VM "+vmxPath+" kept changing while this run tried to take it", nil)
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
	return needsHuman("SourceClaimUnavailable",
		fmt.Sprintf("cannot %s the claim on the source VM (ConfigMap %s/%s): %v", op, ns, name, cause),
		"grant the provider's credentials get, list, create, update and delete on ConfigMaps in namespace "+ns+", then run apply again", cause)
}

// ensureClaimNamespace creates the claim namespace if it is missing.
func (e *Engine) ensureClaimNamespace(ctx context.Context) error {
	kc := e.deps.Kube
	ns := e.claimNamespace()
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
	return needsHuman("SourceClaimUnavailable",
		fmt.Sprintf("the namespace %s, which holds the claims that keep two migrations from moving one source VM, does not exist and cannot be created: %v", ns, cause),
		"create namespace "+ns+" (kubectl create namespace "+ns+") and grant the provider's credentials access to ConfigMaps there, then run apply again", cause)
}

// releaseSourceClaims deletes the claims migration namespace/name holds.
func (e *Engine) releaseSourceClaims(ctx context.Context, namespace, name string) ([]string, error) {
	kc := e.deps.Kube
	items, err := kc.ListConfigMaps(ctx, e.claimNamespace(),
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

// claimCheck is the pre-flight check that the source VM is not claimed by
// another migration, for Preview and the Validated checkpoint alike.
func (e *Engine) claimCheck(ctx context.Context, spec Spec, vm *esxi.VM) (preflight.Check, error) {
	c, err := e.SourceClaimOf(ctx, spec.Host, vm.VMXPath, spec.Namespace, spec.Name)
	if err != nil && kube.Classify(err) != kube.Transient {
		// No access to the claims (RBAC): the apply could not take the
		// claim either, so the plan says so now.
		return preflight.Check{ID: preflight.CheckSourceUnclaimed, Severity: preflight.Blocker,
			Message: fmt.Sprintf("Whether another migration is moving VM %q cannot be read (%v). Grant get, list, create, update and delete on ConfigMaps in namespace %s.", vm.Name, err, e.claimNamespace())}, nil
	}
	if err != nil {
		return preflight.Check{}, err
	}
	// A warning, not a blocker: when this migration replaces the holder in
	// the same apply (its destination changed), Terraform destroys the
	// holder first, which releases the claim. Otherwise taking the claim,
	// the act that follows the checks in Validated, stops the migration
	// before anything is done to the source.
	if c != nil {
		return preflight.Check{ID: preflight.CheckSourceUnclaimed, Severity: preflight.Warning,
			Message: fmt.Sprintf("VM %q is already being migrated by %s (since %s). A VM is migrated by one migration only: unless this plan destroys that migration first (a replacement), apply stops at Validated, before touching the VM. Remove this one, or destroy that one first.", vm.Name, c.holder(), c.ClaimedAt)}, nil
	}
	return preflight.Check{ID: preflight.CheckSourceUnclaimed, Severity: preflight.Warning, Passed: true,
		Message: fmt.Sprintf("VM %q is not being migrated by another migration.", vm.Name)}, nil
}
