package testcluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestCRDsEstablishedAndStructural(t *testing.T) {
	c := cluster.Get(t)
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	// VirtualMachine, VirtualMachineInstance, DataVolume, CDIConfig,
	// StorageProfile.
	if len(crds) != 5 {
		t.Errorf("got %d CRDs, want 5", len(crds))
	}
	for _, want := range crds {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.AdminClient().Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
			t.Fatal(err)
		}
		conds := map[apiextensionsv1.CustomResourceDefinitionConditionType]apiextensionsv1.ConditionStatus{}
		for _, cond := range got.Status.Conditions {
			conds[cond.Type] = cond.Status
		}
		if conds[apiextensionsv1.Established] != apiextensionsv1.ConditionTrue {
			t.Errorf("%s: Established = %q", got.Name, conds[apiextensionsv1.Established])
		}
		if s, ok := conds[apiextensionsv1.NonStructuralSchema]; ok {
			t.Errorf("%s: NonStructuralSchema = %q", got.Name, s)
		}
		if v := got.Spec.Versions[0]; v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("%s: no status subresource", got.Name)
		}
	}
}

// testVM is a VirtualMachine using many kinds of schema node: quantities,
// int-or-string, maps, nested template metadata, data volume templates.
func testVM(name string) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "test"}},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
			DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-disk0", Labels: map[string]string{"disk": "0"}},
				Spec: cdiv1beta1.DataVolumeSpec{
					Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}},
					Storage: &cdiv1beta1.StorageSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceStorage: resource.MustParse("10Gi"),
						}},
					},
				},
			}},
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/domain": name}},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						CPU:    &kubevirtv1.CPU{Cores: 2, Sockets: 1},
						Memory: &kubevirtv1.Memory{Guest: ptr.To(resource.MustParse("2Gi"))},
						Devices: kubevirtv1.Devices{
							Disks: []kubevirtv1.Disk{{
								Name:       "disk0",
								BootOrder:  ptr.To[uint](1),
								DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
							}},
							Interfaces: []kubevirtv1.Interface{{
								Name:                   "default",
								MacAddress:             "52:54:00:12:34:56",
								InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}},
							}},
						},
						Firmware: &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: ptr.To(false)}}},
					},
					Networks: []kubevirtv1.Network{*kubevirtv1.DefaultPodNetwork()},
					Volumes: []kubevirtv1.Volume{{
						Name:         "disk0",
						VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: name + "-disk0"}},
					}},
				},
			},
		},
	}
}

// TestTypedObjectsRoundTrip proves the generated schemas keep every field a
// typed client writes (including nested template labels).
func TestTypedObjectsRoundTrip(t *testing.T) {
	c := cluster.Get(t)
	ctx := t.Context()
	cl := c.AdminClient()
	vm := testVM("roundtrip")
	want := vm.Spec.DeepCopy()
	if err := cl.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, *want) {
		t.Errorf("VM spec changed on the way through the API server:\ngot  %+v\nwant %+v", got.Spec, *want)
	}
	if got.Spec.Template.ObjectMeta.Labels["kubevirt.io/domain"] != "roundtrip" {
		t.Errorf("template labels pruned: %v", got.Spec.Template.ObjectMeta.Labels)
	}

	// Status goes through the status subresource only.
	got.Status = kubevirtv1.VirtualMachineStatus{
		PrintableStatus: kubevirtv1.VirtualMachineStatusStopped,
		Conditions: []kubevirtv1.VirtualMachineCondition{{
			Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.Now(), Reason: "Stopped",
		}},
	}
	if err := cl.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
	got.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	if err := cl.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	again := &kubevirtv1.VirtualMachine{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(vm), again); err != nil {
		t.Fatal(err)
	}
	if again.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStopped || *again.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("after status then main update: printableStatus %q (want Stopped), runStrategy %q (want Always)",
			again.Status.PrintableStatus, *again.Spec.RunStrategy)
	}

	dv := &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
		Spec:       vm.Spec.DataVolumeTemplates[0].Spec,
	}
	if err := cl.Create(ctx, dv); err != nil {
		t.Fatal(err)
	}
	dv.Status = cdiv1beta1.DataVolumeStatus{Phase: cdiv1beta1.UploadReady, Progress: "0.0%", Conditions: []cdiv1beta1.DataVolumeCondition{{
		Type: cdiv1beta1.DataVolumeBound, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "Bound",
	}}}
	if err := cl.Status().Update(ctx, dv); err != nil {
		t.Fatal(err)
	}
	gotDV := &cdiv1beta1.DataVolume{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(dv), gotDV); err != nil {
		t.Fatal(err)
	}
	if gotDV.Status.Phase != cdiv1beta1.UploadReady || len(gotDV.Status.Conditions) != 1 {
		t.Errorf("DataVolume status = %+v", gotDV.Status)
	}
}

// unstructuredVM is a VM whose domain holds one extra field, as a user with
// a typo would write it.
func unstructuredVM(name string, domainField string, value any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1",
		"kind":       "VirtualMachine",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"runStrategy": "Halted",
			"template": map[string]any{
				"spec": map[string]any{
					"domain": map[string]any{
						"devices":   map[string]any{},
						domainField: value,
					},
				},
			},
		},
	}}
	return u
}

func TestMisspeltFieldsRejectedOrPruned(t *testing.T) {
	c := cluster.Get(t)
	ctx := t.Context()
	cl := c.AdminClient()

	// With strict field validation (kubectl's default) the typo is an error.
	err := cl.Create(ctx, unstructuredVM("typo-strict", "cpuu", map[string]any{"cores": int64(2)}), client.FieldValidation("Strict"))
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.template.spec.domain.cpuu"`) {
		t.Errorf("strict create with a typo: %v, want BadRequest naming spec.template.spec.domain.cpuu", err)
	}

	// Without it, the API server prunes the field: it is not stored.
	if err := cl.Create(ctx, unstructuredVM("typo-pruned", "cpuu", map[string]any{"cores": int64(2)})); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("kubevirt.io/v1")
	got.SetKind("VirtualMachine")
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "typo-pruned"}, got); err != nil {
		t.Fatal(err)
	}
	domain, _, _ := unstructured.NestedMap(got.Object, "spec", "template", "spec", "domain")
	if _, ok := domain["cpuu"]; ok {
		t.Errorf("misspelt field stored: domain = %v", domain)
	}
	if _, ok := domain["devices"]; !ok {
		t.Errorf("valid field pruned: domain = %v", domain)
	}

	// A value of the wrong type is invalid.
	err = cl.Create(ctx, unstructuredVM("wrong-type", "cpu", map[string]any{"cores": "two"}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec.domain.cpu.cores") {
		t.Errorf("create with cores: \"two\": %v, want Invalid naming spec.template.spec.domain.cpu.cores", err)
	}

	// Quantities accept both integers and strings.
	for i, v := range []any{int64(2147483648), "2Gi"} {
		u := unstructuredVM("quantity-"+string(rune('a'+i)), "memory", map[string]any{"guest": v})
		if err := cl.Create(ctx, u); err != nil {
			t.Errorf("memory.guest = %v: %v", v, err)
		}
	}
}
