package kubesim

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The controllers run when what they watch changes and when a timed step
// they saw falls due, not at Resync: with Resync an hour, a DataVolume
// still gets its claim and succeeds, and a VM still goes through its
// VMI's timed phases to Running with its agent.
func TestControllersWakeOnChangesAndDueSteps(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	opts := fast(c, ns)
	opts.Resync = time.Hour
	startSim(t, opts)
	// The sim's first pass is over: from here on only a change or a due
	// step runs another.
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	blankDV(t, cl, ns, "root")
	waitDVPhase(t, cl, ns, "root", cdiv1.Succeeded)
	t.Logf("DV after %v", time.Since(start))

	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyAlways)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "VMI Running with agent", func() string {
		vmi, ok := getVMI(cl, ns, "vm")
		if !ok {
			return "no VMI"
		}
		if vmi.Status.Phase != kubevirtv1.Running || vmiCond(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected).Status != corev1.ConditionTrue {
			return fmt.Sprintf("phase %s, conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})
	t.Logf("VM after %v", time.Since(start))
}
