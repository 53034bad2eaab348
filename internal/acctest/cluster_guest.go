package acctest

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Guest is what a VirtualMachineInstance reports of its guest: KubeVirt
// fills it from the guest agent only.
type Guest struct {
	Phase string
	// AgentConnected is the AgentConnected condition.
	AgentConnected bool
	// OSID is guestOSInfo.id ("debian"), OSVersion its versionId.
	OSID, OSVersion string
	IPs             []string
	// Interfaces' models, from the VMI's domain.
	DiskBus, NICModel string
}

// VMIGuest reads what the VMI namespace/name reports of its guest.
func (c *Cluster) VMIGuest(t testing.TB, namespace, name string) Guest {
	t.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, vmi); err != nil {
		t.Fatalf("get VirtualMachineInstance %s/%s: %v", namespace, name, err)
	}
	g := Guest{Phase: string(vmi.Status.Phase), OSID: vmi.Status.GuestOSInfo.ID, OSVersion: vmi.Status.GuestOSInfo.VersionID}
	for _, cond := range vmi.Status.Conditions {
		if cond.Type == kubevirtv1.VirtualMachineInstanceAgentConnected && cond.Status == "True" {
			g.AgentConnected = true
		}
	}
	for _, i := range vmi.Status.Interfaces {
		if i.IP != "" {
			g.IPs = append(g.IPs, i.IP)
		}
	}
	if ds := vmi.Spec.Domain.Devices.Disks; len(ds) > 0 && ds[0].Disk != nil {
		g.DiskBus = string(ds[0].Disk.Bus)
	}
	if is := vmi.Spec.Domain.Devices.Interfaces; len(is) > 0 {
		g.NICModel = is[0].Model
	}
	return g
}

// GuestConsole is the end of the serial console of VMI namespace/name as
// the cluster logs it (its virt-launcher pod's guest-console-log).
func (c *Cluster) GuestConsole(t testing.TB, namespace, name string) string {
	t.Helper()
	kc := kube.NewForRESTConfig(c.tc.RESTConfig())
	out, err := kc.GuestConsoleTail(t.Context(), namespace, name, 60)
	if err != nil {
		t.Fatalf("console of %s/%s: %v", namespace, name, err)
	}
	return out
}
