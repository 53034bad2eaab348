package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

const mib = 1 << 20

// foreign creates a VirtualMachine and DataVolumes as another tool would.
func (e *env) foreign(name string, labels map[string]string, disks []kubesim.ForeignDisk, nics []kubesim.ForeignNIC) {
	e.t.Helper()
	vm, dvs := kubesim.ForeignVM(e.ns, name, storageClass, kubevirtv1.RunStrategyHalted, labels, disks, nics)
	for _, dv := range dvs {
		if err := e.admin.Create(e.t.Context(), dv); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.admin.Create(e.t.Context(), vm); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) addVM(name string, disks []int64, macs ...string) int {
	e.t.Helper()
	spec := esxisim.VMSpec{Name: name, GuestOS: "rhel9-64", Power: esxisim.PoweredOff}
	for _, d := range disks {
		spec.Disks = append(spec.Disks, esxisim.DiskSpec{CapacityBytes: d, Thin: true})
	}
	for _, m := range macs {
		spec.NICs = append(spec.NICs, esxisim.NICSpec{Network: "VM Network", MAC: m})
	}
	id, _ := e.host.AddVM(e.t, spec)
	return id
}

func adoptErr(t *testing.T, err error, reason string) *engine.AdoptError {
	t.Helper()
	var ae *engine.AdoptError
	if !errors.As(err, &ae) {
		t.Fatalf("Adopt error = %v, want an *engine.AdoptError (%s)", err, reason)
	}
	if ae.Reason != reason {
		t.Fatalf("Adopt refused with %s, want %s: %v", ae.Reason, reason, err)
	}
	return ae
}

// TestAdoptRecordsCompleted: a VM made by another tool whose name, MACs
// and disk sizes match a source is recorded as Completed, with identity,
// inventory and disk evidence; it and its DataVolumes get our label (a
// foreign managed-by label is kept); Observe then sees them as ours and no
// drift; adopting again is refused because the record now exists.
func TestAdoptRecordsCompleted(t *testing.T) {
	e := newEnv(t)
	vmid := e.addVM("Web-01", []int64{2 * mib, 3*mib - 512}, "00:50:56:AA:00:01", "00:50:56:aa:00:02")
	e.addVM("other", []int64{2 * mib}, "00:50:56:aa:00:09")
	e.foreign("web-01", map[string]string{kube.LabelManagedBy: "other-tool", "app": "web"},
		[]kubesim.ForeignDisk{{Name: "web-01-root", SizeBytes: 2 * mib}, {Name: "web-01-data", SizeBytes: 3 * mib, PVCSpec: true}},
		[]kubesim.ForeignNIC{{MAC: "00:50:56:aa:00:01"}, {MAC: "00:50:56:aa:00:02", Multus: "default/storage-net"}})

	en := e.engine()
	rec, rep, err := en.Adopt(e.ctx(30*time.Second), e.ns, "web-01", []string{hostName})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got, want := rep.Match.Matched(), "matched by name, MACs (2/2), disk sizes (2/2)"; got != want {
		t.Errorf("Matched() = %q, want %q", got, want)
	}
	if rec.Phase != record.PhaseCompleted || rec.Identity.VMID != vmid || rec.Identity.VMName != "Web-01" || rec.Identity.Host != hostName {
		t.Errorf("record phase %s identity %+v, want Completed, vmid %d, Web-01 on %s", rec.Phase, rec.Identity, vmid, hostName)
	}
	if c, ok := rec.Condition(engine.CondAdopted); !ok || !strings.HasPrefix(c.Message, "adopted: matched by name, MACs (2/2), disk sizes (2/2)") {
		t.Errorf("Adopted condition = %+v", c)
	}
	if rec.Timestamps.Completed == nil || rec.Source == nil || len(rec.Source.NICs) != 2 || rec.VM == nil || rec.VM.UID == "" {
		t.Errorf("record lacks evidence: %+v", rec)
	}
	if len(rec.Disks) != 2 || rec.Disks[0].DataVolume != "web-01-root" || rec.Disks[1].DataVolume != "web-01-data" ||
		rec.Disks[1].SizeBytes != 3*mib-512 || rec.Disks[0].DataVolumeUID == "" || !rec.Disks[0].Imported || rec.Disks[0].SourceSHA256 != "" {
		t.Errorf("disks = %+v", rec.Disks)
	}
	if len(rep.Labelled) != 3 {
		t.Errorf("Labelled = %v, want the VM and both DataVolumes", rep.Labelled)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "web-01"}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Labels[kube.LabelMigration] != "web-01" || vm.Labels[kube.LabelManagedBy] != "other-tool" || vm.Labels["app"] != "web" {
		t.Errorf("VM labels = %v, want ours added and the others kept", vm.Labels)
	}
	dv := &cdiv1beta1.DataVolume{}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "web-01-data"}, dv); err != nil {
		t.Fatal(err)
	}
	if dv.Labels[kube.LabelMigration] != "web-01" || dv.Labels[kube.LabelManagedBy] != kube.ManagedByValue {
		t.Errorf("DataVolume labels = %v", dv.Labels)
	}
	obs, err := en.Observe(e.ctx(10*time.Second), e.ns, "web-01")
	if err != nil {
		t.Fatal(err)
	}
	if obs.Record == nil || !obs.VM.Ours || len(obs.Drift) != 0 {
		t.Errorf("Observe: record %v, VM ours %v, drift %v", obs.Record != nil, obs.VM.Ours, obs.Drift)
	}
	for _, d := range obs.DataVolumes {
		if !d.Ours {
			t.Errorf("DataVolume %s not ours after adoption", d.Name)
		}
	}
	_, _, err = en.Adopt(e.ctx(10*time.Second), e.ns, "web-01", []string{hostName})
	adoptErr(t, err, "RecordExists")

	// The adopted migration holds its source: a new migration of it is
	// blocked at plan time.
	p, err := en.Preview(t.Context(), e.spec("Web-01", "web-01-again"), engine.PreviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimed := false
	for _, c := range p.Warnings() {
		claimed = claimed || (c.ID == preflight.CheckSourceUnclaimed && strings.Contains(c.Message, e.ns+"/web-01"))
	}
	if !claimed {
		t.Errorf("plan of a second migration of an adopted source: warnings %+v", p.Warnings())
	}
}

// TestAdoptRules: a name alone (or with partial evidence) is refused, all
// MACs decide over a candidate that matches by name and sizes, two equal
// candidates are refused, and there must be a VM. Refusals write nothing.
func TestAdoptRules(t *testing.T) {
	e := newEnv(t)
	appID := e.addVM("app", []int64{4 * mib}, "00:50:56:bb:00:01")
	e.addVM("db", []int64{2 * mib}, "00:50:56:bb:00:02")
	e.addVM("db-old", []int64{2 * mib}, "00:50:56:bb:00:03")
	e.addVM("twin", []int64{2 * mib}, "00:50:56:bb:00:04")
	e.addVM("TWIN", []int64{2 * mib}, "00:50:56:bb:00:05")
	// "app" shares only its name with the source.
	e.foreign("app", nil, []kubesim.ForeignDisk{{Name: "app-d", SizeBytes: 8 * mib}}, []kubesim.ForeignNIC{{MAC: "02:00:00:00:00:01"}})
	// "db" has the name and size of source "db" but the MAC of "db-old".
	e.foreign("db", nil, []kubesim.ForeignDisk{{Name: "db-d", SizeBytes: 2 * mib}}, []kubesim.ForeignNIC{{MAC: "00:50:56:BB:00:03"}})
	// "twin" matches two sources by name and size, neither by MAC.
	e.foreign("twin", nil, []kubesim.ForeignDisk{{Name: "twin-d", SizeBytes: 2 * mib}}, []kubesim.ForeignNIC{{MAC: "02:00:00:00:00:04"}})
	en := e.engine()
	hosts := []string{hostName}

	t.Run("name only refused", func(t *testing.T) {
		_, _, err := en.Adopt(e.ctx(30*time.Second), e.ns, "app", hosts)
		ae := adoptErr(t, err, "NoMatch")
		want := fmt.Sprintf(`VM "app" (vmid %d, poweredOff) on host esx1: matched by name; not by MACs (0/1), disk sizes (0/1)`, appID)
		if !strings.Contains(err.Error(), want) || len(ae.Candidates) != 1 {
			t.Errorf("error = %v\nwant the one candidate listed as %s", err, want)
		}
		if _, err := en.Load(t.Context(), e.ns, "app"); !engine.IsNotFound(err) {
			t.Errorf("a refused adoption wrote a record: %v", err)
		}
		vm := &kubevirtv1.VirtualMachine{}
		if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "app"}, vm); err != nil || vm.Labels[kube.LabelMigration] != "" {
			t.Errorf("a refused adoption labelled the VM: %v %v", vm.Labels, err)
		}
	})
	t.Run("MACs decisive", func(t *testing.T) {
		rec, rep, err := en.Adopt(e.ctx(30*time.Second), e.ns, "db", hosts)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Identity.VMName != "db-old" || rep.Match.Matched() != "matched by MACs (1/1), disk sizes (1/1); not by name" {
			t.Errorf("adopted %q, %s; want db-old by MACs", rec.Identity.VMName, rep.Match.Matched())
		}
		if len(rep.Others) == 0 || rep.Others[0].Name != "db" || !rep.Others[0].Acceptable() {
			t.Errorf("Others = %v, want source db (name and sizes) listed", rep.Others)
		}
	})
	t.Run("ambiguous refused", func(t *testing.T) {
		_, _, err := en.Adopt(e.ctx(30*time.Second), e.ns, "twin", hosts)
		ae := adoptErr(t, err, "Ambiguous")
		if len(ae.Candidates) != 2 || !strings.Contains(err.Error(), `"TWIN"`) || !strings.Contains(err.Error(), "2 source VMs match it equally well") {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("no VM", func(t *testing.T) {
		_, _, err := en.Adopt(e.ctx(30*time.Second), e.ns, "nothing", hosts)
		adoptErr(t, err, "VMNotFound")
	})
	t.Run("unknown host", func(t *testing.T) {
		_, _, err := en.Adopt(e.ctx(30*time.Second), e.ns, "twin", []string{hostName, "gone"})
		adoptErr(t, err, "HostUnreadable")
	})
}

// TestAdoptClaimOnly: a VM whose disk is a bare PersistentVolumeClaim (no
// DataVolume) is sized from the claim and adopted; nothing but the VM is
// labelled.
func TestAdoptClaimOnly(t *testing.T) {
	e := newEnv(t)
	e.addVM("pvc-vm", []int64{2 * mib}, "00:50:56:cc:00:01")
	vm, _ := kubesim.ForeignVM(e.ns, "pvc-vm", storageClass, kubevirtv1.RunStrategyHalted, nil, nil,
		[]kubesim.ForeignNIC{{MAC: "00:50:56:cc:00:01"}})
	vm.Spec.Template.Spec.Volumes = []kubevirtv1.Volume{{Name: "root", VolumeSource: kubevirtv1.VolumeSource{
		PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc-vm-root"}}}}}
	sc := storageClass
	pvc := &corev1.PersistentVolumeClaim{}
	pvc.Namespace, pvc.Name = e.ns, "pvc-vm-root"
	pvc.Spec = corev1.PersistentVolumeClaimSpec{StorageClassName: &sc, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceMiB(2)}}}
	for _, o := range []client.Object{pvc, vm} {
		if err := e.admin.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	rec, rep, err := e.engine().Adopt(e.ctx(30*time.Second), e.ns, "pvc-vm", []string{hostName})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Match.Matched() != "matched by name, MACs (1/1), disk sizes (1/1)" || len(rec.Disks) != 1 || rec.Disks[0].DataVolume != "pvc-vm-root" || rec.Disks[0].DataVolumeUID != "" {
		t.Errorf("Matched %q, disks %+v", rep.Match.Matched(), rec.Disks)
	}
	if len(rep.Labelled) != 1 {
		t.Errorf("Labelled = %v, want only the VirtualMachine", rep.Labelled)
	}
}

func resourceMiB(n int64) *resource.Quantity { return resource.NewQuantity(n*mib, resource.BinarySI) }
