package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

var cluster testcluster.Shared

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

// clusterClient returns a Client built the way the provider builds it: from
// a kubeconfig file written by the test cluster.
func clusterClient(t *testing.T) *Client {
	t.Helper()
	c := cluster.Get(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return New(Config{ConfigPath: path, ConfigContext: testcluster.ContextName})
}

func wantClass(t *testing.T, what string, err error, want Class) {
	t.Helper()
	if got := Classify(err); got != want {
		t.Errorf("%s: Classify(%v) = %v, want %v", what, err, got, want)
	}
}

func TestNewDoesNotConnect(t *testing.T) {
	ctx := t.Context()
	c := New(Config{ConfigPath: filepath.Join(t.TempDir(), "not-yet-written")})
	_, err := c.GetVirtualMachine(ctx, "ns", "vm")
	var cfgErr *ConfigError
	if !errors.As(err, &cfgErr) || cfgErr.Attribute != AttrConfigPath {
		t.Errorf("first use with a missing kubeconfig: %v, want a config_path ConfigError", err)
	}
	wantClass(t, "missing kubeconfig", err, NeedsHuman)

	// A closed port: the error comes from the first request, and is transient.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c = New(Config{Host: "https://" + addr, Token: "t", Insecure: true})
	_, err = c.GetDataVolume(ctx, "ns", "dv")
	if err == nil {
		t.Fatal("GetDataVolume against a closed port succeeded")
	}
	wantClass(t, "connection refused", err, Transient)
}

func TestVirtualMachineLifecycle(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	const ns, name = "default", "kube-vm-lifecycle"

	_, err := c.GetVirtualMachine(ctx, ns, name)
	if !IsNotFound(err) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before create: %v, want not found", err)
	}
	if want := "get VirtualMachine default/kube-vm-lifecycle: "; err == nil || err.Error()[:len(want)] != want {
		t.Errorf("error text %q does not start with %q", err, want)
	}
	wantClass(t, "not found", err, Permanent)

	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
					Memory: &kubevirtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))},
				}},
			},
		},
	}
	if err := c.CreateVirtualMachine(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if vm.UID == "" || vm.ResourceVersion == "" {
		t.Errorf("Create did not fill in uid/resourceVersion: %+v", vm.ObjectMeta)
	}
	err = c.CreateVirtualMachine(ctx, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if !IsAlreadyExists(err) {
		t.Errorf("second Create: %v, want already exists", err)
	}
	stale := vm.DeepCopy()

	vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
	if err := c.UpdateVirtualMachine(ctx, vm); err != nil {
		t.Fatal(err)
	}
	err = c.UpdateVirtualMachine(ctx, stale)
	if !IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: %v, want conflict", err)
	}
	wantClass(t, "conflict", err, Transient)

	vm.Status = kubevirtv1.VirtualMachineStatus{
		PrintableStatus: kubevirtv1.VirtualMachineStatusProvisioning,
		Ready:           false,
		Conditions: []kubevirtv1.VirtualMachineCondition{{
			Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "Provisioning",
		}},
	}
	if err := c.UpdateVirtualMachineStatus(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetVirtualMachine(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusProvisioning || len(got.Status.Conditions) != 1 ||
		*got.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("after updates: runStrategy %v, status %+v", *got.Spec.RunStrategy, got.Status)
	}

	_, err = c.GetVirtualMachineInstance(ctx, ns, name)
	if !IsNotFound(err) {
		t.Errorf("GetVirtualMachineInstance: %v, want not found", err)
	}

	if err := c.DeleteVirtualMachine(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetVirtualMachine(ctx, ns, name); !IsNotFound(err) {
		t.Errorf("Get after delete: %v, want not found", err)
	}
	if err := c.DeleteVirtualMachine(ctx, ns, name); err != nil {
		t.Errorf("deleting a deleted VM: %v, want success", err)
	}

	invalid := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "Not_A_DNS_Name"}}
	err = c.CreateVirtualMachine(ctx, invalid)
	if !apierrors.IsInvalid(err) {
		t.Errorf("Create with an invalid name: %v, want invalid", err)
	}
	wantClass(t, "invalid", err, Permanent)
}

func TestDataVolumeLifecycle(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	const ns, name = "default", "kube-dv-lifecycle"
	dv := &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdiv1beta1.DataVolumeSpec{
			Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}},
			Storage: &cdiv1beta1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			}},
		},
	}
	if err := c.CreateDataVolume(ctx, dv); err != nil {
		t.Fatal(err)
	}
	dv.Annotations = map[string]string{"vmmigration.io/disk": "0"}
	if err := c.UpdateDataVolume(ctx, dv); err != nil {
		t.Fatal(err)
	}
	dv.Status = cdiv1beta1.DataVolumeStatus{Phase: cdiv1beta1.UploadReady, Progress: "N/A"}
	if err := c.UpdateDataVolumeStatus(ctx, dv); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetDataVolume(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != cdiv1beta1.UploadReady || got.Annotations["vmmigration.io/disk"] != "0" ||
		got.Spec.Storage.Resources.Requests.Storage().String() != "5Gi" {
		t.Errorf("DataVolume after updates: %+v", got)
	}
	if err := c.DeleteDataVolume(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetDataVolume(ctx, ns, name); !IsNotFound(err) {
		t.Errorf("Get after delete: %v, want not found", err)
	}
}

func TestForbiddenNeedsHuman(t *testing.T) {
	cfg, err := cluster.Get(t).UserConfig("nobody")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewForRESTConfig(cfg).GetVirtualMachine(t.Context(), "default", "x")
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Get as an unprivileged user: %v, want forbidden", err)
	}
	wantClass(t, "forbidden", err, NeedsHuman)
}

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}
	tests := []struct {
		err  error
		want Class
	}{
		{apierrors.NewNotFound(gr, "x"), Permanent},
		{apierrors.NewAlreadyExists(gr, "x"), Permanent},
		{apierrors.NewBadRequest("x"), Permanent},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "VirtualMachine"}, "x", nil), Permanent},
		{apierrors.NewConflict(gr, "x", errors.New("changed")), Transient},
		{apierrors.NewServerTimeout(gr, "get", 1), Transient},
		{apierrors.NewTimeoutError("x", 1), Transient},
		{apierrors.NewTooManyRequests("x", 1), Transient},
		{apierrors.NewServiceUnavailable("x"), Transient},
		{apierrors.NewInternalError(errors.New("x")), Transient},
		{apierrors.NewGenericServerResponse(502, "get", gr, "x", "", 0, true), Transient},
		{apierrors.NewUnauthorized("x"), NeedsHuman},
		{apierrors.NewForbidden(gr, "x", errors.New("no")), NeedsHuman},
		{&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}}, NeedsHuman},
		{&ConfigError{Attribute: AttrHost, Detail: "x"}, NeedsHuman},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), Transient},
		{&net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, Transient},
		{&net.DNSError{Err: "no such host", Name: "k", IsNotFound: true}, NeedsHuman},
		{&net.DNSError{Err: "timeout", Name: "k", IsTimeout: true}, Transient},
		{errors.New("something else"), Permanent},
		{nil, Permanent},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if IsNotFound(&meta.NoKindMatchError{GroupKind: schema.GroupKind{Kind: "VirtualMachine"}}) {
		t.Error("a kind the cluster does not serve counts as not found")
	}
}
