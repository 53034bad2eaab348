package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func runStrategyOf(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.RunStrategy != nil {
		return string(*vm.Spec.RunStrategy)
	}
	if vm.Spec.Running != nil && *vm.Spec.Running { //nolint:staticcheck // legacy spelling of Always
		return string(kubevirtv1.RunStrategyAlways)
	}
	return string(kubevirtv1.RunStrategyHalted)
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) (kubevirtv1.VirtualMachineInstanceCondition, bool) {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return kubevirtv1.VirtualMachineInstanceCondition{}, false
}

// stepStart applies the requested run strategy and, when it runs the VM,
// waits for the VMI to be Running.
func (r *run) stepStart(ctx context.Context) error {
	kc := r.e.deps.Kube
	ns, name := r.spec.Namespace, r.spec.Name
	vm, err := kc.GetVirtualMachine(ctx, ns, name)
	if kube.IsNotFound(err) {
		return &backTo{phase: record.PhaseCreatingVM, reason: "the VirtualMachine " + ns + "/" + name + " is gone"}
	}
	if err != nil {
		return err
	}
	if !kube.OfMigration(vm.Labels, name) {
		return needsHuman("VMNotOurs", fmt.Sprintf("VirtualMachine %s/%s is no longer labelled as this migration's", ns, name),
			"restore the label "+kube.LabelMigration+"="+name+" if it is ours, then run apply again", nil)
	}
	rec := r.rec()
	if runStrategyOf(vm) != r.spec.RunStrategy {
		// A patch of the run strategy only: KubeVirt's controller writes
		// the VM too, and a patch neither conflicts with it nor undoes it.
		if err := kc.UpdateVirtualMachineRunStrategyAndLabels(ctx, ns, name, r.spec.RunStrategy, nil, nil); err != nil {
			return err
		}
		if vm, err = kc.GetVirtualMachine(ctx, ns, name); err != nil {
			return err
		}
		r.report(ctx, Event{Kind: EventInfo, Message: "set runStrategy " + r.spec.RunStrategy + " on VirtualMachine " + ns + "/" + name})
	}
	if rec.VM == nil {
		rec.VM = &record.VMEvidence{Name: name}
	}
	rec.VM.UID, rec.VM.RunStrategy = string(vm.UID), r.spec.RunStrategy
	now := r.now()
	if !r.spec.startsVM() {
		rec.SetCondition(now, record.CondVMStarted, false, "NotStarted", "runStrategy "+r.spec.RunStrategy+" leaves the VM stopped")
		return nil
	}
	deadline := time.Now().Add(r.spec.StartTimeout)
	lastPhase := ""
	// The VirtualMachineInstance's change ends the wait at once.
	vmiChanges := r.e.wake.follow(kube.WatchVMIs, ns, name)
	defer vmiChanges.stop()
	wait := r.pollerWaking(vmiChanges)
	for {
		vmi, err := kc.GetVirtualMachineInstance(ctx, ns, name)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return err
		default:
			phase := string(vmi.Status.Phase)
			rec.VM.VMIPhase = phase
			if phase != lastPhase {
				lastPhase = phase
				r.report(ctx, Event{Kind: EventInfo, Message: "VirtualMachineInstance " + ns + "/" + name + " is " + phase})
			}
			switch vmi.Status.Phase {
			case kubevirtv1.Running:
				now := r.now()
				stamp(&rec.Timestamps.VMStarted, now)
				rec.SetCondition(now, record.CondVMStarted, true, "Running", "the VirtualMachineInstance is Running on node "+vmi.Status.NodeName)
				return nil
			case kubevirtv1.Failed, kubevirtv1.Succeeded:
				return transient("VMIStopped", fmt.Sprintf("the VirtualMachineInstance %s/%s is %s", ns, name, phase), nil)
			}
			if c, ok := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); ok &&
				c.Status == corev1.ConditionFalse && c.Reason == "Unschedulable" {
				if strings.Contains(c.Message, "devices.kubevirt.io/kvm") {
					return needsHuman("NoKVM", fmt.Sprintf("the VM cannot be scheduled: no node offers /dev/kvm (%s)", c.Message),
						"enable hardware virtualization on the nodes (devices.kubevirt.io/kvm), or KubeVirt's software emulation, then run apply again", nil)
				}
				return transient("Unschedulable", fmt.Sprintf("the VM cannot be scheduled yet: %s", c.Message), nil)
			}
		}
		if time.Now().After(deadline) {
			return transient("StartTimeout", fmt.Sprintf("the VirtualMachineInstance %s/%s did not reach Running within %s (last phase %q)", ns, name, r.spec.StartTimeout, lastPhase), nil)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}
