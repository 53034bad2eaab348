package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// A record stored at any checkpoint, cold or warm, resumes on a new
// process and completes: the run is stopped as it records each phase, and
// the next Run starts from what the cluster holds. Both itineraries pass
// the phases Phases lists, in that order. The migrations run side by side
// (each has its own VM and destination), as a wave does.
func TestEveryCheckpointResumesFromItsRecord(t *testing.T) {
	e := newEnv(t)
	phases := engine.Phases()
	for _, mode := range []string{engine.ModeCold, engine.ModeWarm} {
		for _, phase := range phases[1 : len(phases)-1] {
			name := fmt.Sprintf("%s-%s", mode, phase)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				vm := "it-" + mode + "-" + string(phase)
				addWarmVM(t, e, vm)
				spec := e.spec(vm, fmt.Sprintf("it-%s-%d", mode, slices.Index(phases, phase)))
				if mode == engine.ModeWarm {
					spec.Mode, spec.PrecopyRounds = engine.ModeWarm, 1
				}
				var seen []record.Phase
				ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
				defer cancel()
				stopAt := func(d *engine.Deps) {
					d.Progress = func(ev engine.Event) {
						if ev.Kind != engine.EventPhase {
							return
						}
						seen = append(seen, ev.Phase)
						if ev.Phase == phase {
							cancel()
						}
					}
				}
				rec, err := e.engine(stopAt).Run(ctx, spec)
				var se *engine.StopError
				if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != phase {
					t.Fatalf("first Run = %v, want an interruption in %s", err, phase)
				}
				if rec.Phase != phase {
					t.Fatalf("the interrupted run recorded phase %s, want %s", rec.Phase, phase)
				}
				rec = e.mustComplete(e.engine(), spec)
				if !slices.Equal(seen, phases[1:slices.Index(phases, phase)+1]) {
					t.Errorf("phases entered before the stop: %v, want %v", seen, phases[1:slices.Index(phases, phase)+1])
				}
				if mode == engine.ModeWarm && rec.Warm == nil {
					t.Error("a warm migration completed without warm evidence")
				}
			})
		}
	}
}
