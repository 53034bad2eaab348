package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

var (
	_ resource.Resource                   = (*migrationResource)(nil)
	_ resource.ResourceWithConfigure      = (*migrationResource)(nil)
	_ resource.ResourceWithImportState    = (*migrationResource)(nil)
	_ resource.ResourceWithValidateConfig = (*migrationResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*migrationResource)(nil)
)

// defaultCreateTimeout bounds a migration's Create when no timeouts block
// says otherwise. An expired timeout stops at a checkpoint; the next apply
// continues from there.
const defaultCreateTimeout = 4 * time.Hour

type migrationResource struct {
	clients *clients
}

// NewMigrationResource is the constructor of vmmigration_migration.
func NewMigrationResource() resource.Resource { return &migrationResource{} }

func (r *migrationResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_migration"
}

func (r *migrationResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = migrationSchema(ctx)
}

func (r *migrationResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, diags := clientsFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.clients = c
}

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
	str := func(o types.Object, name string) (string, bool) {
		v, ok := o.Attributes()[name].(types.String)
		if !ok || v.IsUnknown() {
			return "", false
		}
		return v.ValueString(), true
	}
	// A missing transport is refused when a migration is planned
	// (planCreate): an imported one copies nothing and needs none.
	switch {
	case transport.IsUnknown() || transport.IsNull():
	default:
		proxy, k1 := str(transport, "upload_proxy_url")
		dir, k2 := str(transport, "http_staging_dir")
		url, k3 := str(transport, "http_staging_url")
		switch {
		case !k1 || !k2 || !k3:
		case proxy != "" && (dir != "" || url != ""):
			resp.Diagnostics.AddAttributeError(path.Root("transport"), "Conflicting transports",
				"Set either upload_proxy_url (CDI upload) or http_staging_dir and http_staging_url (HTTP import), not both.")
		case proxy == "" && (dir == "" || url == ""):
			resp.Diagnostics.AddAttributeError(path.Root("transport"), "Incomplete transport",
				"Set upload_proxy_url for CDI's upload proxy, or both http_staging_dir and http_staging_url for an HTTP staging location.")
		}
	}
	if networkMap.IsUnknown() || networkMap.IsNull() {
		return
	}
	for src, el := range networkMap.Elements() {
		dst, ok := el.(types.String)
		if !ok || dst.IsUnknown() || dst.ValueString() == "pod" {
			continue
		}
		v := dst.ValueString()
		ns, name, found := strings.Cut(v, "/")
		if !found {
			ns, name = "", v
		}
		if (found && !dns1123Label.MatchString(ns)) || !dns1123Label.MatchString(name) {
			resp.Diagnostics.AddAttributeError(path.Root("destination").AtName("network_map").AtMapKey(src), "Invalid network",
				fmt.Sprintf("network_map[%q] = %q: use \"pod\" for the pod network, or a Multus NetworkAttachmentDefinition as \"<namespace>/<name>\".", src, v))
		}
	}
}

// spec turns the model into the engine's terms.
func (m *migrationModel) spec(workDir string) (engine.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	dur := func(p path.Path, v types.String) time.Duration {
		if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
			return 0
		}
		d, err := time.ParseDuration(v.ValueString())
		if err != nil {
			diags.AddAttributeError(p, "Invalid duration", err.Error())
		}
		return d
	}
	s := engine.Spec{
		Host:            m.Source.Host.ValueString(),
		VMName:          m.Source.VMName.ValueString(),
		VMID:            int(m.Source.VMID.ValueInt64()),
		Namespace:       m.Destination.Namespace.ValueString(),
		Name:            m.Destination.Name.ValueString(),
		StorageClass:    m.Destination.StorageClass.ValueString(),
		AccessMode:      m.Destination.AccessMode.ValueString(),
		VolumeMode:      m.Destination.VolumeMode.ValueString(),
		DiskBus:         m.Destination.DiskBus.ValueString(),
		RunStrategy:     m.Destination.RunStrategy.ValueString(),
		NetworkMap:      stringMap(m.Destination.NetworkMap),
		Labels:          stringMap(m.Destination.Labels),
		PowerOffPolicy:  m.PowerOffPolicy.ValueString(),
		ShutdownTimeout: dur(path.Root("shutdown_timeout"), m.ShutdownTO),
		TargetFormat:    m.TargetFormat.ValueString(),
		WorkDir:         workDir,
	}
	if t := m.Transport; t != nil {
		if t.UploadProxyURL.ValueString() != "" {
			s.Transport = engine.Transport{Kind: engine.TransportCDIUpload, UploadProxyURL: t.UploadProxyURL.ValueString(),
				UploadProxyCAPEM: t.UploadProxyCA.ValueString(), Insecure: t.Insecure.ValueBool()}
		} else {
			s.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: t.StagingDir.ValueString(), StagingURL: t.StagingURL.ValueString()}
		}
	}
	if v := m.Validation; v != nil {
		s.Validation = engine.Validation{
			GuestAgent: v.GuestAgent.ValueBool(),
			IPReported: v.IPReported.ValueBool(),
			TCP:        stringList(v.TCP),
			HTTP:       stringList(v.HTTP),
			Timeout:    dur(path.Root("validation").AtName("timeout"), v.Timeout),
		}
	}
	if rt := m.Retry; rt != nil {
		s.Retry = engine.RetryPolicy{
			Attempts: int(rt.Attempts.ValueInt64()),
			Initial:  dur(path.Root("retry").AtName("initial_backoff"), rt.InitialBackoff),
			Max:      dur(path.Root("retry").AtName("max_backoff"), rt.MaxBackoff),
		}
	}
	return s, diags
}

func (r *migrationResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m migrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := m.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	spec, diags := m.spec(r.clients.settings.WorkDir)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx = tflog.SetField(ctx, "migration", spec.Namespace+"/"+spec.Name)
	ctx = tflog.SetField(ctx, "esxi_host", spec.Host)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	defer r.clients.watchProgress(spec.Namespace, spec.Name, func(ev engine.Event) { logEvent(ctx, ev) })()
	tflog.Info(ctx, "starting or resuming migration")
	rec, err := eng.Run(ctx, spec)
	r.clients.invalidateInventory(spec.Host)
	if err != nil {
		// No state is saved: the checkpoint record in the cluster holds the
		// progress, and the next apply resumes from it. Saving state here
		// would make Terraform taint the resource and plan a replacement.
		resp.Diagnostics.AddError("Migration stopped", stopDetail(spec, err))
		return
	}
	resp.Diagnostics.Append(m.fromRecord(ctx, rec)...)
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	resp.Diagnostics.Append(r.saveSettings(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// isStop reports the phases a migration waits in for a retry or a human.
func isStop(p engine.Phase) bool {
	return p == engine.PhaseRetryable || p == engine.PhaseManualInterventionRequired || p == engine.PhaseFailed
}

// stopDetail explains an engine stop: what happened, what to do, and that
// the next apply continues from the checkpoint.
func stopDetail(spec engine.Spec, err error) string {
	var se *engine.StopError
	var held *engine.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return fmt.Sprintf("Migration %s/%s is being driven by another Terraform run: %v", spec.Namespace, spec.Name, err)
	case errors.As(err, &se):
		return fmt.Sprintf("Migration %s/%s stopped: %v\n\nProgress is kept in ConfigMap %s/vmmigration-%s; nothing done so far is lost.",
			spec.Namespace, spec.Name, err, spec.Namespace, spec.Name)
	default:
		return fmt.Sprintf("Migration %s/%s was interrupted: %v\n\nRun terraform apply again to continue from the last checkpoint (ConfigMap %s/vmmigration-%s).",
			spec.Namespace, spec.Name, err, spec.Namespace, spec.Name)
	}
}

// logEvent writes one engine event to the provider's log: phase changes,
// retries and stops at INFO (TF_LOG=INFO), byte progress per disk too.
func logEvent(ctx context.Context, ev engine.Event) {
	fields := map[string]any{"phase": string(ev.Phase)}
	switch ev.Kind {
	case engine.EventProgress:
		fields["disk"] = ev.Disk
		fields["bytes_done"] = ev.BytesDone
		fields["bytes_total"] = ev.BytesTotal
		fields["percent"] = fmt.Sprintf("%.1f", ev.Percent)
		tflog.Info(ctx, fmt.Sprintf("disk %d: %d of %d bytes (%.1f%%)", ev.Disk, ev.BytesDone, ev.BytesTotal, ev.Percent), fields)
	case engine.EventRetry:
		fields["attempt"] = ev.Attempt
		fields["backoff"] = ev.Backoff.String()
		tflog.Warn(ctx, "retrying: "+ev.Message, fields)
	case engine.EventStop:
		tflog.Warn(ctx, "stopped: "+ev.Message, fields)
	default:
		tflog.Info(ctx, string(ev.Phase)+": "+ev.Message, fields)
	}
}

func (r *migrationResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m migrationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := m.Timeouts.Delete(ctx, 30*time.Minute)
	resp.Diagnostics.Append(diags...)
	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ns, name := m.Destination.Namespace.ValueString(), m.Destination.Name.ValueString()
	policy := m.DeletePolicy.ValueString()
	res, err := eng.Forget(ctx, ns, name, engine.ForgetPolicy(policy), engine.ForgetOptions{WorkDir: r.clients.settings.WorkDir})
	for _, a := range res.Actions {
		tflog.Info(ctx, a)
	}
	if err != nil {
		resp.Diagnostics.AddError("Error deleting migration",
			fmt.Sprintf("delete_policy %q for migration %s/%s: %v", policy, ns, name, err))
	}
}

// fromRecord copies the record's evidence into the computed attributes.
func (m *migrationModel) fromRecord(ctx context.Context, rec engine.Record) diag.Diagnostics {
	m.ID = types.StringValue(rec.Identity.Namespace + "/" + rec.Identity.Name)
	m.Phase = types.StringValue(string(rec.Phase))
	m.SourceVMID = types.Int64Value(int64(rec.Identity.VMID))
	m.VMUID = types.StringValue("")
	if rec.VM != nil {
		m.VMUID = types.StringValue(rec.VM.UID)
	}
	m.PowerOff = types.StringValue("")
	if rec.PowerOff != nil {
		m.PowerOff = types.StringValue(rec.PowerOff.Action)
	}
	ts := map[string]string{}
	for k, v := range rec.Timestamps.Map() {
		ts[k] = v.UTC().Format(time.RFC3339)
	}
	var disks []diskEvidenceModel
	for _, d := range rec.Disks {
		disks = append(disks, diskEvidenceModel{
			Index:          types.Int64Value(int64(d.Index)),
			Device:         types.StringValue(d.Device),
			SourcePath:     types.StringValue(d.SourcePath),
			SizeBytes:      types.Int64Value(d.SizeBytes),
			SourceSHA256:   types.StringValue(d.SourceSHA256),
			ArtifactFormat: types.StringValue(d.ArtifactFormat),
			ArtifactSHA256: types.StringValue(d.ArtifactSHA256),
			DataVolume:     types.StringValue(d.DataVolume),
			DataVolumeUID:  types.StringValue(d.DataVolumeUID),
		})
	}
	var conds []conditionModel
	sorted := append([]engine.Condition(nil), rec.Conditions...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time.Before(sorted[j].Time) })
	for _, c := range sorted {
		status := "False"
		if c.Status {
			status = "True"
		}
		conds = append(conds, conditionModel{
			Type: types.StringValue(c.Type), Status: types.StringValue(status),
			Reason: types.StringValue(c.Reason), Message: types.StringValue(c.Message),
		})
	}
	errs := []string{}
	for _, e := range rec.Errors {
		errs = append(errs, fmt.Sprintf("%s %s attempt %d (%s): %s",
			e.Time.UTC().Format(time.RFC3339), e.Phase, e.Attempt, e.Class, e.Message))
	}
	var diags diag.Diagnostics
	var d diag.Diagnostics
	m.Timestamps, d = types.MapValueFrom(ctx, types.StringType, ts)
	diags.Append(d...)
	m.Disks, d = types.ListValueFrom(ctx, diskEvidenceType, nonNil(disks))
	diags.Append(d...)
	m.Conditions, d = types.ListValueFrom(ctx, conditionType, nonNil(conds))
	diags.Append(d...)
	m.Errors, d = types.ListValueFrom(ctx, types.StringType, errs)
	diags.Append(d...)
	return diags
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// copyComputed carries the computed attributes of state into a plan.
func (m *migrationModel) copyComputed(state migrationModel) {
	m.ID, m.Phase, m.SourceVMID, m.VMUID, m.PowerOff = state.ID, state.Phase, state.SourceVMID, state.VMUID, state.PowerOff
	m.Timestamps, m.Disks, m.Conditions, m.Errors, m.Drift = state.Timestamps, state.Disks, state.Conditions, state.Errors, state.Drift
}

func stringMap(in map[string]types.String) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v.ValueString()
	}
	return out
}

func stringList(in []types.String) []string {
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, v.ValueString())
	}
	return out
}

func sameStringMap(a, b map[string]types.String) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}

// Read re-observes the migration with engine.Observe, which changes
// nothing, and writes what it sees into the state:
//
//   - the record's evidence into the computed attributes;
//   - the VirtualMachine's run strategy into destination.run_strategy, and
//     its values of the configured labels into destination.labels, so that
//     a change made outside Terraform shows as a change in the plan;
//   - what the migration made and is gone, replaced or disowned into
//     drift, which ModifyPlan turns into a replacement;
//   - after an import, everything the record and the cluster tell about the
//     configuration (see fillImported).
//
// A source VM running again after cutover is a warning: Terraform cannot
// fix it, so it is not drift. A source VM gone from the inventory after
// cutover is normal and not reported.
func (r *migrationResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m migrationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Destination == nil {
		return
	}
	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := m.Destination.Namespace.ValueString(), m.Destination.Name.ValueString()
	ctx = tflog.SetField(ctx, "migration", ns+"/"+name)
	obs, err := eng.Observe(ctx, ns, name)
	if err != nil {
		resp.Diagnostics.AddError("Error reading migration",
			fmt.Sprintf("Observing migration %s/%s (its record ConfigMap %s, VirtualMachine and DataVolumes) failed: %v", ns, name, engine.RecordName(name), err))
		return
	}
	if obs.Record == nil {
		resp.Diagnostics.AddWarning("Migration record gone",
			fmt.Sprintf("The checkpoint record of migration %s/%s (ConfigMap %s) no longer exists; the migration is removed from the state. "+
				"Import it again with `terraform import` if the migrated VM still exists.", ns, name, engine.RecordName(name)))
		resp.State.RemoveResource(ctx)
		return
	}
	rec := *obs.Record
	resp.Diagnostics.Append(m.fromRecord(ctx, rec)...)
	if m.Source == nil {
		m.Source = &sourceModel{Host: types.StringValue(rec.Identity.Host), VMName: types.StringValue(rec.Identity.VMName), VMID: types.Int64Null()}
		if rec.Identity.VMName == "" {
			m.Source.VMName, m.Source.VMID = types.StringNull(), types.Int64Value(int64(rec.Identity.VMID))
		}
	}
	var vm *kubevirtv1.VirtualMachine
	if obs.VM.Exists && obs.VM.Ours {
		vm, err = r.clients.kube.GetVirtualMachine(ctx, ns, name)
		if err != nil && !kube.IsNotFound(err) {
			resp.Diagnostics.AddError("Error reading migration", fmt.Sprintf("Reading VirtualMachine %s/%s failed: %v", ns, name, err))
			return
		}
		if kube.IsNotFound(err) {
			vm = nil
		}
	}
	if m.Destination.StorageClass.IsNull() {
		resp.Diagnostics.Append(r.fillImported(ctx, &m, rec, vm)...)
	}
	if vm != nil && rec.Phase == engine.PhaseCompleted {
		m.Destination.RunStrategy = types.StringValue(obs.VM.RunStrategy)
		if m.Destination.Labels != nil {
			observed := map[string]types.String{}
			for k := range m.Destination.Labels {
				if v, ok := vm.Labels[k]; ok {
					observed[k] = types.StringValue(v)
				}
			}
			m.Destination.Labels = observed
		}
	}
	drift := r.driftOf(ctx, obs)
	m.Drift, diags = types.ListValueFrom(ctx, types.StringType, drift)
	resp.Diagnostics.Append(diags...)
	if len(drift) > 0 {
		resp.Diagnostics.AddWarning("Migration drifted",
			fmt.Sprintf("What migration %s/%s made has changed outside Terraform:\n  - %s\n\n"+
				"The plan replaces the migration: applying it forgets this record (delete_policy %q) and migrates the source VM %q from host %s again into %s/%s. "+
				"To keep things as they are instead, remove the resource from the state (`terraform state rm`).",
				ns, name, strings.Join(drift, "\n  - "), m.DeletePolicy.ValueString(), rec.Identity.VMName, rec.Identity.Host, ns, name))
	}
	if msg := sourceRunningAgain(rec, obs); msg != "" {
		resp.Diagnostics.AddWarning("Source VM running again after cutover", msg)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// driftOf lists what the migration made that is gone, replaced or no
// longer labelled as the migration's. Unlike Observation.Drift it leaves
// out the run strategy, which Read reports through destination.run_strategy
// (an in-place update changes it without updating the record).
func (r *migrationResource) driftOf(ctx context.Context, obs engine.Observation) []string {
	rec := obs.Record
	ns := rec.Identity.Namespace
	out := []string{}
	if rec.VM != nil && rec.VM.UID != "" {
		switch {
		case !obs.VM.Exists:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s is gone", ns, rec.VM.Name))
		case obs.VM.UID != rec.VM.UID:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s was replaced by another object (UID %s; the migration made %s)", ns, rec.VM.Name, obs.VM.UID, rec.VM.UID))
		case !obs.VM.Ours:
			out = append(out, fmt.Sprintf("VirtualMachine %s/%s no longer carries the label %s=%s", ns, rec.VM.Name, kube.LabelMigration, rec.Identity.Name))
		}
	}
	for _, d := range rec.Disks {
		if !d.Imported {
			continue
		}
		for _, dv := range obs.DataVolumes {
			if dv.Name != d.DataVolume {
				continue
			}
			switch {
			case !dv.Exists && !r.claimExists(ctx, ns, dv.Name):
				out = append(out, fmt.Sprintf("DataVolume %s/%s and its PersistentVolumeClaim are gone", ns, dv.Name))
			case dv.Exists && !dv.Ours:
				out = append(out, fmt.Sprintf("DataVolume %s/%s no longer carries the label %s=%s", ns, dv.Name, kube.LabelMigration, rec.Identity.Name))
			}
		}
	}
	return out
}

// claimExists reports whether the PersistentVolumeClaim of a DataVolume
// remains: CDI may garbage-collect a completed DataVolume and keep its
// claim, which is not drift.
func (r *migrationResource) claimExists(ctx context.Context, ns, name string) bool {
	cl, err := r.clients.kube.Raw()
	if err != nil {
		return false
	}
	pvc := &corev1.PersistentVolumeClaim{}
	err = cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc)
	return err == nil && pvc.DeletionTimestamp == nil
}

// sourceRunningAgain explains a source VM that runs again after the
// destination VM started, or returns "".
func sourceRunningAgain(rec engine.Record, obs engine.Observation) string {
	po := rec.PowerOff
	if po == nil || !po.Done || rec.Timestamps.VMStarted == nil || !obs.Source.Exists || obs.Source.PowerState == string(esxi.PoweredOff) {
		return ""
	}
	return fmt.Sprintf("The source VM %q (vmid %d) on ESXi host %s is %s again, and its migrated copy %s/%s started at %s: "+
		"two servers with one identity (the same MAC addresses, IP addresses and host name) may now be on the network. "+
		"Power one of them off now. Terraform will not do it for you: it cannot know which one you mean to keep.",
		rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host, obs.Source.PowerState,
		rec.Identity.Namespace, rec.Identity.Name, rec.Timestamps.VMStarted.UTC().Format(time.RFC3339))
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

func (r *migrationResource) planCreate(ctx context.Context, plan *migrationModel, resp *resource.ModifyPlanResponse) {
	plan.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	if plan.Transport == nil {
		resp.Diagnostics.AddAttributeError(path.Root("transport"), "Missing transport",
			"Say how disk images reach CDI: set transport.upload_proxy_url to the URL of CDI's upload proxy "+
				"(see `kubectl get cdiconfig config -o jsonpath='{.status.uploadProxyURL}'`), or "+
				"transport.http_staging_dir and transport.http_staging_url for a staging location that your HTTP server serves. "+
				"(Only a migration that is imported, and so copies nothing, may leave transport out.)")
		return
	}
	if r.clients == nil {
		return
	}
	src, dst := plan.Source, plan.Destination
	known := !src.Host.IsUnknown() && !src.VMName.IsUnknown() && !src.VMID.IsUnknown() &&
		!dst.Namespace.IsUnknown() && !dst.Name.IsUnknown() && !dst.StorageClass.IsUnknown() && !plan.PowerOffPolicy.IsUnknown()
	for _, v := range dst.NetworkMap {
		known = known && !v.IsUnknown()
	}
	if !known {
		tflog.Debug(ctx, "pre-flight checks skipped at plan time: the configuration has unknown values")
		return
	}
	ns, name, host := dst.Namespace.ValueString(), dst.Name.ValueString(), src.Host.ValueString()
	ctx = tflog.SetField(ctx, "migration", ns+"/"+name)
	eng, diags := r.clients.engine()
	if diags.HasError() {
		return
	}
	// An earlier apply may have started this migration: the record then
	// knows the disks, and the checks already ran before the power-off.
	// A record of another source is that of a migration this one replaces
	// (forgotten before this one starts), or a conflict apply reports.
	rec, err := eng.Load(ctx, ns, name)
	if err == nil && sameIdentity(rec.Identity, src) {
		// Plan the disks from the record only once they are settled: before
		// Discovering finished there are none, and a stopped migration
		// re-reads the inventory when it resumes (a human may have changed
		// the source while fixing the cause), so they stay unknown.
		if rec.Source != nil && !isStop(rec.Phase) {
			resp.Diagnostics.Append(plan.planDisks(rec.Disks)...)
		}
		tflog.Info(ctx, "planned migration resumes from its record", map[string]any{"phase": string(rec.Phase)})
		return
	}
	if err != nil && !engine.IsNotFound(err) {
		resp.Diagnostics.AddWarning("Pre-flight checks not run",
			fmt.Sprintf("The record of migration %s/%s could not be read at plan time (%v); apply runs the checks before it touches anything.", ns, name, err))
		return
	}
	if _, diags := r.clients.esxiClient(host); diags.HasError() {
		for _, d := range diags {
			resp.Diagnostics.AddAttributeError(path.Root("source").AtName("host"), d.Summary(), d.Detail())
		}
		return
	}
	vms, _, diags := r.clients.inventory(ctx, host)
	if diags.HasError() {
		resp.Diagnostics.AddWarning("Pre-flight checks not run",
			fmt.Sprintf("The inventory of ESXi host %q could not be read at plan time, so the checks of migration %s/%s run at apply time, before anything is touched: %s",
				host, ns, name, diags[0].Detail()))
		return
	}
	vm, err := pickVM(vms, host, src.VMName.ValueString(), int(src.VMID.ValueInt64()))
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("source"), "Source VM not found", err.Error())
		return
	}
	dest := preflight.Destination{Namespace: ns, Name: name, StorageClass: dst.StorageClass.ValueString(),
		NetworkMap: stringMap(dst.NetworkMap), PowerOffPolicy: plan.PowerOffPolicy.ValueString(), Owner: name}
	if dest.NetworkMap == nil {
		dest.NetworkMap = map[string]string{}
	}
	cluster, diags := r.clients.destination(ctx)
	if diags.HasError() {
		return
	}
	res, err := preflight.Run(ctx, vm, dest, cluster)
	if err != nil {
		resp.Diagnostics.AddWarning("Pre-flight checks not run",
			fmt.Sprintf("The destination cluster could not be queried at plan time for migration %s/%s (%v); apply runs the checks before it touches anything.", ns, name, err))
	} else {
		for _, c := range res.Failed(preflight.Blocker) {
			resp.Diagnostics.AddAttributeError(path.Root("source"), "Migration blocked by pre-flight check "+c.ID,
				fmt.Sprintf("Migrating VM %q (vmid %d) on host %s to %s/%s would stop at this check, before anything is touched: %s",
					vm.Name, vm.VMID, host, ns, name, c.Message))
		}
		for _, c := range res.Failed(preflight.Warning) {
			resp.Diagnostics.AddAttributeWarning(path.Root("source"), "Pre-flight warning "+c.ID,
				fmt.Sprintf("Migration of VM %q (vmid %d) on host %s to %s/%s: %s", vm.Name, vm.VMID, host, ns, name, c.Message))
		}
	}
	plan.SourceVMID = types.Int64Value(int64(vm.VMID))
	var disks []engine.DiskEvidence
	for i, d := range vm.Disks {
		disks = append(disks, engine.DiskEvidence{Index: i, Device: d.Device, SourcePath: d.DataPath, SizeBytes: d.CapacityBytes,
			DataVolume: preflight.DiskName(name, i)})
	}
	resp.Diagnostics.Append(plan.planDisks(disks)...)
}

// sameIdentity reports whether a record migrates the source a
// configuration names.
func sameIdentity(id engine.Identity, src *sourceModel) bool {
	if id.Host != src.Host.ValueString() {
		return false
	}
	if !src.VMID.IsNull() {
		return int64(id.VMID) == src.VMID.ValueInt64()
	}
	return id.VMName == src.VMName.ValueString()
}

// planDisks plans the disks a Create will record: what is copied from
// where to which DataVolume is known, the checksums and UIDs are not.
// Create writes the same values from the record, which Discovering fills
// from the same inventory.
func (m *migrationModel) planDisks(disks []engine.DiskEvidence) diag.Diagnostics {
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
			"artifact_sha256": types.StringUnknown(),
			"data_volume":     types.StringValue(d.DataVolume),
			"data_volume_uid": types.StringUnknown(),
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
		{"target_format", state.TargetFormat, plan.TargetFormat},
	} {
		if !f.b.IsUnknown() && !f.a.Equal(f.b) {
			out = append(out, f.name)
		}
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
// VirtualMachine running beside, or underneath, the new migration.
//
// With delete_policy keep, destroying the old migration leaves its
// VirtualMachine and DataVolumes, labelled as the migration of that name.
// A new migration to the same destination would adopt them as its own
// (it would find "its" DataVolumes Succeeded and not import the source
// again, so a new storage_class or target_format would silently not take
// effect); one to another destination would boot a second copy of the
// server with the same MAC addresses next to the first.
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
	if err != nil || !obs.VM.Exists || !obs.VM.Ours {
		return
	}
	sameDest := plan.Destination.Namespace.Equal(state.Destination.Namespace) && plan.Destination.Name.Equal(state.Destination.Name)
	ways := fmt.Sprintf("To replace it, first set delete_policy = \"delete_destination\" and apply (an in-place change), then apply this change: the old VM and its DataVolumes are then deleted before the new migration starts. "+
		"To keep the old VM instead, stop managing it: `terraform state rm` this resource, and rename or delete VirtualMachine %s/%s yourself before applying.", ns, name)
	if sameDest {
		resp.Diagnostics.AddError("Replacement would adopt the old VM",
			fmt.Sprintf("Changing %s replaces migration %s/%s, and its delete_policy \"keep\" leaves VirtualMachine %s/%s and its DataVolumes in place, labelled as this migration's. "+
				"The new migration to the same destination would adopt them instead of migrating the source again, so the change would not take effect.\n\n%s",
				strings.Join(changed, ", "), ns, name, ns, name, ways))
		return
	}
	if obs.VM.RunStrategy == "Halted" && obs.VM.VMIPhase == "" {
		resp.Diagnostics.AddWarning("Old VM kept",
			fmt.Sprintf("Replacing migration %s/%s leaves its halted VirtualMachine %s/%s (delete_policy \"keep\"). Do not start it while the new one runs: both carry the same MAC addresses.", ns, name, ns, name))
		return
	}
	resp.Diagnostics.AddError("Replacement would run two copies of the VM",
		fmt.Sprintf("Changing %s replaces migration %s/%s, and its delete_policy \"keep\" leaves VirtualMachine %s/%s running. "+
			"The new migration would start a second copy of the same server, with the same MAC addresses, in %s/%s.\n\n%s",
			strings.Join(changed, ", "), ns, name, ns, name, plan.Destination.Namespace.ValueString(), plan.Destination.Name.ValueString(), ways))
}

// Update changes what can change in place: the VirtualMachine's run
// strategy and labels. validation, retry, delete_policy, timeouts and the
// other settings only matter to later operations; they are stored in the
// state and in the record's settings annotation (for import).
func (r *migrationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state migrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := plan.Destination.Namespace.ValueString(), plan.Destination.Name.ValueString()
	ctx = tflog.SetField(ctx, "migration", ns+"/"+name)
	if plan.Destination.RunStrategy.ValueString() != state.Destination.RunStrategy.ValueString() ||
		!sameStringMap(plan.Destination.Labels, state.Destination.Labels) {
		err := r.clients.kube.UpdateVirtualMachineRunStrategyAndLabels(ctx, ns, name,
			plan.Destination.RunStrategy.ValueString(), stringMap(state.Destination.Labels), stringMap(plan.Destination.Labels))
		if err != nil {
			resp.Diagnostics.AddError("Error updating migrated VM",
				fmt.Sprintf("Setting the run strategy and labels of VirtualMachine %s/%s failed: %v", ns, name, err))
			return
		}
		tflog.Info(ctx, "updated the migrated VM", map[string]any{"run_strategy": plan.Destination.RunStrategy.ValueString()})
	}
	plan.copyComputed(state)
	resp.Diagnostics.Append(r.saveSettings(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// ImportState takes <namespace>/<name> of the destination VM. Read then
// fills the rest from the migration's record and the cluster. A VM migrated
// without this provider has no record: adopt matches it to its source and
// writes one.
func (r *migrationResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, name, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("Import a migration by its destination as <namespace>/<name>, for example apps/web-01; got %q.", req.ID))
		return
	}
	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := eng.Load(ctx, ns, name)
	switch {
	case engine.IsNotFound(err):
		resp.Diagnostics.Append(r.adopt(ctx, eng, ns, name)...)
		if resp.Diagnostics.HasError() {
			return
		}
	case err != nil:
		resp.Diagnostics.AddError("Error importing migration", fmt.Sprintf("Reading the record of migration %s/%s failed: %v", ns, name, err))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("destination"), &destModel{
		Namespace: types.StringValue(ns), Name: types.StringValue(name),
	})...)
}

// fillImported fills, after an import, the configuration the record and
// the cluster show: the DataVolumes' storage class, access and volume
// mode, the VM's disk bus, run strategy, networks and labels, the image
// format and power-off policy of the record, and the settings the provider
// saved on the record (transport, validation, retry, shutdown_timeout,
// delete_policy). What none of them tells takes its default.
func (r *migrationResource) fillImported(ctx context.Context, m *migrationModel, rec engine.Record, vm *kubevirtv1.VirtualMachine) diag.Diagnostics {
	var diags diag.Diagnostics
	d := m.Destination
	ns := d.Namespace.ValueString()
	d.StorageClass = types.StringValue("")
	d.AccessMode, d.VolumeMode = types.StringValue(engine.DefaultAccessMode), types.StringValue(engine.DefaultVolumeMode)
	d.DiskBus, d.RunStrategy = types.StringValue(engine.DefaultDiskBus), types.StringValue(engine.DefaultRunStrategy)
	if len(rec.Disks) > 0 {
		sc, am, mode := r.claimSettings(ctx, ns, rec.Disks[0].DataVolume)
		if sc != nil {
			d.StorageClass = types.StringValue(*sc)
		}
		if len(am) > 0 {
			d.AccessMode = types.StringValue(string(am[0]))
		}
		if mode != nil {
			d.VolumeMode = types.StringValue(string(*mode))
		}
	}
	if vm != nil {
		if vm.Spec.RunStrategy != nil {
			d.RunStrategy = types.StringValue(string(*vm.Spec.RunStrategy))
		}
		if t := vm.Spec.Template; t != nil {
			if ds := t.Spec.Domain.Devices.Disks; len(ds) > 0 && ds[0].Disk != nil && ds[0].Disk.Bus != "" {
				d.DiskBus = types.StringValue(string(ds[0].Disk.Bus))
			}
			if rec.Source != nil && len(t.Spec.Networks) > 0 {
				nm := map[string]types.String{}
				for i, n := range t.Spec.Networks {
					nic := sourceNICOf(rec.Source.NICs, t.Spec.Domain.Devices.Interfaces, n.Name, i)
					if nic == nil {
						continue
					}
					switch {
					case n.Pod != nil:
						nm[nic.Network] = types.StringValue(preflight.PodNetwork)
					case n.Multus != nil:
						nm[nic.Network] = types.StringValue(n.Multus.NetworkName)
					}
				}
				d.NetworkMap = nm
			}
		}
		labels := map[string]types.String{}
		for k, v := range vm.Labels {
			if k != kube.LabelMigration && k != kube.LabelManagedBy {
				labels[k] = types.StringValue(v)
			}
		}
		if len(labels) > 0 {
			d.Labels = labels
		}
	}
	m.TargetFormat = types.StringValue(engine.DefaultTargetFormat)
	if len(rec.Disks) > 0 && rec.Disks[0].ArtifactFormat != "" {
		m.TargetFormat = types.StringValue(rec.Disks[0].ArtifactFormat)
	}
	m.PowerOffPolicy = types.StringValue(engine.DefaultPowerOffPolicy)
	if rec.PowerOff != nil && rec.PowerOff.Policy != "" {
		m.PowerOffPolicy = types.StringValue(rec.PowerOff.Policy)
	}
	m.ShutdownTO = types.StringValue("5m")
	m.DeletePolicy = types.StringValue(string(engine.ForgetKeep))
	s, err := r.loadSettings(ctx, ns, d.Name.ValueString())
	if err != nil {
		diags.AddWarning("Import incomplete", fmt.Sprintf("The settings saved with migration %s/%s could not be read (%v): transport, validation and retry are left empty and show as changes in the next plan.", ns, d.Name.ValueString(), err))
		return diags
	}
	if s != nil {
		s.apply(m)
	}
	return diags
}

// sourceNICOf is the source NIC behind the VM's network named network (the
// i-th): the one whose MAC address its interface carries, else the i-th
// (the provider renders them in order; a VM made by another tool may not).
func sourceNICOf(nics []engine.SourceNIC, ifaces []kubevirtv1.Interface, network string, i int) *engine.SourceNIC {
	for _, iface := range ifaces {
		if iface.Name != network || iface.MacAddress == "" {
			continue
		}
		for j := range nics {
			if strings.EqualFold(nics[j].MAC, iface.MacAddress) {
				return &nics[j]
			}
		}
	}
	if i < len(nics) {
		return &nics[i]
	}
	return nil
}

// claimSettings reads the storage class, access modes and volume mode of a
// disk: from its DataVolume's spec.storage or spec.pvc, else (the
// DataVolume garbage-collected, or a bare claim) from the claim.
func (r *migrationResource) claimSettings(ctx context.Context, ns, name string) (*string, []corev1.PersistentVolumeAccessMode, *corev1.PersistentVolumeMode) {
	if dv, err := r.clients.kube.GetDataVolume(ctx, ns, name); err == nil {
		if st := dv.Spec.Storage; st != nil {
			return st.StorageClassName, st.AccessModes, st.VolumeMode
		}
		if p := dv.Spec.PVC; p != nil {
			return p.StorageClassName, p.AccessModes, p.VolumeMode
		}
	}
	cl, err := r.clients.kube.Raw()
	if err != nil {
		return nil, nil, nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pvc); err != nil {
		return nil, nil, nil
	}
	return pvc.Spec.StorageClassName, pvc.Spec.AccessModes, pvc.Spec.VolumeMode
}

// annotationSettings on the record's ConfigMap holds the settings of the
// configuration that neither the record nor the cluster show, so that an
// import reproduces them and a plan with the same configuration is empty.
// They hold no secrets (the upload proxy's CA certificate is public).
const annotationSettings = "vmmigration.io/terraform-settings"

type savedSettings struct {
	PowerOffPolicy  *string          `json:"powerOffPolicy,omitempty"`
	ShutdownTimeout *string          `json:"shutdownTimeout,omitempty"`
	DeletePolicy    *string          `json:"deletePolicy,omitempty"`
	Transport       *savedTransport  `json:"transport,omitempty"`
	Validation      *savedValidation `json:"validation,omitempty"`
	Retry           *savedRetry      `json:"retry,omitempty"`
}

type savedTransport struct {
	UploadProxyURL *string `json:"uploadProxyURL,omitempty"`
	UploadProxyCA  *string `json:"uploadProxyCA,omitempty"`
	Insecure       *bool   `json:"insecure,omitempty"`
	StagingDir     *string `json:"stagingDir,omitempty"`
	StagingURL     *string `json:"stagingURL,omitempty"`
}

type savedValidation struct {
	GuestAgent *bool     `json:"guestAgent,omitempty"`
	IPReported *bool     `json:"ipReported,omitempty"`
	TCP        *[]string `json:"tcp,omitempty"`
	HTTP       *[]string `json:"http,omitempty"`
	Timeout    *string   `json:"timeout,omitempty"`
}

type savedRetry struct {
	Attempts       *int64  `json:"attempts,omitempty"`
	InitialBackoff *string `json:"initialBackoff,omitempty"`
	MaxBackoff     *string `json:"maxBackoff,omitempty"`
}

func strPtr(v types.String) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueString()
	return &s
}

func ptrStr(p *string) types.String {
	if p == nil {
		return types.StringNull()
	}
	return types.StringValue(*p)
}

func boolPtr(v types.Bool) *bool {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	b := v.ValueBool()
	return &b
}

func ptrBool(p *bool) types.Bool {
	if p == nil {
		return types.BoolNull()
	}
	return types.BoolValue(*p)
}

func listPtr(in []types.String) *[]string {
	if in == nil {
		return nil
	}
	out := stringList(in)
	return &out
}

func ptrList(p *[]string) []types.String {
	if p == nil {
		return nil
	}
	out := make([]types.String, 0, len(*p))
	for _, s := range *p {
		out = append(out, types.StringValue(s))
	}
	return out
}

func settingsOf(m *migrationModel) savedSettings {
	s := savedSettings{PowerOffPolicy: strPtr(m.PowerOffPolicy), ShutdownTimeout: strPtr(m.ShutdownTO), DeletePolicy: strPtr(m.DeletePolicy)}
	if t := m.Transport; t != nil {
		s.Transport = &savedTransport{UploadProxyURL: strPtr(t.UploadProxyURL), UploadProxyCA: strPtr(t.UploadProxyCA),
			Insecure: boolPtr(t.Insecure), StagingDir: strPtr(t.StagingDir), StagingURL: strPtr(t.StagingURL)}
	}
	if v := m.Validation; v != nil {
		s.Validation = &savedValidation{GuestAgent: boolPtr(v.GuestAgent), IPReported: boolPtr(v.IPReported),
			TCP: listPtr(v.TCP), HTTP: listPtr(v.HTTP), Timeout: strPtr(v.Timeout)}
	}
	if rt := m.Retry; rt != nil {
		s.Retry = &savedRetry{InitialBackoff: strPtr(rt.InitialBackoff), MaxBackoff: strPtr(rt.MaxBackoff)}
		if !rt.Attempts.IsNull() && !rt.Attempts.IsUnknown() {
			a := rt.Attempts.ValueInt64()
			s.Retry.Attempts = &a
		}
	}
	return s
}

func (s *savedSettings) apply(m *migrationModel) {
	if s.PowerOffPolicy != nil {
		m.PowerOffPolicy = ptrStr(s.PowerOffPolicy)
	}
	if s.ShutdownTimeout != nil {
		m.ShutdownTO = ptrStr(s.ShutdownTimeout)
	}
	if s.DeletePolicy != nil {
		m.DeletePolicy = ptrStr(s.DeletePolicy)
	}
	if t := s.Transport; t != nil {
		m.Transport = &transportModel{UploadProxyURL: ptrStr(t.UploadProxyURL), UploadProxyCA: ptrStr(t.UploadProxyCA),
			Insecure: ptrBool(t.Insecure), StagingDir: ptrStr(t.StagingDir), StagingURL: ptrStr(t.StagingURL)}
	}
	if v := s.Validation; v != nil {
		m.Validation = &validateModel{GuestAgent: ptrBool(v.GuestAgent), IPReported: ptrBool(v.IPReported),
			TCP: ptrList(v.TCP), HTTP: ptrList(v.HTTP), Timeout: ptrStr(v.Timeout)}
	}
	if rt := s.Retry; rt != nil {
		m.Retry = &retryModel{Attempts: types.Int64Null(), InitialBackoff: ptrStr(rt.InitialBackoff), MaxBackoff: ptrStr(rt.MaxBackoff)}
		if rt.Attempts != nil {
			m.Retry.Attempts = types.Int64Value(*rt.Attempts)
		}
	}
}

// saveSettings writes the settings annotation on the record's ConfigMap
// (a merge patch of that one annotation). Failing to is a warning: only a
// later import misses them.
func (r *migrationResource) saveSettings(ctx context.Context, m *migrationModel) diag.Diagnostics {
	var diags diag.Diagnostics
	ns, name := m.Destination.Namespace.ValueString(), m.Destination.Name.ValueString()
	fail := func(err error) diag.Diagnostics {
		diags.AddWarning("Settings not saved",
			fmt.Sprintf("The settings of migration %s/%s could not be saved on its record ConfigMap %s (%v). The migration is not affected; "+
				"an import of it would show transport, validation and retry as changes.", ns, name, engine.RecordName(name), err))
		return diags
	}
	b, err := json.Marshal(settingsOf(m))
	if err != nil {
		return fail(err)
	}
	cl, err := r.clients.kube.Raw()
	if err != nil {
		return fail(err)
	}
	cm := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: engine.RecordName(name)}, cm); err != nil {
		return fail(err)
	}
	if cm.Annotations[annotationSettings] == string(b) {
		return diags
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[annotationSettings] = string(b)
	if err := cl.Patch(ctx, cm, patch); err != nil {
		return fail(err)
	}
	return diags
}

// loadSettings reads the settings annotation; nil when there is none.
func (r *migrationResource) loadSettings(ctx context.Context, ns, name string) (*savedSettings, error) {
	cl, err := r.clients.kube.Raw()
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: engine.RecordName(name)}, cm); err != nil {
		return nil, err
	}
	v, ok := cm.Annotations[annotationSettings]
	if !ok {
		return nil, nil
	}
	var s savedSettings
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", annotationSettings, err)
	}
	return &s, nil
}

// adopt records a VirtualMachine migrated without this provider (it has
// no record) as a Completed migration of the source VM it matches on one
// of the configured hosts (engine.Adopt), and says in a warning what
// matched and what was written: the record and the migration label on the
// VirtualMachine and its DataVolumes. With an import block this happens
// while Terraform plans.
func (r *migrationResource) adopt(ctx context.Context, eng *engine.Engine, ns, name string) diag.Diagnostics {
	var diags diag.Diagnostics
	hosts := r.clients.esxi.Names()
	rec, rep, err := eng.Adopt(ctx, ns, name, hosts)
	if err != nil {
		diags.AddError("Cannot import migration",
			fmt.Sprintf("Adopting VirtualMachine %s/%s as a migration failed: %v", ns, name, err))
		return diags
	}
	m := rep.Match
	tflog.Info(ctx, "adopted a VM migrated by other means", map[string]any{"esxi_host": m.Host, "vmid": m.VMID, "matched": m.Matched()})
	var b strings.Builder
	fmt.Fprintf(&b, "VirtualMachine %s/%s had no migration record. It was %s to the source VM %q (vmid %d) on ESXi host %s, "+
		"and recorded as a Completed migration in ConfigMap %s/%s.",
		ns, name, m.Matched(), rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host, ns, engine.RecordName(name))
	if len(rep.Labelled) > 0 {
		fmt.Fprintf(&b, "\n\nLabelled %s=%s so that they count as this migration's: %s.", kube.LabelMigration, name, strings.Join(rep.Labelled, ", "))
	}
	for _, n := range rep.Notes {
		b.WriteString("\n\nNote: " + n + ".")
	}
	if len(rep.Others) > 0 {
		b.WriteString("\n\nOther candidates, not adopted:")
		for _, o := range rep.Others {
			b.WriteString("\n  - " + o.String())
		}
	}
	b.WriteString("\n\nIf this is not the VM's source, remove the resource from the state, delete that ConfigMap and import again once the wrong candidate is gone.")
	diags.AddWarning("Migration adopted", b.String())
	return diags
}
