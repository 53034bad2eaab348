package engine_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

func TestObserveAndForgetKeep(t *testing.T) {
	e := newEnv(t)
	id, _ := e.host.AddVM(t, smallVM("o1", esxisim.PoweredOn))
	spec := e.spec("o1", "o1")
	en := e.engine()
	rec := e.mustComplete(en, spec)

	obs, err := en.Observe(t.Context(), e.ns, "o1")
	if err != nil {
		t.Fatal(err)
	}
	if obs.Phase != record.PhaseCompleted || !obs.VM.Exists || !obs.VM.Ours || obs.VM.UID != rec.VM.UID ||
		obs.VM.RunStrategy != "Always" || obs.VM.VMIPhase != "Running" || obs.VM.PrintableStatus == "" {
		t.Errorf("VM observation = %+v", obs.VM)
	}
	if len(obs.DataVolumes) != 1 || !obs.DataVolumes[0].Exists || obs.DataVolumes[0].Phase != "Succeeded" {
		t.Errorf("DataVolumes = %+v", obs.DataVolumes)
	}
	if !obs.Source.Checked || obs.Source.PowerState != "poweredOff" || len(obs.Drift) != 0 {
		t.Errorf("source = %+v, drift = %v", obs.Source, obs.Drift)
	}
	// Someone powers the source on again: a warning, not drift (only a
	// human can decide which copy to keep).
	if err := e.host.SetPowerState(id, esxisim.PoweredOn); err != nil {
		t.Fatal(err)
	}
	obs, _ = en.Observe(t.Context(), e.ns, "o1")
	if len(obs.Drift) != 0 || !strings.Contains(obs.SourceRunningAgain, "two servers with one identity") {
		t.Errorf("drift = %v, source running again = %q", obs.Drift, obs.SourceRunningAgain)
	}

	res, err := en.Forget(t.Context(), e.ns, "o1", engine.ForgetKeep, engine.ForgetOptions{WorkDir: spec.WorkDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := en.Load(t.Context(), e.ns, "o1"); !engine.IsNotFound(err) {
		t.Errorf("record still there: %v", err)
	}
	if len(e.vms()) != 1 || len(e.dataVolumes()) != 1 {
		t.Errorf("keep deleted the destination: %v", res.Actions)
	}
	// Forget again: nothing to do, no error.
	if _, err := en.Forget(t.Context(), e.ns, "o1", engine.ForgetKeep, engine.ForgetOptions{}); err != nil {
		t.Errorf("second Forget: %v", err)
	}
	obs, err = en.Observe(t.Context(), e.ns, "o1")
	if err != nil || obs.Record != nil || !obs.VM.Exists {
		t.Errorf("Observe without record = %+v, %v", obs, err)
	}
}

func TestForgetDeleteDestination(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("d1", esxisim.PoweredOff))
	spec := e.spec("d1", "d1")
	en := e.engine()
	e.mustComplete(en, spec)
	res, err := en.Forget(t.Context(), e.ns, "d1", engine.ForgetDeleteDestination, engine.ForgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(res.Actions, "\n")
	for _, want := range []string{"deleted VirtualMachine " + e.ns + "/d1", "deleted DataVolume " + e.ns + "/d1-disk-0", "deleted the migration record"} {
		if !strings.Contains(joined, want) {
			t.Errorf("actions lack %q: %s", want, joined)
		}
	}
	eventually(t, 10*time.Second, func() string {
		if n := len(e.vms()); n != 0 {
			return "VM still there"
		}
		if n := len(e.dataVolumes()); n != 0 {
			return "DataVolume still there"
		}
		return ""
	})
	// Not found is success.
	if _, err := en.Forget(t.Context(), e.ns, "d1", engine.ForgetDeleteDestination, engine.ForgetOptions{}); err != nil {
		t.Errorf("second Forget: %v", err)
	}
}

func TestForgetRollback(t *testing.T) {
	e := newEnv(t)
	// Refused once the destination VM has started.
	id, _ := e.host.AddVM(t, smallVM("rb1", esxisim.PoweredOn))
	spec := e.spec("rb1", "rb1")
	spec.PowerOffPolicy = "hard"
	en := e.engine()
	e.mustComplete(en, spec)
	_, err := en.Forget(t.Context(), e.ns, "rb1", engine.ForgetRollback, engine.ForgetOptions{})
	se := stopErr(t, err)
	if se.Reason != "RollbackRefused" || !strings.Contains(err.Error(), "cannot roll back: the destination VM "+e.ns+"/rb1 started at ") ||
		!strings.Contains(err.Error(), "two copies of the same server") {
		t.Errorf("err = %v", err)
	}
	if st, _ := e.host.PowerState(id); st != esxisim.PoweredOff {
		t.Errorf("source powered on despite refusal")
	}
	if _, err := en.Load(t.Context(), e.ns, "rb1"); err != nil {
		t.Errorf("record removed despite refusal: %v", err)
	}

	// Allowed when the VM never started: no /dev/kvm.
	id2, _ := e.host.AddVM(t, smallVM("rb2", esxisim.PoweredOn))
	spec2 := e.spec("rb2", "rb2")
	spec2.PowerOffPolicy = "hard"
	e.sim.SetSchedulingFailure(kubesim.MissingKVM)
	_, err = en.Run(e.ctx(30*time.Second), spec2)
	if se := stopErr(t, err); se.Reason != "NoKVM" {
		t.Fatalf("Run = %v", err)
	}
	// The VMI exists but never left Scheduling: a rollback is safe.
	res, err := en.Forget(t.Context(), e.ns, "rb2", engine.ForgetRollback, engine.ForgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := e.host.PowerState(id2); st != esxisim.PoweredOn {
		t.Errorf("source not powered on: %v", res.Actions)
	}
	joined := strings.Join(res.Actions, "\n")
	if !strings.Contains(joined, "powered on source VM \"rb2\"") || !strings.Contains(joined, "deleted VirtualMachine "+e.ns+"/rb2") {
		t.Errorf("actions = %v", res.Actions)
	}
	e.sim.ClearSchedulingFailure()
}

// Two migrations from one host with a limit of 1: never both in the
// host-reading phases, and both complete.
func TestHostLimit(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("p1", esxisim.PoweredOff))
	e.host.AddVM(t, smallVM("p2", esxisim.PoweredOff))
	e.host.SetCommandDelay(20 * time.Millisecond)
	en := e.engine(func(d *engine.Deps) { d.HostLimits = map[string]int{hostName: 1} })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, n := range []string{"p1", "p2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = en.Run(e.ctx(60*time.Second), e.spec(n, n))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := en.MaxConcurrent(hostName); got != 1 {
		t.Errorf("max concurrent = %d, want 1", got)
	}
}

// qcow2 through the http transport: the user's web server serves the
// staging folder, CDI imports from it.
func TestQCOW2OverHTTP(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("q1", esxisim.PoweredOff))
	staging := t.TempDir()
	srv := httptest.NewServer(http.FileServer(http.Dir(staging)))
	t.Cleanup(srv.Close)
	spec := e.spec("q1", "q1")
	spec.TargetFormat = "qcow2"
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: staging, StagingURL: srv.URL + "/images"}
	// The server serves staging at /, so point the URL at the root.
	spec.Transport.StagingURL = srv.URL
	rec := e.mustComplete(e.engine(), spec)
	d := rec.Disks[0]
	if d.ArtifactFormat != "qcow2" || d.ArtifactSHA256 == "" || d.ArtifactSHA256 == d.SourceSHA256 ||
		d.ArtifactURL != srv.URL+"/"+e.ns+"/q1/"+rec.StagingToken+"/disk-0.qcow2" || len(rec.StagingToken) != 32 {
		t.Errorf("disk = %+v", d)
	}
	got, ok := e.sim.ReceivedImage(e.ns, "q1-disk-0")
	// CDI fetched the qcow2 image and wrote the raw disk to the claim.
	if !ok || got.SentFormat != "qcow2" || got.SentSHA256 != d.ArtifactSHA256 || got.SHA256 != d.SourceSHA256 || got.VirtualSize != d.SizeBytes {
		t.Errorf("received = %+v", got)
	}
	if entries, _ := os.ReadDir(staging); len(entries) != 0 {
		t.Errorf("staging left behind: %v", entries)
	}
}

func eventually(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
