package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

func smallVM(name string, power esxisim.PowerState) esxisim.VMSpec {
	return esxisim.VMSpec{
		Name: name, Disks: []esxisim.DiskSpec{{CapacityBytes: 4 << 20}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: power, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"},
	}
}

func stopErr(t *testing.T, err error) *engine.StopError {
	t.Helper()
	var se *engine.StopError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a *StopError", err, err)
	}
	return se
}

// A DataVolume that fails once with a transient reason is deleted and
// recreated; the migration completes and the history shows the attempt.
func TestRetryableDataVolumeFailureRecovers(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("r1", esxisim.PoweredOff))
	e.sim.FailNextDataVolumes(1, "", "")
	rec := e.mustComplete(e.engine(), e.spec("r1", "r1"))
	var hist []record.ErrorEntry
	for _, h := range rec.Errors {
		if h.Phase == record.PhaseImporting {
			hist = append(hist, h)
		}
	}
	if len(hist) != 1 || hist[0].Class != record.ClassTransient || hist[0].Attempt != 1 ||
		!strings.Contains(hist[0].Message, "failed (Evicted: The node was low on resource") ||
		!strings.Contains(hist[0].Message, "deleted it so that the next attempt recreates it") {
		t.Errorf("history = %+v", rec.Errors)
	}
	if rec.PowerOff == nil || rec.PowerOff.Action != record.PowerActionAlreadyOff {
		t.Errorf("powerOff = %+v", rec.PowerOff)
	}
	if n := len(e.commands("power.")) - len(e.commands("power.getstate")); n != 0 {
		t.Errorf("%d power changes sent to an already-off VM", n)
	}
	if dvs := e.dataVolumes(); len(dvs) != 1 || string(dvs[0].UID) != rec.Disks[0].DataVolumeUID {
		t.Errorf("DataVolumes = %d, recorded UID %s", len(dvs), rec.Disks[0].DataVolumeUID)
	}
	if len(e.eventsOf(engine.EventRetry)) != 1 {
		t.Errorf("retry events = %+v", e.eventsOf(engine.EventRetry))
	}
}

// hostd failing twice is absorbed by retries.
func TestRetryableHostdRecovers(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("h1", esxisim.PoweredOff))
	e.host.FailVimCmd(8, esxisim.VimLoginReset)
	spec := e.spec("h1", "h1")
	spec.Retry.Attempts = 6
	rec := e.mustComplete(e.engine(), spec)
	if rec.Phase != record.PhaseCompleted {
		t.Fatal(rec.Phase)
	}
	transient := 0
	for _, h := range rec.Errors {
		if h.Class == record.ClassTransient {
			transient++
		}
	}
	if transient == 0 {
		t.Errorf("no transient failure recorded: %+v", rec.Errors)
	}
}

// A DataVolume failing every time exhausts the budget: Failed, with the
// cleanup named, and a Failed migration stays Failed until reset.
func TestRetryableExhaustedFails(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("x1", esxisim.PoweredOn))
	e.sim.FailNextDataVolumes(2, "", "")
	spec := e.spec("x1", "x1")
	spec.PowerOffPolicy = "hard"
	spec.Retry.Attempts = 2
	rec, err := e.engine().Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseFailed || se.Phase != record.PhaseImporting || se.Reason != "RetriesExhausted" {
		t.Fatalf("stop = %#v", se)
	}
	msg := err.Error()
	for _, want := range []string{
		"migration failed in phase Importing: Importing did not succeed after 2 attempts; the last error: DataVolume " + e.ns + "/x1-disk-0 failed (Evicted: ",
		"Nothing was cleaned up; kept the staged copies under " + spec.WorkDir,
		"the source VM was powered off by this migration at ",
		"and stays off: power it on again if you abandon the migration",
		`add the annotation vmmigration.io/reset="true" to ConfigMap ` + e.ns + "/vmmigration-x1 and run apply again to retry Importing",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error text lacks %q:\n%s", want, msg)
		}
	}
	if rec.Phase != record.PhaseFailed || rec.RetryPhase != record.PhaseImporting || rec.Attempts != 2 {
		t.Errorf("record = %s/%s attempts %d", rec.Phase, rec.RetryPhase, rec.Attempts)
	}

	// Failed is terminal: the same error, nothing done.
	mark := len(e.host.CommandLog())
	_, err2 := e.engine().Run(e.ctx(10*time.Second), spec)
	if se2 := stopErr(t, err2); se2.State != record.PhaseFailed || err2.Error() != err.Error() {
		t.Errorf("second Run = %v", err2)
	}
	if n := len(e.host.CommandLog()) - mark; n != 0 {
		t.Errorf("a Failed migration sent %d commands", n)
	}

	// A human resets it: it continues from Importing and completes,
	// without powering anything off again.
	var cm corev1.ConfigMap
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "vmmigration-x1"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{coord.AnnotationReset: "true"}
	if err := e.admin.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	rec = e.mustComplete(e.engine(), spec)
	if n := len(e.commands("power.off")); n != 1 {
		t.Errorf("power.off sent %d times, want 1", n)
	}
	found := false
	for _, h := range rec.Errors {
		if h.Class == record.ClassReentered && strings.Contains(h.Message, "reset by annotation") {
			found = true
		}
	}
	if !found {
		t.Errorf("no reset entry in %+v", rec.Errors)
	}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "vmmigration-x1"}, &cm); err != nil || cm.Annotations[coord.AnnotationReset] != "" {
		t.Errorf("reset annotation not removed: %v %v", cm.Annotations, err)
	}
}

// power_off_policy manual with the VM on stops for a human; once the human
// powers it off, the next run completes.
func TestManualPowerOffClearedByHuman(t *testing.T) {
	e := newEnv(t)
	id, _ := e.host.AddVM(t, smallVM("m1", esxisim.PoweredOn))
	spec := e.spec("m1", "m1")
	spec.PowerOffPolicy = "manual"
	rec, err := e.engine().Run(e.ctx(30*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Phase != record.PhaseValidated || se.Reason != "PreflightFailed" {
		t.Fatalf("stop = %#v", se)
	}
	want := `migration needs manual intervention in phase Validated: pre-flight checks failed: power_off_policy: VM "m1" is poweredOn and power_off_policy is "manual": shut it down yourself before applying, or choose "graceful". Fix what the checks report, then run apply again`
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
	if rec.Phase != record.PhaseManualInterventionRequired || rec.PowerOff != nil {
		t.Errorf("record = %s %+v", rec.Phase, rec.PowerOff)
	}
	if err := e.host.SetPowerState(id, esxisim.PoweredOff); err != nil {
		t.Fatal(err)
	}
	rec = e.mustComplete(e.engine(), spec)
	if rec.PowerOff == nil || rec.PowerOff.Action != record.PowerActionUser {
		t.Errorf("powerOff = %+v", rec.PowerOff)
	}
	if n := len(e.commands("power.off")) + len(e.commands("power.shutdown")); n != 0 {
		t.Errorf("%d power commands with policy manual", n)
	}
	if rec.Attempts != 0 {
		t.Errorf("attempts = %d", rec.Attempts)
	}
}

// The guard in Preparing: the VM was powered off by this migration and
// someone powered it on again: stop, never power it off a second time.
func TestSourcePoweredOnAgainNeedsHuman(t *testing.T) {
	e := newEnv(t)
	id, files := e.host.AddVM(t, smallVM("g1", esxisim.PoweredOn))
	spec := e.spec("g1", "g1")
	spec.PowerOffPolicy = "hard"
	// Interrupt right after the power-off is recorded.
	ctxRun := e.ctx(30 * time.Second)
	en := e.engine()
	ctx, cancel := contextWithCancel(ctxRun)
	hook := func(ev engine.Event) {
		if ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing {
			cancel()
		}
	}
	e.onEvent.Store(&hook)
	_, err := en.Run(ctx, spec)
	e.onEvent.Store(nil)
	if se := stopErr(t, err); se.State != engine.StateInterrupted {
		t.Fatalf("first Run = %v", err)
	}
	if err := e.host.SetPowerState(id, esxisim.PoweredOn); err != nil {
		t.Fatal(err)
	}
	_, err = e.engine().Run(e.ctx(30*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "SourcePoweredOnAgain" {
		t.Fatalf("second Run = %v", err)
	}
	if !strings.Contains(err.Error(), "someone turned it back on") || !strings.Contains(err.Error(), "power it off yourself") {
		t.Errorf("error = %v", err)
	}
	if n := len(e.commands("power.off")); n != 1 {
		t.Errorf("power.off sent %d times, want 1", n)
	}
	if err := e.host.SetPowerState(id, esxisim.PoweredOff); err != nil {
		t.Fatal(err)
	}
	rec := e.mustComplete(e.engine(), spec)
	if rec.Disks[0].SourceSHA256 != files.Disks[0].SHA256() {
		t.Errorf("sha mismatch")
	}
	if !strings.Contains(rec.PowerOff.Note, "copied again") {
		t.Errorf("note = %q", rec.PowerOff.Note)
	}
}

func TestSourceNotFoundFails(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("present", esxisim.PoweredOff))
	spec := e.spec("absent", "absent")
	rec, err := e.engine().Run(e.ctx(30*time.Second), spec)
	se := stopErr(t, err)
	want := `migration failed in phase Discovering: ESXi host "esx1" has no VM named "absent". Names are matched exactly; list them with the vmmigration_esxi_vms data source. Nothing was cleaned up. The source VM's disks were never modified. Fix the cause, then add the annotation vmmigration.io/reset="true" to ConfigMap ` +
		e.ns + `/vmmigration-absent and run apply again to retry Discovering, or delete the resource to forget the migration`
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
	if se.Field != engine.FieldSourceVMName {
		t.Errorf("stop concerns %q, want %q", se.Field, engine.FieldSourceVMName)
	}
	if se.State != record.PhaseFailed || se.Reason != "SourceVMNotFound" || rec.Phase != record.PhaseFailed {
		t.Errorf("stop = %#v, phase %s", se, rec.Phase)
	}
}

func TestDestinationVMNotOurs(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("n1", esxisim.PoweredOff))
	halted := kubevirtv1.RunStrategyHalted
	other := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "n1", Labels: map[string]string{"owner": "someone-else"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{}},
		}},
	}
	if err := e.admin.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	_, err := e.engine().Run(e.ctx(30*time.Second), e.spec("n1", "n1"))
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Phase != record.PhaseValidated {
		t.Fatalf("stop = %#v", se)
	}
	if !strings.Contains(err.Error(), `destination_name_free: Namespace "`+e.ns+`" already has`) || !strings.Contains(err.Error(), "never overwrites") {
		t.Errorf("error = %v", err)
	}
	if len(e.dataVolumes()) != 0 {
		t.Error("DataVolumes created")
	}
	var vm kubevirtv1.VirtualMachine
	if err := e.admin.Get(t.Context(), client.ObjectKeyFromObject(other), &vm); err != nil || vm.Labels["owner"] != "someone-else" {
		t.Errorf("the other VM was touched: %v %v", err, vm.Labels)
	}
	if n := len(e.commands("power.")) - len(e.commands("power.getstate")); n != 0 {
		t.Errorf("%d power commands", n)
	}
}

func TestLeaseHeldByAnotherRun(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("l1", esxisim.PoweredOff))
	holder := "other-host-4242-abcdef"
	secs := int32(60)
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "vmmigration-l1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now, AcquireTime: &now},
	}
	if err := e.admin.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	_, err := e.engine().Run(e.ctx(10*time.Second), e.spec("l1", "l1"))
	var held *coord.LeaseHeldError
	if !errors.As(err, &held) || held.Holder != holder {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "is being driven by another run (other-host-4242-abcdef) holding Lease vmmigration-l1 until ") {
		t.Errorf("error = %v", err)
	}
	if len(e.host.CommandLog()) != 0 {
		t.Error("the host was contacted")
	}
}

// A run killed without releasing its lease leaves it to expire: the next
// Run waits for that, once, instead of failing.
func TestStaleLeaseIsWaitedOut(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("l2", esxisim.PoweredOff))
	holder := "killed-run-1-abcdef"
	secs := int32(2)
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "vmmigration-l2"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now, AcquireTime: &now},
	}
	if err := e.admin.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec, err := e.engine().Run(e.ctx(2*time.Minute), e.spec("l2", "l2"))
	if err != nil {
		t.Fatalf("Run after a stale lease: %v", err)
	}
	if rec.Phase != record.PhaseCompleted {
		t.Errorf("phase %s, want Completed", rec.Phase)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("Run took %v: it did not wait for the stale lease to expire", waited)
	}
}

// Starting with no /dev/kvm on the nodes needs a human; capacity shortage
// is retried and ends in ManualInterventionRequired when it persists.
func TestSchedulingFailures(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("k1", esxisim.PoweredOff))
	e.sim.SetSchedulingFailure(kubesim.MissingKVM)
	spec := e.spec("k1", "k1")
	_, err := e.engine().Run(e.ctx(30*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Phase != record.PhaseStarting || se.Reason != "NoKVM" {
		t.Fatalf("stop = %v", err)
	}
	e.sim.SetSchedulingFailure(kubesim.InsufficientMemory)
	// Wait until the simulated scheduler has rewritten the VMI's condition
	// (on a busy machine that takes a while; the engine reads what is there).
	waitVMI(t, e, "k1", "its PodScheduled condition to say Insufficient memory", func(vmi *kubevirtv1.VirtualMachineInstance) bool {
		for _, c := range vmi.Status.Conditions {
			if c.Type == kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled) && strings.Contains(c.Message, "Insufficient memory") {
				return true
			}
		}
		return false
	})
	_, err = e.engine().Run(e.ctx(30*time.Second), spec)
	se = stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "RetriesExhausted" ||
		!strings.Contains(err.Error(), "Insufficient memory") || !strings.Contains(se.Action, "make room for the VM") {
		t.Fatalf("stop = %v", err)
	}
	e.sim.ClearSchedulingFailure()
	// Wait until the simulated scheduler has placed the VMI, as a cluster
	// that got room would, before running again.
	waitVMI(t, e, "k1", "to be scheduled after the capacity came back", func(vmi *kubevirtv1.VirtualMachineInstance) bool {
		return vmi.Status.NodeName != ""
	})
	e.mustComplete(e.engine(), spec)
}

// waitVMI polls VMI name until ok holds, for up to a minute.
func waitVMI(t *testing.T, e *env, name, what string, ok func(*kubevirtv1.VirtualMachineInstance) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: name}, vmi)
		if err == nil && ok(vmi) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for VMI %s %s: %v, status %+v", name, what, err, vmi.Status.Conditions)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
