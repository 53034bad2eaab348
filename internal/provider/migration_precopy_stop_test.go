package provider

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// Changing precopy_stop_bytes replaces a migration, as precopy_rounds
// does; a state written before it existed (null) gains it without
// migrating the VM again, both in the schema's plan modifier and in the
// replacement guard's list.
func TestPrecopyStopBytesChanges(t *testing.T) {
	null, v := types.Int64Null(), types.Int64Value
	for _, tc := range []struct {
		name        string
		state, plan types.Int64
		want        bool
	}{
		{"old state", null, v(engine.DefaultPrecopyStopBytes), false},
		{"unchanged", v(1 << 20), v(1 << 20), false},
		{"changed", v(engine.DefaultPrecopyStopBytes), v(0), true},
		{"unknown", v(0), types.Int64Unknown(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, plan := planModel("esxi-a", "web", 0, "apps", "web"), planModel("esxi-a", "web", 0, "apps", "web")
			state.PrecopyStop, plan.PrecopyStop = tc.state, tc.plan
			var want []string
			if tc.want {
				want = []string{"precopy_stop_bytes"}
			}
			if got := identityChanges(state, plan); !reflect.DeepEqual(got, want) {
				t.Errorf("identityChanges = %v, want %v", got, want)
			}
			if tc.plan.IsUnknown() {
				return // the framework's RequiresReplaceIf asks about unknown values as about changes
			}
			obj := tftypes.NewValue(tftypes.Object{}, map[string]tftypes.Value{})
			req := planmodifier.Int64Request{StateValue: tc.state, PlanValue: tc.plan, ConfigValue: tc.plan,
				State: tfsdk.State{Raw: obj}, Plan: tfsdk.Plan{Raw: obj}}
			var resp planmodifier.Int64Response
			replaceUnlessNewInt64.PlanModifyInt64(context.Background(), req, &resp)
			if resp.RequiresReplace != tc.want {
				t.Errorf("the plan modifier says replace %v, want %v", resp.RequiresReplace, tc.want)
			}
		})
	}
	m := planModel("esxi-a", "web", 0, "apps", "web")
	m.Mode, m.PrecopyRounds, m.PrecopyStop = types.StringValue(engine.ModeWarm), types.Int64Value(3), v(4096)
	if s, diags := m.spec("/w"); diags.HasError() || s.PrecopyStopBytes != 4096 {
		t.Errorf("spec stop bytes %d (%v)", s.PrecopyStopBytes, diags)
	}
	m.PrecopyStop = v(-1)
	if s, _ := m.spec("/w"); engine.FieldProblems(s.WithDefaults().Validate()) == nil {
		t.Error("a negative precopy_stop_bytes passes Spec.Validate")
	}
}

// An import takes precopy_stop_bytes from the record; a warm record from
// before the attribute, or a cold one, gains the default.
func TestImportPrecopyStopBytes(t *testing.T) {
	four := int64(4096)
	for _, tc := range []struct {
		name string
		warm *record.WarmEvidence
		want int64
	}{
		{"cold", nil, engine.DefaultPrecopyStopBytes},
		{"warm", &record.WarmEvidence{Rounds: 3, StopBytes: &four}, 4096},
		{"warm before the attribute", &record.WarmEvidence{Rounds: 3}, engine.DefaultPrecopyStopBytes},
	} {
		m := planModel("esxi-a", "web", 0, "apps", "web")
		fillImported(m, engine.Observation{Record: &record.Record{Warm: tc.warm}})
		if got := m.PrecopyStop; !got.Equal(types.Int64Value(tc.want)) {
			t.Errorf("%s: precopy_stop_bytes %v, want %d", tc.name, got, tc.want)
		}
	}
}
