package kubesim

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const testMAC = "02:00:00:aa:bb:cc"

func virtualMachine(ns, name, dvName string, rs kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(rs),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
						Devices: kubevirtv1.Devices{
							Disks:      []kubevirtv1.Disk{{Name: "disk0", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "virtio"}}}},
							Interfaces: []kubevirtv1.Interface{{Name: "default", MacAddress: testMAC, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}},
						},
					},
					Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
					Volumes: []kubevirtv1.Volume{{Name: "disk0", VolumeSource: kubevirtv1.VolumeSource{
						DataVolume: &kubevirtv1.DataVolumeSource{Name: dvName},
					}}},
				},
			},
		},
	}
}

func getVM(cl client.Client, ns, name string) *kubevirtv1.VirtualMachine {
	vm := &kubevirtv1.VirtualMachine{}
	_ = cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm)
	return vm
}

func getVMI(cl client.Client, ns, name string) (*kubevirtv1.VirtualMachineInstance, bool) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vmi)
	return vmi, err == nil
}

func waitPrintable(t *testing.T, cl client.Client, ns, name string, want kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
	t.Helper()
	var vm *kubevirtv1.VirtualMachine
	eventually(t, 15*time.Second, fmt.Sprintf("VM %s %s", name, want), func() string {
		vm = getVM(cl, ns, name)
		if vm.Status.PrintableStatus == want {
			return ""
		}
		vmi, _ := getVMI(cl, ns, name)
		return fmt.Sprintf("printableStatus %q, VMI phase %q conditions %+v", vm.Status.PrintableStatus, vmi.Status.Phase, vmi.Status.Conditions)
	})
	return vm
}

func setRunStrategy(t *testing.T, cl client.Client, ns, name string, rs kubevirtv1.VirtualMachineRunStrategy) {
	t.Helper()
	for {
		vm := getVM(cl, ns, name)
		vm.Spec.RunStrategy = ptr.To(rs)
		err := cl.Update(t.Context(), vm)
		if err == nil {
			return
		}
		if !isConflict(err) {
			t.Fatal(err)
		}
	}
}

func blankDV(t *testing.T, cl client.Client, ns, name string) {
	t.Helper()
	if err := cl.Create(t.Context(), dataVolume(ns, name, "1Gi", cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}})); err != nil {
		t.Fatal(err)
	}
}

func vmiCond(vmi *kubevirtv1.VirtualMachineInstance, ct kubevirtv1.VirtualMachineInstanceConditionType) kubevirtv1.VirtualMachineInstanceCondition {
	if c := findVMICondition(vmi, ct); c != nil {
		return *c
	}
	return kubevirtv1.VirtualMachineInstanceCondition{}
}

func TestVirtualMachineRunStrategies(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	blankDV(t, cl, ns, "root")
	waitDVPhase(t, cl, ns, "root", cdiv1.Succeeded)

	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatal(err)
	}
	vm := waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusStopped)
	if vm.Status.Created || vm.Status.Ready {
		t.Errorf("Halted VM: created=%v ready=%v, want false false", vm.Status.Created, vm.Status.Ready)
	}

	setRunStrategy(t, cl, ns, "vm", kubevirtv1.RunStrategyAlways)
	phases := map[kubevirtv1.VirtualMachineInstancePhase]bool{}
	eventually(t, 15*time.Second, "VMI Running with agent", func() string {
		vmi, ok := getVMI(cl, ns, "vm")
		if !ok {
			return "no VMI"
		}
		phases[vmi.Status.Phase] = true
		if vmi.Status.Phase != kubevirtv1.Running || vmiCond(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected).Status != corev1.ConditionTrue {
			return fmt.Sprintf("phase %s, conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})
	vmi, _ := getVMI(cl, ns, "vm")
	// Polling may miss short phases; the transition timestamps may not.
	var passed []kubevirtv1.VirtualMachineInstancePhase
	for _, pt := range vmi.Status.PhaseTransitionTimestamps {
		passed = append(passed, pt.Phase)
	}
	if want := []kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Pending, kubevirtv1.Scheduling, kubevirtv1.Scheduled, kubevirtv1.Running}; fmt.Sprint(passed) != fmt.Sprint(want) {
		t.Errorf("VMI phase transitions %v (polled %v), want %v", passed, phases, want)
	}
	if !metav1.IsControlledBy(vmi, getVM(cl, ns, "vm")) {
		t.Errorf("VMI owner references %+v, want the VM as controller", vmi.OwnerReferences)
	}
	if len(vmi.Status.Interfaces) != 1 || vmi.Status.Interfaces[0].MAC != testMAC || vmi.Status.Interfaces[0].IP == "" {
		t.Errorf("interfaces %+v, want one with MAC %s and an IP", vmi.Status.Interfaces, testMAC)
	}
	if vmi.Status.NodeName != NodeName || vmiCond(vmi, kubevirtv1.VirtualMachineInstanceReady).Status != corev1.ConditionTrue {
		t.Errorf("node %q Ready %+v, want %s and True", vmi.Status.NodeName, vmiCond(vmi, kubevirtv1.VirtualMachineInstanceReady), NodeName)
	}
	vm = waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusRunning)
	eventually(t, 5*time.Second, "VM ready", func() string {
		vm = getVM(cl, ns, "vm")
		if vm.Status.Ready && vm.Status.Created {
			return ""
		}
		return fmt.Sprintf("%+v", vm.Status)
	})

	setRunStrategy(t, cl, ns, "vm", kubevirtv1.RunStrategyHalted)
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusStopped)
	eventually(t, 5*time.Second, "VMI deleted", func() string {
		if _, ok := getVMI(cl, ns, "vm"); ok {
			return "VMI still there"
		}
		return ""
	})

	t.Run("legacy spec.running", func(t *testing.T) {
		vm := virtualMachine(ns, "legacy", "root", "")
		vm.Spec.RunStrategy, vm.Spec.Running = nil, ptr.To(true)
		if err := cl.Create(t.Context(), vm); err != nil {
			t.Fatal(err)
		}
		got := waitPrintable(t, cl, ns, "legacy", kubevirtv1.VirtualMachineStatusRunning)
		if got.Status.RunStrategy != kubevirtv1.RunStrategyAlways {
			t.Errorf("status.runStrategy %q, want Always", got.Status.RunStrategy)
		}
	})
	t.Run("Manual waits for a start request", func(t *testing.T) {
		if err := cl.Create(t.Context(), virtualMachine(ns, "manual", "root", kubevirtv1.RunStrategyManual)); err != nil {
			t.Fatal(err)
		}
		waitPrintable(t, cl, ns, "manual", kubevirtv1.VirtualMachineStatusStopped)
		time.Sleep(5 * s.opts.Step)
		if _, ok := getVMI(cl, ns, "manual"); ok {
			t.Fatal("Manual VM started by itself")
		}
		vm := getVM(cl, ns, "manual")
		vm.Status.StateChangeRequests = []kubevirtv1.VirtualMachineStateChangeRequest{{Action: kubevirtv1.StartRequest}}
		if err := cl.Status().Update(t.Context(), vm); err != nil {
			t.Fatal(err)
		}
		waitPrintable(t, cl, ns, "manual", kubevirtv1.VirtualMachineStatusRunning)
	})
	t.Run("deleting the VM removes its VMI", func(t *testing.T) {
		if err := cl.Delete(t.Context(), getVM(cl, ns, "legacy")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "VMI gone", func() string {
			if _, ok := getVMI(cl, ns, "legacy"); ok {
				return "VMI still there"
			}
			return ""
		})
	})
}

func TestVirtualMachineWaitsForVolumes(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "later", kubevirtv1.RunStrategyAlways)); err != nil {
		t.Fatal(err)
	}
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusPvcNotFound)
	eventually(t, 5*time.Second, "VMI Pending, Synchronized=False FailedPvcNotFound", func() string {
		vmi, _ := getVMI(cl, ns, "vm")
		if vmi.Status.Phase != kubevirtv1.Pending || vmiCond(vmi, kubevirtv1.VirtualMachineInstanceSynchronized).Reason != ReasonFailedPvcNotFound {
			return fmt.Sprintf("phase %q conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})
	if err := cl.Create(t.Context(), dataVolume(ns, "later", "1Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
		t.Fatal(err)
	}
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusProvisioning)
	// Finish the DataVolume by hand, as if the upload had happened.
	dv := waitDVPhase(t, cl, ns, "later", cdiv1.UploadReady)
	dv.Status.Phase = cdiv1.Succeeded
	if err := cl.Status().Update(t.Context(), dv); err != nil {
		t.Fatal(err)
	}
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusRunning)

	t.Run("failed DataVolume", func(t *testing.T) {
		// CDI fails a DataVolume rarely (a lost claim): injected here.
		s.FailNextDataVolumes(1, "", "")
		if err := cl.Create(t.Context(), dataVolume(ns, "bad", "1Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
			t.Fatal(err)
		}
		waitDVPhase(t, cl, ns, "bad", cdiv1.Failed)
		if err := cl.Create(t.Context(), virtualMachine(ns, "vm-bad", "bad", kubevirtv1.RunStrategyAlways)); err != nil {
			t.Fatal(err)
		}
		waitPrintable(t, cl, ns, "vm-bad", kubevirtv1.VirtualMachineStatusDataVolumeError)
	})
}
