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

// Changing the conversion or the guest's devices replaces a migration; a
// state written before conversion, nic_model and timezone existed (null)
// gains them without migrating the VM again.
func TestConversionChanges(t *testing.T) {
	null := types.StringNull()
	v := types.StringValue
	for _, tc := range []struct {
		name            string
		stateConv, conv types.String
		stateNIC, nic   types.String
		stateTZ, tz     types.String
		want            []string
	}{
		{"old state", null, v(engine.ConversionVirtV2V), null, v("virtio"), null, v("UTC"), nil},
		{"unchanged", v("none"), v("none"), v("e1000e"), v("e1000e"), v("UTC"), v("UTC"), nil},
		{"conversion", v("none"), v(engine.ConversionVirtV2V), v("virtio"), v("virtio"), v("UTC"), v("UTC"), []string{"conversion"}},
		{"nic and zone", v("none"), v("none"), v("e1000e"), v("virtio"), v("UTC"), v("Europe/Berlin"), []string{"destination.nic_model", "destination.timezone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, plan := planModel("esxi-a", "web", 0, "apps", "web"), planModel("esxi-a", "web", 0, "apps", "web")
			state.Conversion, plan.Conversion = tc.stateConv, tc.conv
			state.Destination.NICModel, plan.Destination.NICModel = tc.stateNIC, tc.nic
			state.Destination.Timezone, plan.Destination.Timezone = tc.stateTZ, tc.tz
			if got := identityChanges(state, plan); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("identityChanges = %v, want %v", got, tc.want)
			}
		})
	}
}
