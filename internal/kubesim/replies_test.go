package kubesim

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// A lost reply: the caller gets a transient error although the API server
// created, then updated, the object.
func TestLoseReplyAfterWrite(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	faults := NewReplyFaults()
	kc := kube.NewForRESTConfig(faults.Wrap(c.RESTConfig()))
	ctx := t.Context()

	faults.LoseReply(Create, "VirtualMachine", ns, "vm", 1)
	// Another object is not affected.
	if err := kc.CreateVirtualMachine(ctx, virtualMachine(ns, "other", "root", kubevirtv1.RunStrategyHalted)); err != nil {
		t.Fatalf("create of an object without a fault: %v", err)
	}
	err := kc.CreateVirtualMachine(ctx, virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted))
	if err == nil {
		t.Fatal("create answered: the reply should have been lost")
	}
	if got := kube.Classify(err); got != kube.Transient {
		t.Errorf("Classify(%v) = %v, want transient", err, got)
	}
	var vm kubevirtv1.VirtualMachine
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm"}, &vm); err != nil {
		t.Fatalf("the VirtualMachine was not created although its reply was lost: %v", err)
	}
	if faults.Lost() != 1 {
		t.Errorf("Lost() = %d, want 1", faults.Lost())
	}
	// Once only: creating again reaches the caller's AlreadyExists.
	if err := kc.CreateVirtualMachine(ctx, virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyHalted)); !kube.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}

	// An update of a core object, applied and unanswered, twice.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "0"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	faults.LoseReply(Update, "ConfigMap", ns, "cm", 2)
	for _, v := range []string{"1", "2"} {
		got, err := kc.GetConfigMap(ctx, ns, "cm")
		if err != nil {
			t.Fatal(err)
		}
		got.Data["v"] = v
		if err := kc.UpdateConfigMap(ctx, got); err == nil || kube.Classify(err) != kube.Transient {
			t.Fatalf("update to %s: %v, want a transient error", v, err)
		}
		var seen corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &seen); err != nil || seen.Data["v"] != v {
			t.Fatalf("update to %s not applied: %v %v", v, seen.Data, err)
		}
	}
	got, err := kc.GetConfigMap(ctx, ns, "cm")
	if err != nil {
		t.Fatal(err)
	}
	got.Data["v"] = "3"
	if err := kc.UpdateConfigMap(ctx, got); err != nil {
		t.Errorf("third update (fault spent): %v", err)
	}
	// A core object's create.
	faults.LoseReply(Create, "ConfigMap", ns, "cm2", 1)
	cm2 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm2"}}
	if err := kc.CreateConfigMap(ctx, cm2); err == nil || kube.Classify(err) != kube.Transient {
		t.Errorf("create of cm2: %v, want a transient error", err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm2), &corev1.ConfigMap{}); err != nil {
		t.Errorf("cm2 was not created although its reply was lost: %v", err)
	}
	if faults.Lost() != 4 {
		t.Errorf("Lost() = %d, want 4", faults.Lost())
	}
}

// The write kinds are read from the request line alone.
func TestClassifyWrite(t *testing.T) {
	for _, tc := range []struct {
		method, path       string
		w                  Write
		res, ns, name, sub string
	}{
		{"POST", "/apis/kubevirt.io/v1/namespaces/a/virtualmachines", Create, "virtualmachines", "a", "", ""},
		{"PUT", "/apis/cdi.kubevirt.io/v1beta1/namespaces/a/datavolumes/d", Update, "datavolumes", "a", "d", ""},
		{"PUT", "/apis/cdi.kubevirt.io/v1beta1/namespaces/a/datavolumes/d/status", UpdateStatus, "datavolumes", "a", "d", "status"},
		{"PATCH", "/api/v1/namespaces/a/configmaps/c", Patch, "configmaps", "a", "c", ""},
		{"POST", "/api/v1/namespaces", Create, "namespaces", "", "", ""},
		{"GET", "/api/v1/namespaces/a/configmaps/c", "", "", "", "", ""},
		{"DELETE", "/api/v1/namespaces/a/configmaps/c", "", "", "", "", ""},
		{"POST", "/version", "", "", "", "", ""},
	} {
		req := httptest.NewRequest(tc.method, tc.path, http.NoBody)
		w, res, ns, name, sub := classifyWrite(req)
		if w != tc.w || res != tc.res || ns != tc.ns || name != tc.name || sub != tc.sub {
			t.Errorf("%s %s = %q %q %q %q %q, want %q %q %q %q %q", tc.method, tc.path, w, res, ns, name, sub, tc.w, tc.res, tc.ns, tc.name, tc.sub)
		}
	}
	for kind, want := range map[string]string{"VirtualMachine": "virtualmachines", "DataVolume": "datavolumes", "PersistentVolumeClaim": "persistentvolumeclaims", "configmaps": "configmaps", "Policy": "policies", "Ingress": "ingresses"} {
		if got := resourceOf(kind); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", kind, got, want)
		}
	}
	if !errors.Is(errLostReply(httptest.NewRequest("GET", "/", nil)), syscall.ECONNRESET) {
		t.Error("a lost reply does not look like a reset connection")
	}
}
