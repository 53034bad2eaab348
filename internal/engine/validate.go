package engine

import (
	"context"
	"fmt"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"strings"
)

// stepValidate runs the pre-flight checks on what the source and the
// cluster show now, through the same Preview judgement a plan makes.
func (r *run) stepValidate(ctx context.Context) error {
	vm, err := r.observeSource(ctx)
	if err != nil {
		return err
	}
	// The source may have changed while a human fixed a blocker.
	r.recordInventory(vm)
	p, err := r.e.judge(ctx, r.spec, vm, r.rec().Disks, r.rec().Warm)
	if err != nil {
		return err
	}
	now := r.now()
	rec := r.rec()
	rec.Preflight = nil
	for _, c := range p.Checks.Checks {
		rec.Preflight = append(rec.Preflight, record.CheckResult{ID: c.ID, Severity: string(c.Severity), Passed: c.Passed, Message: c.Message, Time: now})
	}
	var blockers []string
	for _, c := range p.Blockers() {
		blockers = append(blockers, c.ID+": "+c.Message)
	}
	if len(blockers) > 0 {
		msg := "pre-flight checks failed: " + strings.Join(blockers, " ")
		rec.SetCondition(now, record.CondValidated, false, "ChecksFailed", msg)
		return onField(FieldSource, needsHuman("PreflightFailed", msg, "fix what the checks report, then run apply again", nil))
	}
	// Claim the source before anything acts on it: of two migrations of
	// one VM, only the claim's holder goes on to Preparing.
	if err := r.claimSource(ctx, vm); err != nil {
		return err
	}
	r.recordExecution()
	stamp(&rec.Timestamps.Validated, now)
	rec.SetCondition(now, record.CondValidated, true, "ChecksPassed", fmt.Sprintf("%d checks passed", len(p.Checks.Checks)))
	return nil
}
