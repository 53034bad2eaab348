package provider

import (
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
)

// Changing mode or precopy_rounds replaces a migration; a state written
// before they existed (null) is the same cold migration.
func TestModeChanges(t *testing.T) {
	for _, tc := range []struct {
		name                string
		stateMode, planMode types.String
		stateRds, planRds   types.Int64
		want                []string
	}{
		{"old state", types.StringNull(), types.StringValue(engine.ModeCold), types.Int64Null(), types.Int64Value(1), nil},
		{"unchanged", types.StringValue(engine.ModeWarm), types.StringValue(engine.ModeWarm), types.Int64Value(2), types.Int64Value(2), nil},
		{"cold to warm", types.StringValue(engine.ModeCold), types.StringValue(engine.ModeWarm), types.Int64Value(1), types.Int64Value(1), []string{"mode"}},
		{"more rounds", types.StringValue(engine.ModeWarm), types.StringValue(engine.ModeWarm), types.Int64Value(1), types.Int64Value(3), []string{"precopy_rounds"}},
		{"unknown", types.StringValue(engine.ModeCold), types.StringUnknown(), types.Int64Value(1), types.Int64Unknown(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, plan := planModel("esxi-a", "web", 0, "apps", "web"), planModel("esxi-a", "web", 0, "apps", "web")
			state.Mode, plan.Mode, state.PrecopyRounds, plan.PrecopyRounds = tc.stateMode, tc.planMode, tc.stateRds, tc.planRds
			if got := identityChanges(state, plan); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("identityChanges = %v, want %v", got, tc.want)
			}
		})
	}
	m := planModel("esxi-a", "web", 0, "apps", "web")
	m.Mode, m.PrecopyRounds = types.StringValue(engine.ModeWarm), types.Int64Value(3)
	s, diags := m.spec("/w")
	if diags.HasError() || s.Mode != engine.ModeWarm || s.PrecopyRounds != 3 {
		t.Errorf("spec mode %q rounds %d (%v)", s.Mode, s.PrecopyRounds, diags)
	}
}
