package kube

import (
	"context"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// UpdateVirtualMachineRunStrategyAndLabels sets a VirtualMachine's run
// strategy and replaces the labels a user manages on it (oldLabels removed,
// newLabels set; other labels, such as ours, are left alone). Conflicts
// with concurrent writers are retried on a fresh read.
func (c *Client) UpdateVirtualMachineRunStrategyAndLabels(ctx context.Context, namespace, name, runStrategy string, oldLabels, newLabels map[string]string) error {
	policy := retry.Policy{Attempts: 5, Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	return retry.Do(ctx, policy, IsConflict, func(ctx context.Context) error {
		vm, err := c.GetVirtualMachine(ctx, namespace, name)
		if err != nil {
			return err
		}
		if runStrategy != "" {
			rs := kubevirtv1.VirtualMachineRunStrategy(runStrategy)
			vm.Spec.RunStrategy = &rs
			vm.Spec.Running = nil //nolint:staticcheck // the deprecated field conflicts with runStrategy
		}
		for k := range oldLabels {
			if _, keep := newLabels[k]; !keep {
				delete(vm.Labels, k)
			}
		}
		if len(newLabels) > 0 && vm.Labels == nil {
			vm.Labels = map[string]string{}
		}
		for k, v := range newLabels {
			vm.Labels[k] = v
		}
		return c.UpdateVirtualMachine(ctx, vm)
	})
}
