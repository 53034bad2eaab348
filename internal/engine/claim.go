package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// The claim on the source VM (see coord.Claims) is taken in Validated,
// checked by Preview and released by Forget.

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

// claims are the claims on source VMs, in the claim namespace.
func (e *Engine) claims() coord.Claims {
	return coord.Claims{Kube: e.deps.Kube, Namespace: e.claimNamespace(), Records: e.store(), Now: e.now}
}

func (e *Engine) claimNamespace() string {
	if e.deps.ClaimNamespace != "" {
		return e.deps.ClaimNamespace
	}
	return coord.DefaultClaimNamespace
}

// SourceClaimOf returns the live claim on a source VM (host is its
// configured name) by a migration other than namespace/name, or nil. A
// claim whose holder has no record any more (forgotten by an older
// version, or its record deleted by hand) is not live.
func (e *Engine) SourceClaimOf(ctx context.Context, host, vmxPath, namespace, name string) (*coord.SourceClaim, error) {
	return e.claims().Of(ctx, e.hostIdentity(host), vmxPath, namespace, name)
}

// claimSource makes this migration the holder of its source VM's claim,
// or stops naming the migration that holds it.
func (r *run) claimSource(ctx context.Context, vm *esxi.VM) error {
	holder, took, err := r.e.claims().Take(ctx, r.spec.Host, r.e.hostIdentity(r.spec.Host), vm.VMXPath, r.spec.Namespace, r.spec.Name)
	if err != nil {
		return err
	}
	if holder != nil {
		return onField(FieldSource, needsHuman("SourceClaimed",
			fmt.Sprintf("the source VM %s on ESXi host %s is already being migrated by %s (claimed at %s in ConfigMap %s/%s); one VM is migrated by one migration only, so nothing was done to it",
				vm.VMXPath, r.spec.Host, holder.Holder(), holder.ClaimedAt, r.e.claimNamespace(), coord.SourceClaimName(r.e.hostIdentity(r.spec.Host), vm.VMXPath)),
			fmt.Sprintf("remove this migration from the configuration, or forget %s first (destroy it), then run apply again", holder.Holder()), nil))
	}
	if took {
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("claimed the source VM %s on host %s (ConfigMap %s/%s)",
			vm.VMXPath, r.spec.Host, r.e.claimNamespace(), coord.SourceClaimName(r.e.hostIdentity(r.spec.Host), vm.VMXPath))})
	}
	return nil
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
			Message: fmt.Sprintf("VM %q is already being migrated by %s (since %s). A VM is migrated by one migration only: unless this plan destroys that migration first (a replacement), apply stops at Validated, before touching the VM. Remove this one, or destroy that one first.", vm.Name, c.Holder(), c.ClaimedAt)}, nil
	}
	return preflight.Check{ID: preflight.CheckSourceUnclaimed, Severity: preflight.Warning, Passed: true,
		Message: fmt.Sprintf("VM %q is not being migrated by another migration.", vm.Name)}, nil
}
