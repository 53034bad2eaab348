package kubesim

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestFirmwareIdentityAtCreation runs KubeVirt v1.7.0's own VM mutator (a
// random firmware UUID and serial at create, none at update) and holds the
// sim to KubeVirt's FirmwareController (the legacy UUID for a VM that lost
// its own).
func TestFirmwareIdentityAtCreation(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))

	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatal(err)
	}
	vm := getVM(cl, ns, "vm")
	fw := vm.Spec.Template.Spec.Domain.Firmware
	if fw == nil || fw.UUID == "" || fw.Serial == "" {
		t.Fatalf("firmware after create = %+v, want a UUID and a serial", fw)
	}
	if fw.UUID == CalculateLegacyUUID("vm") {
		t.Errorf("firmware UUID %s is the legacy one; KubeVirt v1.7 gives a random one at create", fw.UUID)
	}
	got, ok := s.AdmittedFirmware(ns, "vm")
	if !ok || got.UUID != string(fw.UUID) || got.Serial != fw.Serial {
		t.Errorf("AdmittedFirmware = %+v, %v; the VM has %s / %s", got, ok, fw.UUID, fw.Serial)
	}

	// KubeVirt refuses a VM whose template has no domain at all.
	raw, err := json.Marshal(map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"namespace": ns, "name": "bare"},
		"spec":     map[string]any{"runStrategy": "Halted", "template": map[string]any{"spec": map[string]any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	bare := &kubevirtv1.VirtualMachine{}
	bare.Namespace, bare.Name = ns, "bare"
	err = cl.Patch(t.Context(), bare, client.RawPatch(types.ApplyPatchType, raw), client.FieldOwner("test"))
	if err == nil || !strings.Contains(err.Error(), "spec.template.spec.domain") {
		t.Errorf("VM without a domain: %v, want KubeVirt's refusal naming spec.template.spec.domain", err)
	}

	// An update keeps what it sends: the mutator does not restore a
	// dropped identity; the VM controller sets the legacy UUID.
	for {
		vm = getVM(cl, ns, "vm")
		vm.Spec.Template.Spec.Domain.Firmware = nil
		err := cl.Update(t.Context(), vm)
		if err == nil {
			break
		}
		if !isConflict(err) {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "legacy firmware UUID", func() string {
		fw := getVM(cl, ns, "vm").Spec.Template.Spec.Domain.Firmware
		if fw == nil || fw.UUID != CalculateLegacyUUID("vm") || fw.Serial != "" {
			return fmt.Sprintf("firmware %+v", fw)
		}
		return ""
	})
}

// TestSerialConsoleLogged holds the sim to KubeVirt v1.7.0's
// isSerialConsoleLogEnabled (pkg/virt-controller/services/serialconsolelog.go).
func TestSerialConsoleLogged(t *testing.T) {
	on, off := true, false
	for _, c := range []struct {
		autoattach, log *bool
		clusterDisabled bool
		want            bool
	}{
		{want: true},
		{clusterDisabled: true, want: false},
		{log: &on, clusterDisabled: true, want: true},
		{log: &off, want: false},
		{autoattach: &off, log: &on, want: false},
		{autoattach: &on, clusterDisabled: true, want: false},
	} {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		vmi.Spec.Domain.Devices.AutoattachSerialConsole = c.autoattach
		vmi.Spec.Domain.Devices.LogSerialConsole = c.log
		if got := serialConsoleLogged(vmi, c.clusterDisabled); got != c.want {
			t.Errorf("autoattachSerialConsole %v, logSerialConsole %v, disableSerialConsoleLog %v: logged %v, want %v",
				ptrText(c.autoattach), ptrText(c.log), c.clusterDisabled, got, c.want)
		}
	}
}

func ptrText(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

// TestAdmissionPortTakenBeforeListen starts a sim whose admission server is
// first offered a port another process holds (as happens when the port is
// taken between being picked and being listened on): the server exits, a
// new port is tried, and the sim admits VirtualMachines.
func TestAdmissionPortTakenBeforeListen(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var offers atomic.Int32
	admissionPort = func() (int, error) {
		if offers.Add(1) == 1 {
			return taken.Addr().(*net.TCPAddr).Port, nil
		}
		return freePort()
	}
	t.Cleanup(func() { admissionPort = freePort })

	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	startSim(t, fast(c, ns))
	if n := offers.Load(); n < 2 {
		t.Fatalf("the admission server was offered %d port(s); the first was taken", n)
	}
	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatal(err)
	}
	if fw := getVM(cl, ns, "vm").Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
		t.Errorf("firmware after create = %+v: KubeVirt's mutator did not admit the VM", fw)
	}
}
