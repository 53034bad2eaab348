package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// stepCreateVM makes the VirtualMachine exist, ours, matching the render.
// It is written by server-side apply as kube.FieldManager: the fields the
// render sets are the migration's, and what KubeVirt adds (the firmware
// UUID and serial its admission sets at creation, the guest's SMBIOS
// identity) is never dropped by a later apply.
func (r *run) stepCreateVM(ctx context.Context) error {
	desired, err := r.renderVM()
	if err != nil {
		return needsHuman("RenderFailed", "cannot render the VirtualMachine: "+err.Error(), "fix network_map, then run apply again", nil)
	}
	kc := r.e.deps.Kube
	vm, err := kc.GetVirtualMachine(ctx, r.spec.Namespace, r.spec.Name)
	created := false
	if kube.IsNotFound(err) {
		// Not forced: a VirtualMachine someone else made in the meantime
		// with other values is a conflict, not taken over. After a
		// conflict, or an apply whose reply was lost, EnsureOwned looks
		// at what is there: the labels say whether it is ours.
		apply := func(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
			return kc.ApplyVirtualMachine(ctx, vm, false)
		}
		vm, created, err = kube.EnsureOwned(ctx, kc, desired.DeepCopy(), apply, kube.LabelOwner(r.spec.Name))
		var other *kube.NotOwnedError
		if errors.As(err, &other) {
			return vmNotOurs(r.spec.Namespace, r.spec.Name, other.Owner)
		}
		if created {
			r.report(ctx, Event{Kind: EventInfo, Message: "created VirtualMachine " + r.spec.Namespace + "/" + r.spec.Name})
		}
	}
	switch {
	case err != nil:
		return err
	case !kube.OfMigration(vm.Labels, r.spec.Name):
		return vmNotOurs(r.spec.Namespace, r.spec.Name, vm.Labels[kube.LabelMigration])
	case !created:
		// Ours: the render's fields are the migration's, whoever changed
		// them since.
		applied := desired.DeepCopy()
		if err := kc.ApplyVirtualMachine(ctx, applied, true); err != nil {
			return err
		}
		if applied.Generation != vm.Generation || !maps.Equal(applied.Labels, vm.Labels) || !maps.Equal(applied.Annotations, vm.Annotations) {
			r.report(ctx, Event{Kind: EventInfo, Message: "updated VirtualMachine " + r.spec.Namespace + "/" + r.spec.Name + " to match the migration"})
		}
		vm = applied
	}
	rec := r.rec()
	rec.VM = &record.VMEvidence{Name: vm.Name, UID: string(vm.UID), RunStrategy: runStrategyOf(vm)}
	now := r.now()
	stamp(&rec.Timestamps.VMCreated, now)
	rec.SetCondition(now, record.CondVMCreated, true, "Created", "VirtualMachine "+vm.Name+" exists and matches the migration")
	return nil
}

// vmNotOurs is the stop at a VirtualMachine of the migration's name that
// another (owner, its LabelMigration) made.
func vmNotOurs(namespace, name, owner string) error {
	return needsHuman("VMNotOurs",
		fmt.Sprintf("VirtualMachine %s/%s exists and was not created by this migration (label %s=%q)", namespace, name, kube.LabelMigration, owner),
		"the provider never overwrites what it does not own: remove or rename that VirtualMachine, or choose another destination name, then run apply again", nil)
}
