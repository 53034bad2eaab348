package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func TestDestinationQueries(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	raw, err := c.raw()
	if err != nil {
		t.Fatal(err)
	}
	ns := "queries"
	if err := raw.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "example.com/fast"}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Create(ctx, &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ours", Labels: map[string]string{LabelMigration: "ours"}},
		Spec:       kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Create(ctx, &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs-disk-0"},
		Spec:       cdiv1beta1.DataVolumeSpec{Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}}},
	}); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name string
		got  func() (bool, error)
		want bool
	}{
		{"namespace exists", func() (bool, error) { return c.NamespaceExists(ctx, ns) }, true},
		{"namespace missing", func() (bool, error) { return c.NamespaceExists(ctx, "nope") }, false},
		{"storage class exists", func() (bool, error) { return c.StorageClassExists(ctx, "fast") }, true},
		{"storage class missing", func() (bool, error) { return c.StorageClassExists(ctx, "slow") }, false},
	} {
		got, err := tt.got()
		if err != nil || got != tt.want {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}

	if ok, owner, err := c.VirtualMachineOwner(ctx, ns, "ours"); err != nil || !ok || owner != "ours" {
		t.Errorf("VirtualMachineOwner(ours) = %v, %q, %v", ok, owner, err)
	}
	if ok, owner, err := c.VirtualMachineOwner(ctx, ns, "absent"); err != nil || ok || owner != "" {
		t.Errorf("VirtualMachineOwner(absent) = %v, %q, %v", ok, owner, err)
	}
	if ok, owner, err := c.DataVolumeOwner(ctx, ns, "theirs-disk-0"); err != nil || !ok || owner != "" {
		t.Errorf("DataVolumeOwner(theirs) = %v, %q, %v", ok, owner, err)
	}

	if left, limited, err := c.StorageQuotaRemaining(ctx, ns, "fast"); err != nil || limited || left != 0 {
		t.Errorf("no quota: got %d, %v, %v", left, limited, err)
	}
	quota := func(name string, hard, used corev1.ResourceList) {
		t.Helper()
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		if err := raw.Create(ctx, q); err != nil {
			t.Fatal(err)
		}
		// No quota controller runs here: set the usage the way it would.
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
		if err := raw.Status().Update(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	quota("all", corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("100Gi")},
		corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("30Gi")})
	quota("fast-only", corev1.ResourceList{"fast.storageclass.storage.k8s.io/requests.storage": resource.MustParse("50Gi")},
		corev1.ResourceList{"fast.storageclass.storage.k8s.io/requests.storage": resource.MustParse("45Gi")})

	left, limited, err := c.StorageQuotaRemaining(ctx, ns, "fast")
	if err != nil || !limited || left != 5<<30 {
		t.Errorf("fast: got %d, %v, %v; want %d (the class quota is tighter)", left, limited, err, int64(5<<30))
	}
	left, limited, err = c.StorageQuotaRemaining(ctx, ns, "slow")
	if err != nil || !limited || left != 70<<30 {
		t.Errorf("slow: got %d, %v, %v; want %d (only the namespace-wide quota applies)", left, limited, err, int64(70<<30))
	}
}

func TestUpdateVirtualMachineRunStrategyAndLabels(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	raw, err := c.raw()
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vmupdate"}}); err != nil {
		t.Fatal(err)
	}
	halted := kubevirtv1.RunStrategyHalted
	if err := raw.Create(ctx, &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vmupdate", Name: "vm", Labels: map[string]string{LabelMigration: "vm", "team": "a", "tier": "web"}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}); err != nil {
		t.Fatal(err)
	}
	err = c.UpdateVirtualMachineRunStrategyAndLabels(ctx, "vmupdate", "vm", "Always",
		map[string]string{"team": "a", "tier": "web"}, map[string]string{"team": "b"})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := c.GetVirtualMachine(ctx, "vmupdate", "vm")
	if err != nil {
		t.Fatal(err)
	}
	if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("runStrategy = %v, want Always", vm.Spec.RunStrategy)
	}
	want := map[string]string{LabelMigration: "vm", "team": "b"}
	if len(vm.Labels) != len(want) || vm.Labels["team"] != "b" || vm.Labels[LabelMigration] != "vm" {
		t.Errorf("labels = %v, want %v (ours kept, user labels replaced)", vm.Labels, want)
	}
}
