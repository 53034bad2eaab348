package kube

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the name under which the provider writes the objects it
// owns, so that the API server tracks which fields are the provider's and
// which were set by others (KubeVirt's admission and controllers, users).
const FieldManager = "vmmigration"

// UpdateVirtualMachineRunStrategyAndLabels sets a VirtualMachine's run
// strategy and replaces the labels a user manages on it (oldLabels removed,
// newLabels set; other labels, such as ours, are left alone). It is a JSON
// merge patch of those fields only: everything else on the VM, such as the
// firmware identity KubeVirt set at creation, is left as the server holds
// it, including fields this client's types do not know.
func (c *Client) UpdateVirtualMachineRunStrategyAndLabels(ctx context.Context, namespace, name, runStrategy string, oldLabels, newLabels map[string]string) error {
	labels := map[string]any{}
	for k := range oldLabels {
		if _, keep := newLabels[k]; !keep {
			labels[k] = nil
		}
	}
	for k, v := range newLabels {
		labels[k] = v
	}
	patch := map[string]any{}
	if len(labels) > 0 {
		patch["metadata"] = map[string]any{"labels": labels}
	}
	if runStrategy != "" {
		// The deprecated spec.running conflicts with runStrategy.
		patch["spec"] = map[string]any{"runStrategy": runStrategy, "running": nil}
	}
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	cl, err := c.raw()
	if err != nil {
		return wrap("patch", "VirtualMachine", namespace, name, err)
	}
	vm := &kubevirtv1.VirtualMachine{}
	vm.Namespace, vm.Name = namespace, name
	return wrap("patch", "VirtualMachine", namespace, name,
		cl.Patch(ctx, vm, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager)))
}

// ApplyVirtualMachine makes the fields set in vm hold on the server by a
// server-side apply as FieldManager, creating the VM if there is none, and
// updates vm with what the server stored. Fields vm leaves out are left as
// they are (KubeVirt's firmware UUID and serial, defaults, others' labels)
// unless an earlier apply set them: those are removed. The API server does
// not count what admission webhooks add to the request as the applier's.
// With force, fields someone else set are taken over; without it, a field
// someone else set to another value is a conflict (IsConflict).
func (c *Client) ApplyVirtualMachine(ctx context.Context, vm *kubevirtv1.VirtualMachine, force bool) error {
	body, err := applyBody(vm)
	if err != nil {
		return wrap("apply", "VirtualMachine", vm.Namespace, vm.Name, err)
	}
	opts := []client.PatchOption{client.FieldOwner(FieldManager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	cl, err := c.raw()
	if err == nil {
		err = cl.Patch(ctx, vm, client.RawPatch(types.ApplyPatchType, body), opts...)
	}
	return wrap("apply", "VirtualMachine", vm.Namespace, vm.Name, err)
}

// applyBody is vm as an apply configuration: its type, name, labels,
// annotations and spec; no status, and none of the server's metadata.
func applyBody(vm *kubevirtv1.VirtualMachine) ([]byte, error) {
	spec, err := json.Marshal(vm.Spec)
	if err != nil {
		return nil, err
	}
	meta := map[string]any{"namespace": vm.Namespace, "name": vm.Name}
	if len(vm.Labels) > 0 {
		meta["labels"] = vm.Labels
	}
	if len(vm.Annotations) > 0 {
		meta["annotations"] = vm.Annotations
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": kubevirtv1.SchemeGroupVersion.String(), "kind": "VirtualMachine",
		"metadata": meta, "spec": json.RawMessage(spec),
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the apply configuration: %w", err)
	}
	return body, nil
}
