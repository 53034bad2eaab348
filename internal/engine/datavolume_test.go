package engine_test

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// waitForFirstConsumerClass is a StorageClass that binds claims on first
// consumer, as many CSI drivers' classes do; with csi its provisioner is a
// CSI driver, so that CDI fills its claims through populators.
func (e *env) waitForFirstConsumerClass(csi bool) string {
	e.t.Helper()
	name, driver := "wffc", "kubesim.vmmigration.io/none"
	if csi {
		name, driver = "wffc-csi", "wffc.csi.kubesim.vmmigration.io"
		if err := e.admin.Create(e.t.Context(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}}); err != nil && !kube.IsAlreadyExists(err) {
			e.t.Fatal(err)
		}
	}
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver, VolumeBindingMode: &mode}
	if err := e.admin.Create(e.t.Context(), sc); err != nil && !kube.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	return name
}

// On a StorageClass that binds on first consumer, CDI keeps a DataVolume
// PendingPopulation (a CSI class, filled by a populator) or
// WaitForFirstConsumer (another) until a pod uses its claim, and the
// migrated VM is created Halted: the migration completes only because its
// DataVolumes ask for immediate binding.
func TestWaitForFirstConsumerStorage(t *testing.T) {
	for _, csi := range []bool{true, false} {
		t.Run(fmt.Sprintf("csi=%v", csi), func(t *testing.T) {
			e := newEnv(t)
			e.host.AddVM(t, smallVM("wf1", esxisim.PoweredOff))
			spec := e.spec("wf1", "wf1")
			spec.StorageClass = e.waitForFirstConsumerClass(csi)
			spec.DataVolumeStallTimeout = 20 * time.Second
			e.mustComplete(e.engine(), spec)
			for _, dv := range e.dataVolumes() {
				if _, ok := dv.Annotations[cdi.AnnImmediateBinding]; !ok {
					t.Errorf("DataVolume %s has no %s annotation: %v", dv.Name, cdi.AnnImmediateBinding, dv.Annotations)
				}
			}
		})
	}
}

// CDI restarts a failing importer forever (its pod's RestartPolicy is
// OnFailure) and never fails the DataVolume: the engine stops once the
// restarts exceed its budget, naming the DataVolume, its phase, its last
// condition and its restart count, and removes the DataVolume so that the
// run after the fix starts anew.
func TestImporterRestartsStop(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("ir1", esxisim.PoweredOff))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "staging server broken", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	spec := e.spec("ir1", "ir1")
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: t.TempDir(), StagingURL: srv.URL}
	spec.ImporterRestarts = 2
	_, err := e.engine().Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Phase != record.PhaseImporting || se.Reason != "ImporterRestarts" {
		t.Fatalf("stop = %#v", se)
	}
	for _, want := range []string{
		"more than 2 times", "DataVolume " + e.ns + "/ir1-disk-0 is ImportInProgress",
		"importer restarts 3", "its last failure: Error: ", "got 500", "kubectl describe dv",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stop message lacks %q:\n%s", want, err)
		}
	}
	if dvs := e.dataVolumes(); len(dvs) != 0 {
		t.Errorf("%d DataVolumes left, want the failing one removed", len(dvs))
	}
}

// A DataVolume that shows no change at all (here an import whose server
// never sends a byte) is not waited on for ever.
func TestDataVolumeStallStops(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("st1", esxisim.PoweredOff))
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	spec := e.spec("st1", "st1")
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: t.TempDir(), StagingURL: srv.URL}
	spec.DataVolumeStallTimeout = 2 * time.Second
	_, err := e.engine().Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Phase != record.PhaseImporting || se.Reason != "DataVolumeStalled" {
		t.Fatalf("stop = %#v", se)
	}
	for _, want := range []string{"DataVolume " + e.ns + "/st1-disk-0 is ImportInProgress", "importer restarts 0", "unchanged for "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stop message lacks %q:\n%s", want, err)
		}
	}
}

// storageQuota limits the namespace's requests.storage to hard, with
// nothing used yet (no quota controller runs in the test cluster: the
// status is written as it would).
func (e *env) storageQuota(hard int64) {
	e.t.Helper()
	hl := corev1.ResourceList{corev1.ResourceRequestsStorage: *resource.NewQuantity(hard, resource.BinarySI)}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "storage"}, Spec: corev1.ResourceQuotaSpec{Hard: hl}}
	if err := e.admin.Create(e.t.Context(), q); err != nil {
		e.t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hl, Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("0")}}
	if err := e.admin.Status().Update(e.t.Context(), q); err != nil {
		e.t.Fatal(err)
	}
}

// A storage quota the pre-flight says fits really fits: the API server's
// quota admission counts the claims CDI creates (each disk's claim with
// the filesystem overhead; the claim prime a populator fills beside it on
// a CSI StorageClass; the upload's scratch claim), and a quota of exactly
// what the pre-flight counted lets the migration complete.
func TestQuotaThePreflightPassesFits(t *testing.T) {
	for _, csi := range []bool{false, true} {
		t.Run(fmt.Sprintf("csi=%v", csi), func(t *testing.T) {
			e := newEnv(t)
			vm := smallVM("qf1", esxisim.PoweredOff)
			vm.Disks = append(vm.Disks, esxisim.DiskSpec{CapacityBytes: 3 << 20})
			e.host.AddVM(t, vm)
			var disks []esxi.Disk
			for _, d := range vm.Disks {
				disks = append(disks, esxi.Disk{CapacityBytes: d.CapacityBytes})
			}
			spec := e.spec("qf1", "qf1")
			if csi {
				spec.StorageClass = e.csiClass()
			}
			e.storageQuota(preflight.StorageNeed(disks, false, true, csi))
			spec.DataVolumeStallTimeout = 20 * time.Second
			e.mustComplete(e.engine(), spec)
		})
	}
}

// csiClass is a StorageClass whose provisioner is a CSI driver, so that
// CDI fills its claims through populators.
func (e *env) csiClass() string {
	e.t.Helper()
	const name, driver = "csi-standard", "csi.kubesim.vmmigration.io"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver}
	if err := e.admin.Create(e.t.Context(), sc); err != nil && !kube.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	if err := e.admin.Create(e.t.Context(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}}); err != nil && !kube.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	return name
}

// HTTP staging behind a certificate from a private CA: the migration's
// DataVolumes name a ConfigMap of the migration's holding the configured
// CA (http.certConfigMap), and CDI's importer verifies the server with it.
func TestHTTPStagingPrivateCA(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("ca1", esxisim.PoweredOff))
	staging := t.TempDir()
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(staging)))
	t.Cleanup(srv.Close)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	spec := e.spec("ca1", "ca1")
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: staging, StagingURL: srv.URL, StagingCAPEM: ca}
	rec := e.mustComplete(e.engine(), spec)

	cm := &corev1.ConfigMap{}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: engine.StagingCAConfigMapName("ca1")}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[engine.StagingCAKey] != ca || cm.Labels[kube.LabelMigration] != "ca1" {
		t.Errorf("ConfigMap %s: labels %v, data %v", cm.Name, cm.Labels, cm.Data)
	}
	for _, dv := range e.dataVolumes() {
		if dv.Spec.Source.HTTP == nil || dv.Spec.Source.HTTP.CertConfigMap != cm.Name {
			t.Errorf("DataVolume %s source %+v, want certConfigMap %s", dv.Name, dv.Spec.Source, cm.Name)
		}
	}
	if len(rec.Disks) != 1 || !rec.Disks[0].Imported {
		t.Errorf("disks %+v", rec.Disks)
	}
}

// Without the CA the importer cannot verify the staging server and CDI
// restarts it: the engine stops once the restarts exceed the budget, with
// the verification failure in the stop.
func TestHTTPStagingUnknownCAStops(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("ca2", esxisim.PoweredOff))
	staging := t.TempDir()
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(staging)))
	t.Cleanup(srv.Close)
	spec := e.spec("ca2", "ca2")
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: staging, StagingURL: srv.URL}
	spec.ImporterRestarts = 1
	_, err := e.engine().Run(e.ctx(60*time.Second), spec)
	if se := stopErr(t, err); se.Reason != "ImporterRestarts" || !strings.Contains(se.Message, "certificate") {
		t.Fatalf("stop = %v, want the importer restarts with the certificate failure", err)
	}
}
