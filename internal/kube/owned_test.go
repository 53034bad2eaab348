package kube

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

func TestEnsureOwned(t *testing.T) {
	ctx := t.Context()
	faults := kubesim.NewReplyFaults()
	c := NewForRESTConfig(faults.Wrap(cluster.Get(t).RESTConfig()))
	ns := newNamespace(t, c, "ensure-owned")
	cm := func(name, migration string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelMigration: migration}},
			Data: map[string]string{"by": migration}}
	}
	creates := 0
	create := func(ctx context.Context, cm *corev1.ConfigMap) error {
		creates++
		return c.CreateConfigMap(ctx, cm)
	}
	// ensure runs EnsureOwned of cm(name, "m") as migration m's.
	ensure := func(name string) (*corev1.ConfigMap, bool, error) {
		creates = 0
		return EnsureOwned(ctx, c, cm(name, "m"), create, LabelOwner("m"))
	}

	t.Run("created", func(t *testing.T) {
		got, created, err := ensure("new")
		if err != nil || !created || got.UID == "" || creates != 1 {
			t.Fatalf("EnsureOwned of a new ConfigMap: created %v, uid %q, %d creates, %v", created, got.UID, creates, err)
		}
	})

	t.Run("already there and ours", func(t *testing.T) {
		first, _, err := ensure("ours")
		if err != nil {
			t.Fatal(err)
		}
		got, created, err := ensure("ours")
		if err != nil || created || got.UID != first.UID || got.Data["by"] != "m" {
			t.Fatalf("EnsureOwned of an existing ConfigMap of ours: created %v, %+v, %v; want the first one", created, got, err)
		}
	})

	t.Run("already there and not ours", func(t *testing.T) {
		theirs := cm("theirs", "other")
		if err := c.CreateConfigMap(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		got, created, err := ensure("theirs")
		var no *NotOwnedError
		if !errors.As(err, &no) {
			t.Fatalf("EnsureOwned of someone else's ConfigMap: %v, %v, %v; want a NotOwnedError", got, created, err)
		}
		if got != nil || created {
			t.Errorf("EnsureOwned returned %v, created %v with its NotOwnedError", got, created)
		}
		if no.Kind != "ConfigMap" || no.Namespace != ns || no.Name != "theirs" || no.Owner != "other" ||
			no.Object.GetUID() != theirs.UID || !IsAlreadyExists(no.Create) {
			t.Errorf("NotOwnedError = %+v", no)
		}
		if want := `ConfigMap ensure-owned/theirs exists and is not ours: it belongs to "other"`; err.Error() != want {
			t.Errorf("error text %q, want %q", err, want)
		}
		wantClass(t, "not ours", err, NeedsHuman)
		if cur, err := c.GetConfigMap(ctx, ns, "theirs"); err != nil || cur.Data["by"] != "other" {
			t.Errorf("someone else's ConfigMap was changed: %v, %v", cur, err)
		}
	})

	t.Run("reply lost after the create was applied", func(t *testing.T) {
		faults.LoseReply(kubesim.Create, "ConfigMap", ns, "lost", 1)
		got, created, err := ensure("lost")
		if faults.Lost() != 1 {
			t.Fatalf("%d replies lost, want 1", faults.Lost())
		}
		if err != nil || created || got.UID == "" || got.Labels[LabelMigration] != "m" || creates != 1 {
			t.Fatalf("EnsureOwned after a lost reply: created %v, %+v, %d creates, %v; want the object found, not created again", created, got, creates, err)
		}
	})

	t.Run("reply lost before anything was applied", func(t *testing.T) {
		lost := wrap("create", "ConfigMap", ns, "never", fmt.Errorf("write: %w", syscall.ECONNRESET))
		got, created, err := EnsureOwned(ctx, c, cm("never", "m"), func(context.Context, *corev1.ConfigMap) error { return lost }, LabelOwner("m"))
		if err != lost || got != nil || created {
			t.Errorf("EnsureOwned when nothing was created: %v, %v, %v; want the create's own error", got, created, err)
		}
	})

	t.Run("in the way, then deleted before it is read", func(t *testing.T) {
		calls := 0
		got, created, err := EnsureOwned(ctx, c, cm("vanished", "m"), func(ctx context.Context, cm *corev1.ConfigMap) error {
			calls++
			if calls == 1 {
				gr := schema.GroupResource{Resource: "configmaps"}
				return wrap("create", "ConfigMap", ns, cm.Name, apierrors.NewAlreadyExists(gr, cm.Name))
			}
			return c.CreateConfigMap(ctx, cm)
		}, LabelOwner("m"))
		if err != nil || !created || calls != 2 || got.UID == "" {
			t.Errorf("EnsureOwned: created %v after %d creates, %v; want created by the second", created, calls, err)
		}
	})

	t.Run("other create errors are returned as they are", func(t *testing.T) {
		_, _, err := EnsureOwned(ctx, c, cm("Not_A_Name", "m"), c.CreateConfigMap, LabelOwner("m"))
		var no *NotOwnedError
		if !apierrors.IsInvalid(err) || errors.As(err, &no) {
			t.Errorf("EnsureOwned with an invalid name: %v, want invalid", err)
		}
		wantErrPrefix(t, err, "create ConfigMap ensure-owned/Not_A_Name: ")
	})

	t.Run("an apply that creates, and a predicate of the caller's", func(t *testing.T) {
		vm := func(name, owner string) *kubevirtv1.VirtualMachine {
			return &kubevirtv1.VirtualMachine{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"example.com/owner": owner}},
				Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
			}
		}
		apply := func(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
			return c.ApplyVirtualMachine(ctx, vm, false)
		}
		annotated := func(who string) Owner {
			return func(obj client.Object) (string, bool) {
				v := obj.GetAnnotations()["example.com/owner"]
				return v, v == who
			}
		}
		if got, created, err := EnsureOwned(ctx, c, vm("applied", "b"), apply, annotated("b")); err != nil || !created || got.UID == "" {
			t.Fatalf("apply of a new VM: created %v, %v", created, err)
		}
		// A VM another field manager made with other values: the apply
		// conflicts, and the VM found is a's.
		raw, err := c.raw()
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.Create(ctx, vm("made", "a"), client.FieldOwner("someone-else")); err != nil {
			t.Fatal(err)
		}
		_, _, err = EnsureOwned(ctx, c, vm("made", "b"), apply, annotated("b"))
		var no *NotOwnedError
		if !errors.As(err, &no) || no.Kind != "VirtualMachine" || no.Owner != "a" || !IsConflict(no.Create) {
			t.Errorf("apply over a's VM as b: %v, want a NotOwnedError naming a after a conflict", err)
		}
	})
}

func TestOwnedHelpers(t *testing.T) {
	dv := &cdiv1beta1.DataVolume{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelMigration: "m"}}}
	if owner, ours := LabelOwner("m")(dv); owner != "m" || !ours {
		t.Errorf("LabelOwner(m) of m's DataVolume = %q, %v", owner, ours)
	}
	if owner, ours := LabelOwner("n")(dv); owner != "m" || ours {
		t.Errorf("LabelOwner(n) of m's DataVolume = %q, %v", owner, ours)
	}
	if owner, ours := LabelOwner("n")(&corev1.ConfigMap{}); owner != "" || ours {
		t.Errorf("LabelOwner(n) of an unlabelled ConfigMap = %q, %v", owner, ours)
	}
	for obj, want := range map[client.Object]string{
		&corev1.ConfigMap{}: "ConfigMap", &cdiv1beta1.DataVolume{}: "DataVolume", &kubevirtv1.VirtualMachine{}: "VirtualMachine",
	} {
		if got := kindOf(obj); got != want {
			t.Errorf("kindOf(%T) = %q, want %q", obj, got, want)
		}
	}
	no := &NotOwnedError{Kind: "DataVolume", Namespace: "ns", Name: "d"}
	if want := "DataVolume ns/d exists and is not ours: it belongs to nobody"; no.Error() != want {
		t.Errorf("NotOwnedError without an owner: %q, want %q", no.Error(), want)
	}
}

func TestCauseAndAsTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "leases"}
	api := apierrors.NewNotFound(gr, "l")
	err := wrap("get", "Lease", "ns", "l", api)
	if Cause(err) != api {
		t.Errorf("Cause(%v) = %v, want the API's error", err, Cause(err))
	}
	if wrapped := fmt.Errorf("renewing: %w", err); Cause(wrapped) != api {
		t.Errorf("Cause of a wrapped *Error = %v, want the API's error", Cause(wrapped))
	}
	plain := errors.New("plain")
	if Cause(plain) != plain || AsTransient(plain) != plain {
		t.Error("Cause or AsTransient changed an error not from this package")
	}
	tr := AsTransient(err)
	wantClass(t, "AsTransient", tr, Transient)
	wantClass(t, "the original after AsTransient", err, Permanent)
	if tr.Error() != err.Error() || !IsNotFound(tr) {
		t.Errorf("AsTransient changed more than the class: %v", tr)
	}
}
