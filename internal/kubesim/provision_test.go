package kubesim

import (
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// With ProvisionVolumes, a claim of the sim's class waits, and its
// DataVolume with it, until the volume binder hands it to the sim; the
// sim then makes a hostPath volume on the DataVolume's folder, pre-bound
// to the claim, and the DataVolume goes on once the claim is Bound (this
// package's cluster runs no binder: the test plays it). A claim of
// another provisioner's class is not the sim's: its DataVolume goes on as
// without the option.
func TestProvisionVolumes(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	for name, prov := range map[string]string{"sim-provisioned": Provisioner, "other-provisioner": "csi.example.com"} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: prov}
		if err := cl.Create(t.Context(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	opts := fast(c, ns)
	opts.ProvisionVolumes = true
	s := startSim(t, opts)
	blankOf := func(name, class string) {
		dv := dataVolume(ns, name, "64Mi", cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}})
		dv.Spec.Storage.StorageClassName = ptr.To(class)
		if err := cl.Create(t.Context(), dv); err != nil {
			t.Fatal(err)
		}
	}
	blankOf("other", "other-provisioner")
	blankOf("ours", "sim-provisioned")
	waitDVPhase(t, cl, ns, "other", cdiv1.Succeeded)

	// Not handed over yet: no volume, the DataVolume waits.
	time.Sleep(10 * opts.Step)
	if dv := getDV(t, cl, ns, "ours"); dv.Status.Phase != cdiv1.Pending {
		t.Fatalf("DataVolume of an unbound claim is %q, want Pending", dv.Status.Phase)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ours"}, pvc); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: "pvc-" + string(pvc.UID)}, &corev1.PersistentVolume{}); !apierrors.IsNotFound(err) {
		t.Fatalf("volume provisioned before the binder asked: %v", err)
	}
	// The binder hands the claim to the class's provisioner.
	pvc.Annotations = map[string]string{annStorageProvisioner: Provisioner}
	if err := cl.Update(t.Context(), pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	eventually(t, 15*time.Second, "the provisioned volume", func() string {
		if err := cl.Get(t.Context(), client.ObjectKey{Name: "pvc-" + string(pvc.UID)}, pv); err != nil {
			return err.Error()
		}
		return ""
	})
	t.Cleanup(func() { _ = cl.Delete(t.Context(), pv) })
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID || ref.Name != "ours" || ref.Namespace != ns {
		t.Errorf("volume's claimRef %+v, want the claim with its UID", ref)
	}
	if hp := pv.Spec.HostPath; hp == nil {
		t.Fatal("not a hostPath volume")
	} else if fi, err := os.Stat(hp.Path); err != nil || !fi.IsDir() || hp.Path+"/disk.img" != s.ReceivedPath(ns, "ours") {
		t.Errorf("volume path %s (%v): want the existing folder of %s", hp.Path, err, s.ReceivedPath(ns, "ours"))
	}
	if pv.Spec.StorageClassName != "sim-provisioned" || pv.Annotations[annProvisionedBy] != Provisioner ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("volume %+v", pv)
	}
	// The binder binds the pair.
	pvc.Status.Phase = corev1.ClaimBound
	if err := cl.Status().Update(t.Context(), pvc); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "ours", cdiv1.Succeeded)
}

// The sim's Node, which runs only the pods the sim puts there itself,
// carries a NoSchedule taint, so that a scheduler never binds another
// pod (a copy Job's) to it; a Node taken over from an earlier sim gets it
// too.
func TestNodeRefusesScheduledPods(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	opts := fast(c, ns)
	opts.NoUploadProxyURL = true // the sim runs its kubelet and Node
	for round := range 2 {
		startSim(t, opts)
		node := &corev1.Node{}
		if err := cl.Get(t.Context(), client.ObjectKey{Name: NodeName}, node); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, taint := range node.Spec.Taints {
			if taint.MatchTaint(&simulatedKubeletTaint) {
				n++
			}
		}
		if n != 1 || simulatedKubeletTaint.Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("round %d: Node %s taints %+v, want %+v once", round, NodeName, node.Spec.Taints, simulatedKubeletTaint)
		}
		if round == 0 {
			// The next sim takes over this Node.
			node.Spec.Taints = nil
			if err := cl.Update(t.Context(), node); err != nil {
				t.Fatal(err)
			}
		}
	}
}
