package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

func (r *migrationResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	// Read only the attributes checked here, as framework values: with
	// for_each over data sources, whole objects and maps are unknown while
	// Terraform validates.
	var transport types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("transport"), &transport)...)
	var networkMap types.Map
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("destination").AtName("network_map"), &networkMap)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A missing transport is refused when a migration is planned
	// (Spec.Validate): an imported one copies nothing and needs none.
	if !transport.IsUnknown() && !transport.IsNull() {
		attrs := transport.Attributes()
		str := func(name string) (string, bool) {
			v, ok := attrs[name].(types.String)
			return v.ValueString(), ok && !v.IsUnknown()
		}
		proxy, k1 := str("upload_proxy_url")
		dir, k2 := str("http_staging_dir")
		url, k3 := str("http_staging_url")
		if k1 && k2 && k3 {
			_, err := engine.TransportOf(proxy, "", false, dir, url)
			addFieldProblems(&resp.Diagnostics, "Invalid transport", err)
		}
	}
	if networkMap.IsUnknown() || networkMap.IsNull() {
		return
	}
	for src, el := range networkMap.Elements() {
		dst, ok := el.(types.String)
		if !ok || dst.IsUnknown() {
			continue
		}
		if err := engine.ValidateNetwork(dst.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("destination").AtName("network_map").AtMapKey(src), "Invalid network",
				fmt.Sprintf("network_map[%q]: %v", src, err))
		}
	}
}

// addFieldProblems adds each problem of an engine error as an error on the
// attribute it concerns.
func addFieldProblems(diags *diag.Diagnostics, summary string, err error) {
	for _, p := range engine.FieldProblems(err) {
		diags.AddAttributeError(attributePath(p.Field), summary, p.Message)
	}
}

// ModifyPlan makes the plan say what apply will do.
//
// For a migration that will be created it runs the pre-flight checks of
// vmmigration_preflight on the planned configuration (blockers are errors,
// warnings are warnings) and plans the disks that will be copied. For an
// existing one it keeps the computed evidence (only what changes shows),
// turns drift into a replacement, and refuses a replacement that would
// leave the old VM running under delete_policy keep.
func (r *migrationResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan migrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Source == nil || plan.Destination == nil {
		return
	}
	if req.State.Raw.IsNull() {
		r.planCreate(ctx, &plan, resp)
	} else {
		var state migrationModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if resp.Diagnostics.HasError() || state.Destination == nil {
			return
		}
		r.planUpdate(ctx, &state, &plan, resp)
	}
	if !resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	}
}

// planCreate previews the migration with the engine (engine.Preview, the
// judgement the Validated checkpoint makes at apply time): blockers are
// errors, warnings are warnings, and the disks to be copied are planned.
func (r *migrationResource) planCreate(ctx context.Context, plan *migrationModel, resp *resource.ModifyPlanResponse) {
	plan.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	if r.clients != nil && plan.Execution.IsUnknown() {
		// Not set: the provider's, known even when the rest is not.
		plan.Execution = types.StringValue(r.clients.settings.Execution)
	}
	if r.clients == nil || !plan.knownForPreview() {
		tflog.Debug(ctx, "pre-flight checks skipped at plan time: the configuration has unknown values")
		return
	}
	spec, diags := plan.spec(r.clients.settings.WorkDir)
	resp.Diagnostics.Append(diags...)
	addFieldProblems(&resp.Diagnostics, "Invalid migration", spec.WithDefaults().Validate())
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := spec.Namespace, spec.Name
	ctx = tflog.SetField(ctx, "migration", ns+"/"+name)
	eng, diags := r.clients.engine()
	if diags.HasError() {
		return
	}
	p, err := eng.Preview(ctx, spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge, ResumeFromRecord: true})
	switch {
	case err != nil && engine.FieldOf(err) != "":
		summary := "Cannot migrate " + sourceLabel(spec)
		if strings.HasPrefix(engine.FieldOf(err), engine.FieldSource) {
			summary = "Source VM not found"
		}
		resp.Diagnostics.AddAttributeError(attributePath(engine.FieldOf(err)), summary, err.Error())
		return
	case err != nil:
		resp.Diagnostics.AddWarning("Pre-flight checks not run",
			fmt.Sprintf("Migration %s/%s could not be previewed at plan time (%v); apply runs the same checks before it touches anything.", ns, name, err))
		return
	case p.Record != nil:
		// An earlier apply started this migration: the checks ran before
		// the power-off. A stopped one re-reads the source when it resumes
		// (a human may have changed it while fixing the cause), so its
		// disks stay unknown.
		if p.Disks != nil {
			resp.Diagnostics.Append(plan.planDisks(p.Disks)...)
		}
		tflog.Info(ctx, "planned migration resumes from its record", map[string]any{"phase": string(p.Record.Phase)})
		return
	}
	vm := p.VM
	for _, c := range p.Blockers() {
		resp.Diagnostics.AddAttributeError(attributePath(engine.CheckField(c.ID)), "Migration blocked by pre-flight check "+c.ID,
			fmt.Sprintf("Migrating VM %q (vmid %d) on host %s to %s/%s would stop at this check, before anything is touched: %s",
				vm.Name, vm.VMID, spec.Host, ns, name, c.Message))
	}
	for _, c := range p.Warnings() {
		resp.Diagnostics.AddAttributeWarning(attributePath(engine.CheckField(c.ID)), "Pre-flight warning "+c.ID,
			fmt.Sprintf("Migration of VM %q (vmid %d) on host %s to %s/%s: %s", vm.Name, vm.VMID, spec.Host, ns, name, c.Message))
	}
	plan.SourceVMID = types.Int64Value(int64(vm.VMID))
	resp.Diagnostics.Append(plan.planDisks(p.Disks)...)
}

// knownForPreview reports whether the values a preview needs are known.
func (m *migrationModel) knownForPreview() bool {
	src, dst := m.Source, m.Destination
	known := !src.Host.IsUnknown() && !src.VMName.IsUnknown() && !src.VMID.IsUnknown() &&
		!dst.Namespace.IsUnknown() && !dst.Name.IsUnknown() && !dst.StorageClass.IsUnknown() && !m.PowerOffPolicy.IsUnknown()
	for _, v := range dst.NetworkMap {
		known = known && !v.IsUnknown()
	}
	return known
}

// sourceLabel names the source VM of a spec for messages.
func sourceLabel(s engine.Spec) string {
	if s.VMID > 0 {
		return fmt.Sprintf("vmid %d", s.VMID)
	}
	return s.VMName
}

// planDisks plans the disks a Create will record: what is copied from
// where to which DataVolume is known, the checksums and UIDs are not.
// Create writes the same values from the record, which Discovering fills
// from the same inventory.
func (m *migrationModel) planDisks(disks []record.DiskEvidence) diag.Diagnostics {
	var diags diag.Diagnostics
	elems := []attr.Value{}
	for _, d := range disks {
		o, ds := types.ObjectValue(diskEvidenceType.AttrTypes, map[string]attr.Value{
			"index":           types.Int64Value(int64(d.Index)),
			"device":          types.StringValue(d.Device),
			"source_path":     types.StringValue(d.SourcePath),
			"size_bytes":      types.Int64Value(d.SizeBytes),
			"source_sha256":   types.StringUnknown(),
			"artifact_format": types.StringUnknown(),
			"artifact_sha256": types.StringUnknown(), "converted_sha256": types.StringUnknown(),
			"data_volume":     types.StringValue(d.DataVolume),
			"data_volume_uid": types.StringUnknown(),
			"copy_job":        types.StringUnknown(),
			"copy_attempt":    types.Int64Unknown(),
			"chain":           types.ListUnknown(chainFileType),
		})
		diags.Append(ds...)
		elems = append(elems, o)
	}
	l, ds := types.ListValue(diskEvidenceType, elems)
	diags.Append(ds...)
	m.Disks = l
	return diags
}

func (r *migrationResource) planUpdate(ctx context.Context, state, plan *migrationModel, resp *resource.ModifyPlanResponse) {
	// The evidence does not change in place: show only what does.
	plan.copyComputed(*state)
	if plan.Execution.IsUnknown() {
		// A state from before the attribute: that migration ran locally.
		plan.Execution = types.StringValue(engine.ExecutionLocal)
	}

	var drift []string
	if !state.Drift.IsNull() && !state.Drift.IsUnknown() {
		resp.Diagnostics.Append(state.Drift.ElementsAs(ctx, &drift, false)...)
	}
	driftReplace := len(drift) > 0
	if driftReplace {
		plan.Drift = types.ListValueMust(types.StringType, []attr.Value{})
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("drift"))
	}
	if changed := identityChanges(state, plan); len(changed) > 0 && !driftReplace {
		r.guardReplacement(ctx, state, plan, changed, resp)
	}
}

// identityChanges lists the changed attributes that force a replacement
// (the RequiresReplace plan modifiers of the schema; the resource's
// ModifyPlan does not see their verdict).
func identityChanges(state, plan *migrationModel) []string {
	var out []string
	if !sameSource(state, plan) {
		out = append(out, "source")
	}
	s, p := state.Destination, plan.Destination
	for _, f := range []struct {
		name string
		a, b types.String
	}{
		{"destination.namespace", s.Namespace, p.Namespace}, {"destination.name", s.Name, p.Name},
		{"destination.storage_class", s.StorageClass, p.StorageClass}, {"destination.access_mode", s.AccessMode, p.AccessMode},
		{"destination.volume_mode", s.VolumeMode, p.VolumeMode}, {"destination.disk_bus", s.DiskBus, p.DiskBus},
		{"destination.nic_model", s.NICModel, p.NICModel}, {"destination.timezone", s.Timezone, p.Timezone},
		{"target_format", state.TargetFormat, plan.TargetFormat}, {"conversion", state.Conversion, plan.Conversion},
	} {
		// A null state value is an attribute the state predates: gaining
		// it replaces nothing.
		if !f.b.IsUnknown() && !f.a.IsNull() && !f.a.Equal(f.b) {
			out = append(out, f.name)
		}
	}
	if !plan.Mode.IsUnknown() && !state.Mode.IsNull() && !state.Mode.Equal(plan.Mode) {
		out = append(out, "mode")
	}
	if !plan.Execution.IsUnknown() && !state.Execution.IsNull() && !state.Execution.Equal(plan.Execution) {
		out = append(out, "execution")
	}
	if !plan.PrecopyRounds.IsUnknown() && !state.PrecopyRounds.IsNull() && !state.PrecopyRounds.Equal(plan.PrecopyRounds) {
		out = append(out, "precopy_rounds")
	}
	if !plan.PrecopyStop.IsUnknown() && !state.PrecopyStop.IsNull() && !state.PrecopyStop.Equal(plan.PrecopyStop) {
		out = append(out, "precopy_stop_bytes")
	}
	return out
}

// sourceChangeReplaces is the RequiresReplaceIf of source: after an import
// the state names the source as the record does (vm_name), and a
// configuration naming the same VM by vmid is the same migration.
func sourceChangeReplaces(ctx context.Context, req planmodifier.ObjectRequest, resp *objectplanmodifier.RequiresReplaceIfFuncResponse) {
	var state, plan migrationModel
	var ss, ps *sourceModel
	resp.Diagnostics.Append(req.StateValue.As(ctx, &ss, basetypes.ObjectAsOptions{})...)
	resp.Diagnostics.Append(req.PlanValue.As(ctx, &ps, basetypes.ObjectAsOptions{UnhandledUnknownAsEmpty: true})...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("source_vmid"), &state.SourceVMID)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.Source, plan.Source = ss, ps
	resp.RequiresReplace = !sameSource(&state, &plan)
}

// sameSource reports whether two source blocks name the same VM on the
// same host, one by name and the other by vmid.
func sameSource(state, plan *migrationModel) bool {
	s, p := state.Source, plan.Source
	switch {
	case s == nil || p == nil:
		return s == p
	case s.Host.Equal(p.Host) && s.VMName.Equal(p.VMName) && s.VMID.Equal(p.VMID):
		return true
	case p.Host.IsUnknown() || p.VMID.IsUnknown() || p.VMName.IsUnknown() || !s.Host.Equal(p.Host):
		return false
	case !p.VMID.IsNull() && s.VMID.IsNull() && !state.SourceVMID.IsNull():
		return p.VMID.ValueInt64() == state.SourceVMID.ValueInt64()
	}
	return false
}

// guardReplacement refuses a replacement that would leave the old
// VirtualMachine running beside, or underneath, the new migration (see
// replacementVerdict).
func (r *migrationResource) guardReplacement(ctx context.Context, state, plan *migrationModel, changed []string, resp *resource.ModifyPlanResponse) {
	if state.DeletePolicy.ValueString() != string(engine.ForgetKeep) || r.clients == nil {
		return
	}
	eng, diags := r.clients.engine()
	if diags.HasError() {
		return
	}
	ns, name := state.Destination.Namespace.ValueString(), state.Destination.Name.ValueString()
	obs, err := eng.Observe(ctx, ns, name)
	if err != nil {
		return
	}
	sameDest := plan.Destination.Namespace.Equal(state.Destination.Namespace) && plan.Destination.Name.Equal(state.Destination.Name)
	v := replacementVerdict(ns, name, plan.Destination.Namespace.ValueString(), plan.Destination.Name.ValueString(), changed, sameDest, obs.VM)
	switch {
	case v.refuse:
		resp.Diagnostics.AddError(v.summary, v.detail)
	case v.summary != "":
		resp.Diagnostics.AddWarning(v.summary, v.detail)
	}
}

// verdict is what a plan says about a change: nothing (summary ""), a
// warning, or a refusal.
type verdict struct {
	refuse          bool
	summary, detail string
}

// replacementVerdict judges replacing migration ns/name, whose
// delete_policy is keep, by one to newNS/newName.
//
// With delete_policy keep, destroying the old migration leaves its
// VirtualMachine and DataVolumes, labelled as the migration of that name.
// A new migration to the same destination would adopt them as its own
// (it would find "its" DataVolumes Succeeded and not import the source
// again, so a new storage_class or target_format would silently not take
// effect); one to another destination would boot a second copy of the
// server with the same MAC addresses next to the first.
func replacementVerdict(ns, name, newNS, newName string, changed []string, sameDest bool, vm engine.VMObservation) verdict {
	if !vm.Exists || !vm.Ours {
		return verdict{}
	}
	ways := fmt.Sprintf("To replace it, first set delete_policy = %q and apply (an in-place change), then apply this change: the old VM and its DataVolumes are then deleted before the new migration starts. "+
		"To keep the old VM instead, stop managing it: `terraform state rm` this resource, and rename or delete VirtualMachine %s/%s yourself before applying.", engine.ForgetDeleteDestination, ns, name)
	if sameDest {
		return verdict{refuse: true, summary: "Replacement would adopt the old VM",
			detail: fmt.Sprintf("Changing %s replaces migration %s/%s, and its delete_policy %q leaves VirtualMachine %s/%s and its DataVolumes in place, labelled as this migration's. "+
				"The new migration to the same destination would adopt them instead of migrating the source again, so the change would not take effect.\n\n%s",
				strings.Join(changed, ", "), ns, name, engine.ForgetKeep, ns, name, ways)}
	}
	if vm.RunStrategy == "Halted" && vm.VMIPhase == "" {
		return verdict{summary: "Old VM kept",
			detail: fmt.Sprintf("Replacing migration %s/%s leaves its halted VirtualMachine %s/%s (delete_policy %q). Do not start it while the new one runs: both carry the same MAC addresses.", ns, name, ns, name, engine.ForgetKeep)}
	}
	return verdict{refuse: true, summary: "Replacement would run two copies of the VM",
		detail: fmt.Sprintf("Changing %s replaces migration %s/%s, and its delete_policy %q leaves VirtualMachine %s/%s running. "+
			"The new migration would start a second copy of the same server, with the same MAC addresses, in %s/%s.\n\n%s",
			strings.Join(changed, ", "), ns, name, engine.ForgetKeep, ns, name, newNS, newName, ways)}
}
