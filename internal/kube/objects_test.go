package kube

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// newNamespace creates a namespace for one test through the typed call.
func newNamespace(t *testing.T, c *Client, name string) string {
	t.Helper()
	if err := c.CreateNamespace(t.Context(), name, map[string]string{LabelManagedBy: ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	return name
}

func wantErrPrefix(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %v, want one starting with %q", err, prefix)
	}
}

func TestConfigMapCalls(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	ns := newNamespace(t, c, "typed-configmaps")
	if ok, err := c.NamespaceExists(ctx, ns); err != nil || !ok {
		t.Fatalf("NamespaceExists after CreateNamespace: %v, %v", ok, err)
	}
	if err := c.CreateNamespace(ctx, ns, nil); !IsAlreadyExists(err) {
		t.Errorf("second CreateNamespace: %v, want already exists", err)
	}

	_, err := c.GetConfigMap(ctx, ns, "a")
	if !IsNotFound(err) {
		t.Fatalf("Get before create: %v, want not found", err)
	}
	wantErrPrefix(t, err, "get ConfigMap typed-configmaps/a: ")

	a := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a", Labels: map[string]string{LabelMigration: "m"}},
		Data: map[string]string{"k": "1"}}
	if err := c.CreateConfigMap(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.UID == "" {
		t.Error("CreateConfigMap did not fill in the uid")
	}
	err = c.CreateConfigMap(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}})
	if !IsAlreadyExists(err) {
		t.Errorf("second create: %v, want already exists", err)
	}
	wantErrPrefix(t, err, "create ConfigMap typed-configmaps/a: ")
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b", Labels: map[string]string{LabelMigration: "other"}}}
	if err := c.CreateConfigMap(ctx, b); err != nil {
		t.Fatal(err)
	}

	stale := a.DeepCopy()
	a.Data["k"] = "2"
	if err := c.UpdateConfigMap(ctx, a); err != nil {
		t.Fatal(err)
	}
	stale.Data["k"] = "3"
	err = c.UpdateConfigMap(ctx, stale)
	if !IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: %v, want conflict", err)
	}
	wantClass(t, "conflict", err, Transient)
	wantErrPrefix(t, err, "update ConfigMap typed-configmaps/a: ")
	got, err := c.GetConfigMap(ctx, ns, "a")
	if err != nil || got.Data["k"] != "2" {
		t.Fatalf("Get after updates: %v, %v; want k=2", got, err)
	}

	items, err := c.ListConfigMaps(ctx, ns, map[string]string{LabelMigration: "m"})
	if err != nil || len(items) != 1 || items[0].Name != "a" {
		t.Errorf("ListConfigMaps by label: %v, %v; want only a", items, err)
	}
	if all, err := c.ListConfigMaps(ctx, ns, nil); err != nil || len(all) < 2 {
		t.Errorf("ListConfigMaps without labels: %d items, %v; want a and b at least", len(all), err)
	}

	// Deleting what changed since it was read is a conflict; deleting
	// what is gone succeeds.
	if err := c.DeleteConfigMapIfUnchanged(ctx, stale); !IsConflict(err) {
		t.Errorf("DeleteConfigMapIfUnchanged of a stale copy: %v, want conflict", err)
	}
	if err := c.DeleteConfigMapIfUnchanged(ctx, got); err != nil {
		t.Errorf("DeleteConfigMapIfUnchanged: %v", err)
	}
	if err := c.DeleteConfigMapIfUnchanged(ctx, got); err != nil {
		t.Errorf("DeleteConfigMapIfUnchanged of a deleted ConfigMap: %v, want success", err)
	}
	if err := c.DeleteConfigMap(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConfigMap(ctx, b); err != nil {
		t.Errorf("deleting a deleted ConfigMap: %v, want success", err)
	}
	if _, err := c.GetConfigMap(ctx, ns, "b"); !IsNotFound(err) {
		t.Errorf("Get after delete: %v, want not found", err)
	}
}

func TestLeaseCalls(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	ns := newNamespace(t, c, "typed-leases")
	holder := "me"
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l", Labels: map[string]string{"k": "v"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr.To[int32](10)}}
	if err := c.CreateLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateLease(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ListLeases(ctx, ns, map[string]string{"k": "v"}); err != nil || len(got) != 1 || got[0].Name != "l" {
		t.Errorf("ListLeases by label = %v, %v; want only l", got, err)
	}
	err := c.CreateLease(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l"}})
	if !IsAlreadyExists(err) {
		t.Errorf("second CreateLease: %v, want already exists", err)
	}
	wantErrPrefix(t, err, "create Lease typed-leases/l: ")

	got, err := c.GetLease(ctx, ns, "l")
	if err != nil || got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != "me" {
		t.Fatalf("GetLease: %+v, %v", got, err)
	}
	other := "other"
	got.Spec.HolderIdentity = &other
	if err := c.UpdateLease(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdateLease(ctx, l); !IsConflict(err) {
		t.Errorf("UpdateLease of a stale copy: %v, want conflict", err)
	}
	if err := c.DeleteLeaseIfUnchanged(ctx, l); !IsConflict(err) {
		t.Errorf("DeleteLeaseIfUnchanged of a stale copy: %v, want conflict", err)
	}
	if err := c.DeleteLeaseIfUnchanged(ctx, got); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetLease(ctx, ns, "l")
	if !IsNotFound(err) {
		t.Errorf("GetLease after delete: %v, want not found", err)
	}
	wantErrPrefix(t, err, "get Lease typed-leases/l: ")
}

func TestClaimsLabelsAndEvents(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	ns := newNamespace(t, c, "typed-labels")

	_, err := c.GetPersistentVolumeClaim(ctx, ns, "disk")
	if !IsNotFound(err) {
		t.Errorf("GetPersistentVolumeClaim before create: %v, want not found", err)
	}
	wantErrPrefix(t, err, "get PersistentVolumeClaim typed-labels/disk: ")
	raw, err := c.raw()
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "disk"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}); err != nil {
		t.Fatal(err)
	}
	if pvc, err := c.GetPersistentVolumeClaim(ctx, ns, "disk"); err != nil || pvc.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("GetPersistentVolumeClaim: %v, %v", pvc, err)
	}

	dv := func(name string, labels map[string]string) *cdiv1beta1.DataVolume {
		d := &cdiv1beta1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: cdiv1beta1.DataVolumeSpec{Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}}}}
		if err := c.CreateDataVolume(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d0 := dv("m-disk-0", map[string]string{"team": "a"})
	dv("m-disk-1", map[string]string{LabelMigration: "m"})
	dv("n-disk-0", map[string]string{LabelMigration: "n"})
	if err := c.PatchDataVolumeLabels(ctx, d0, map[string]string{"team": "a", LabelMigration: "m"}); err != nil {
		t.Fatal(err)
	}
	if d0.Labels[LabelMigration] != "m" || d0.Labels["team"] != "a" {
		t.Errorf("DataVolume labels after the patch: %v", d0.Labels)
	}
	list, err := c.ListDataVolumes(ctx, ns, map[string]string{LabelMigration: "m"})
	var names []string
	for _, d := range list {
		names = append(names, d.Name)
	}
	if err != nil || strings.Join(names, ",") != "m-disk-0,m-disk-1" {
		t.Errorf("ListDataVolumes by label: %v, %v; want m-disk-0 and m-disk-1", names, err)
	}

	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: map[string]string{"team": "a"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := c.CreateVirtualMachine(ctx, vm); err != nil {
		t.Fatal(err)
	}
	// Another writer's change since the VM was read is kept: the patch
	// carries the labels only.
	other := vm.DeepCopy()
	other.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
	if err := c.UpdateVirtualMachine(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := c.PatchVirtualMachineLabels(ctx, vm, map[string]string{"team": "a", LabelMigration: "m"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetVirtualMachine(ctx, ns, "m")
	if err != nil || got.Labels[LabelMigration] != "m" || *got.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("VM after the label patch: labels %v, runStrategy %v, %v", got.Labels, got.Spec.RunStrategy, err)
	}
	gone := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}}
	err = c.PatchVirtualMachineLabels(ctx, gone, map[string]string{LabelMigration: "m"})
	if !IsNotFound(err) {
		t.Errorf("patching a missing VM: %v, want not found", err)
	}
	wantErrPrefix(t, err, "patch VirtualMachine typed-labels/gone: ")

	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "m."},
		InvolvedObject: corev1.ObjectReference{Kind: "VirtualMachine", APIVersion: "kubevirt.io/v1", Namespace: ns, Name: "m", UID: vm.UID},
		Reason:         "Tested", Message: "an event", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: ManagedByValue}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
	if err := c.CreateEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ev.Name, "m.") || ev.UID == "" {
		t.Errorf("CreateEvent did not fill in the generated name and uid: %q %q", ev.Name, ev.UID)
	}
}
