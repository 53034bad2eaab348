package engine_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

func powerChanges(e *env) []string {
	var out []string
	for _, c := range e.commands("vmsvc/power.") {
		if !strings.Contains(c, "power.getstate") {
			out = append(out, c)
		}
	}
	return out
}

// Two migrations of one source VM to two destinations, run at once: one
// claims the source and moves it, the other stops at Validated naming the
// first, and the source is powered off once.
func TestOneSourceOneMigration(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("twice", esxisim.PoweredOn))
	specs := []engine.Spec{e.spec("twice", "twice-a"), e.spec("twice", "twice-b")}
	en := e.engine()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = en.Run(e.ctx(60*time.Second), specs[i])
		}()
	}
	wg.Wait()
	if n := powerChanges(e); len(n) != 1 {
		t.Errorf("power commands = %q, want exactly one", n)
	}
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	if errs[winner] != nil {
		t.Fatalf("neither migration completed: %v; %v", errs[0], errs[1])
	}
	var se *engine.StopError
	if !errors.As(errs[loser], &se) || se.Phase != record.PhaseValidated || se.State != record.PhaseManualInterventionRequired ||
		!strings.Contains(se.Error(), e.ns+"/"+specs[winner].Name) {
		t.Fatalf("second migration = %v, want a stop at Validated naming %s/%s", errs[loser], e.ns, specs[winner].Name)
	}
	rec, err := en.Load(t.Context(), e.ns, specs[loser].Name)
	if err != nil || rec.PowerOff != nil {
		t.Errorf("the stopped migration decided a power-off: %+v, %v", rec.PowerOff, err)
	}

	// The plan of the second one says so too.
	p, err := en.Preview(t.Context(), specs[loser], engine.PreviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A warning at plan time (the holder may be replaced in the same
	// apply); taking the claim at Validated is what stops the second one.
	found := false
	for _, w := range p.Warnings() {
		found = found || (w.ID == preflight.CheckSourceUnclaimed && strings.Contains(w.Message, e.ns+"/"+specs[winner].Name))
	}
	if !found || len(p.Blockers()) != 0 {
		t.Errorf("plan warnings = %+v, blockers = %+v; want the claim as a warning", p.Warnings(), p.Blockers())
	}

	// The claim is kept while the first one's record exists: running the
	// second again still stops.
	if _, err := en.Run(e.ctx(30*time.Second), specs[loser]); err == nil || !strings.Contains(err.Error(), specs[winner].Name) {
		t.Errorf("second run of the loser = %v", err)
	}
	// Forgetting the first releases it; the second may go on (the source
	// is off now: no new power command).
	res, err := en.Forget(t.Context(), e.ns, specs[winner].Name, engine.ForgetKeep, engine.ForgetOptions{WorkDir: specs[winner].WorkDir})
	if err != nil || !strings.Contains(strings.Join(res.Actions, "\n"), "released the claim on the source VM") {
		t.Fatalf("Forget = %v, %v", res.Actions, err)
	}
	p, err = en.Preview(t.Context(), specs[loser], engine.PreviewOptions{})
	if err != nil || len(p.Blockers()) != 0 {
		t.Fatalf("plan after release: %+v, %v", p.Blockers(), err)
	}
	if _, err := en.Run(e.ctx(60*time.Second), specs[loser]); err != nil {
		t.Fatalf("second migration after release: %v", err)
	}
	if n := powerChanges(e); len(n) != 1 {
		t.Errorf("power commands = %q, want exactly one", n)
	}
}

// A claim whose holder has no record any more (its record deleted by hand)
// does not stop a new migration, which takes the claim over.
func TestStaleSourceClaimTakenOver(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("stale", esxisim.PoweredOff))
	spec := e.spec("stale", "stale-a")
	en := e.engine()
	e.mustComplete(en, spec)
	// The first migration's record disappears without Forget.
	if err := e.admin.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: coord.RecordName("stale-a")}}); err != nil {
		t.Fatal(err)
	}
	second := e.spec("stale", "stale-b")
	p, err := en.Preview(t.Context(), second, engine.PreviewOptions{})
	if err != nil || len(p.Blockers()) != 0 {
		t.Fatalf("plan: %+v, %v", p.Blockers(), err)
	}
	e.mustComplete(en, second)
	var list corev1.ConfigMapList
	if err := e.admin.List(t.Context(), &list, client.InNamespace(coord.DefaultClaimNamespace), client.MatchingLabels{coord.LabelClaimNamespace: e.ns}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Data["name"] != "stale-b" || list.Items[0].Labels[engine.LabelMigration] != "stale-b" {
		t.Errorf("claims = %+v", list.Items)
	}
}
