package kubesim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// waitForFirstConsumerClass creates a StorageClass of the test's own whose
// volumeBindingMode is WaitForFirstConsumer; with csi, its provisioner is
// a CSI driver (a CSIDriver object of its name exists), so that CDI
// populates its claims with populators.
func waitForFirstConsumerClass(t *testing.T, cl client.Client, name string, csi bool) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: name + ".kubesim.invalid", VolumeBindingMode: &mode}
	if err := cl.Create(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), sc) })
	if csi {
		d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: sc.Provisioner}}
		if err := cl.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), d) })
	}
	return name
}

// As CDI v1.65: a DataVolume whose StorageClass binds on first consumer
// waits until a pod uses its claim, PendingPopulation where a populator
// fills the claim (a CSI StorageClass) and WaitForFirstConsumer otherwise,
// unless it asks for immediate binding (the annotation's key is enough).
// A populated claim gets a claim prime beside it until it is filled.
func TestWaitForFirstConsumer(t *testing.T) {
	for _, tc := range []struct {
		csi     bool
		waiting cdiv1.DataVolumePhase
	}{{true, cdiv1.PendingPopulation}, {false, cdiv1.WaitForFirstConsumer}} {
		t.Run(string(tc.waiting), func(t *testing.T) {
			c := cluster.Get(t)
			cl := c.AdminClient()
			ns := namespace(t, cl)
			s := startSim(t, fast(c, ns))
			sc := waitForFirstConsumerClass(t, cl, "wffc-"+ns, tc.csi)
			create := func(name string, ann map[string]string) {
				t.Helper()
				dv := dataVolume(ns, name, "1Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})
				dv.Spec.Storage.StorageClassName = &sc
				dv.Annotations = ann
				if err := cl.Create(t.Context(), dv); err != nil {
					t.Fatal(err)
				}
			}
			create("waits", nil)
			create("immediate", map[string]string{cdi.AnnImmediateBinding: ""})

			waitDVPhase(t, cl, ns, "immediate", cdiv1.UploadReady)
			var claims corev1.PersistentVolumeClaimList
			if err := cl.List(t.Context(), &claims, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			primes := 0
			for _, p := range claims.Items {
				if strings.HasPrefix(p.Name, "prime-") {
					primes++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.csi]; primes != want {
				t.Errorf("%d claim primes, want %d", primes, want)
			}
			waitDVPhase(t, cl, ns, "waits", tc.waiting)
			// Twenty steps are enough for any DataVolume to reach UploadReady.
			for range 20 {
				if p := getDV(t, cl, ns, "waits").Status.Phase; p != tc.waiting {
					t.Fatalf("DataVolume without a consumer is %s, want %s", p, tc.waiting)
				}
				time.Sleep(s.opts.Step)
			}

			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "consumer"},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "c", Image: "kubesim.invalid/none"}},
					Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "waits"}}}},
				},
			}
			if err := cl.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			waitDVPhase(t, cl, ns, "waits", cdiv1.UploadReady)
		})
	}
}

// As CDI v1.65: every DataVolume gets a claim of its own name, inflated by
// the filesystem overhead, and an upload a scratch claim beside it; the
// API server's quota admission counts both. A quota that holds the claim
// but not the scratch claim keeps the upload from becoming ready.
func TestClaimsCountAgainstQuota(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	startSim(t, fast(c, ns))
	const size = 64 << 20
	claim := cdi.DataVolumeClaimSize(size, false, cdi.DefaultFilesystemOverhead)
	hard := corev1.ResourceList{corev1.ResourceRequestsStorage: *resource.NewQuantity(claim+1<<20, resource.BinarySI)}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "storage"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if err := cl.Create(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("0")}}
	if err := cl.Status().Update(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(t.Context(), dataVolume(ns, "up", "64Mi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the scratch claim refused", func() string {
		dv := getDV(t, cl, ns, "up")
		if r := dvCondition(dv, cdiv1.DataVolumeRunning); dv.Status.Phase != cdiv1.UploadScheduled || r.Reason != reasonExceededQuota {
			return fmt.Sprintf("phase %s, Running %+v", dv.Status.Phase, r)
		}
		return ""
	})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "up"}, pvc); err != nil {
		t.Fatalf("the DataVolume's claim: %v", err)
	}
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Value() != claim {
		t.Errorf("claim requests %s, want %d (64 MiB with the overhead)", got.String(), claim)
	}

	// Room for the scratch claim too: the upload becomes ready.
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "storage"}, q); err != nil {
		t.Fatal(err)
	}
	more := *resource.NewQuantity(claim+cdi.ScratchClaimSize(claim, false, cdi.DefaultFilesystemOverhead), resource.BinarySI)
	q.Spec.Hard[corev1.ResourceRequestsStorage] = more
	if err := cl.Update(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	q.Status.Hard = q.Spec.Hard
	if err := cl.Status().Update(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "up", cdiv1.UploadReady)
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: ScratchClaimName("up")}, pvc); err != nil {
		t.Fatalf("the scratch claim: %v", err)
	}
}
