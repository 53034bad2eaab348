package kubesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestAdmissionServerShared starts two sims on one API server at once,
// with different namespaces and KubeVirt configurations: they share one
// admission server process, each admits in its own namespaces only, with
// its own admitted log, and one stopping leaves the other admitting. A
// server that died is replaced by the next sim.
func TestAdmissionServerShared(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns1, ns2 := namespace(t, cl), namespace(t, cl)
	s1 := startSim(t, fast(c, ns1))
	o2 := fast(c, ns2)
	o2.DisableSerialConsoleLog = true
	s2, err := Start(t.Context(), o2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Stop() })
	if s1.admission.srv != s2.admission.srv || s1.admission.id == s2.admission.id {
		t.Fatalf("two sims on one API server: servers %p and %p, ids %s and %s; want one server, two registrations",
			s1.admission.srv, s2.admission.srv, s1.admission.id, s2.admission.id)
	}
	for _, ns := range []string{ns1, ns2} {
		if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted)); err != nil {
			t.Fatal(err)
		}
		if fw := getVM(cl, ns, "vm").Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
			t.Errorf("%s: firmware after create = %+v: KubeVirt's mutator did not admit the VM", ns, fw)
		}
	}
	if _, ok := s1.AdmittedFirmware(ns1, "vm"); !ok {
		t.Error("the first sim's admitted log lacks its VM")
	}
	if _, ok := s1.AdmittedFirmware(ns2, "vm"); ok {
		t.Error("the first sim's admitted log has the second sim's VM")
	}
	if _, ok := s2.AdmittedFirmware(ns2, "vm"); !ok {
		t.Error("the second sim's admitted log lacks its VM")
	}

	// The first stops: its configurations go, the server stays for the
	// second, which still admits.
	srv, id1 := s1.admission.srv, s1.admission.id
	if err := s1.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: vmMutatorConfig + "-" + id1}, &admissionregistrationv1.MutatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped sim's MutatingWebhookConfiguration: %v, want not found", err)
	}
	if srv.proc.Exited() {
		t.Fatal("the shared admission server exited when one of its two sims stopped")
	}
	if err := cl.Create(t.Context(), virtualMachine(ns2, "vm2", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatal(err)
	}
	if fw := getVM(cl, ns2, "vm2").Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
		t.Errorf("after the other sim stopped: firmware %+v, want KubeVirt's", fw)
	}
	// Its paths no longer answer for the stopped sim.
	if admitsFor(t, srv, id1) {
		t.Error("the server still serves the stopped sim's webhooks")
	}
	if !admitsFor(t, srv, s2.admission.id) {
		t.Error("the server does not serve the running sim's webhooks")
	}
	// Registration needs the token.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.base+"/sims/intruder", strings.NewReader("{}"))
	if resp, err := srv.hc.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a registration without the token: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// A server that died is replaced by the next sim's start.
	srv.proc.Kill()
	s3 := startSim(t, fast(c, ns1))
	if s3.admission.srv == srv || s3.admission.srv.proc.Exited() {
		t.Fatal("a sim started after the admission server died got the dead server")
	}
	if err := cl.Create(t.Context(), virtualMachine(ns1, "vm3", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatal(err)
	}
	if fw := getVM(cl, ns1, "vm3").Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
		t.Errorf("with a new admission server: firmware %+v, want KubeVirt's", fw)
	}
}

// admitsFor reports whether the server has the registration id.
func admitsFor(t *testing.T, srv *admissionServer, id string) bool {
	t.Helper()
	ok, err := srv.registered(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
