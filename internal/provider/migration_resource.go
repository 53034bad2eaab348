package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
)

var (
	_ resource.Resource                   = (*migrationResource)(nil)
	_ resource.ResourceWithConfigure      = (*migrationResource)(nil)
	_ resource.ResourceWithImportState    = (*migrationResource)(nil)
	_ resource.ResourceWithValidateConfig = (*migrationResource)(nil)
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
	switch {
	case transport.IsUnknown():
	case transport.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("transport"), "Missing transport",
			"Say how disk images reach CDI: set transport.upload_proxy_url to the URL of CDI's upload proxy "+
				"(see `kubectl get cdiconfig config -o jsonpath='{.status.uploadProxyURL}'`), or "+
				"transport.http_staging_dir and transport.http_staging_url for a staging location that your HTTP server serves.")
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
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
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

func (r *migrationResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m migrationModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Destination == nil {
		return
	}
	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := m.Destination.Namespace.ValueString(), m.Destination.Name.ValueString()
	rec, err := eng.Load(ctx, ns, name)
	if err != nil {
		if engine.IsNotFound(err) {
			resp.Diagnostics.AddWarning("Migration record gone",
				fmt.Sprintf("The checkpoint record of migration %s/%s (ConfigMap vmmigration-%s) no longer exists; the migration is removed from the state. "+
					"Import it again with `terraform import` if the migrated VM still exists.", ns, name, name))
			resp.State.RemoveResource(ctx)
			return
		}
		resp.Diagnostics.AddError("Error reading migration", fmt.Sprintf("Reading the checkpoint record of %s/%s failed: %v", ns, name, err))
		return
	}
	resp.Diagnostics.Append(m.fromRecord(ctx, rec)...)
	if m.Source == nil {
		m.Source = &sourceModel{Host: types.StringValue(rec.Identity.Host), VMName: types.StringValue(rec.Identity.VMName), VMID: types.Int64Null()}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *migrationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state migrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := plan.Destination.Namespace.ValueString(), plan.Destination.Name.ValueString()
	if plan.Destination.RunStrategy.ValueString() != state.Destination.RunStrategy.ValueString() ||
		!sameStringMap(plan.Destination.Labels, state.Destination.Labels) {
		err := r.clients.kube.UpdateVirtualMachineRunStrategyAndLabels(ctx, ns, name,
			plan.Destination.RunStrategy.ValueString(), stringMap(state.Destination.Labels), stringMap(plan.Destination.Labels))
		if err != nil {
			resp.Diagnostics.AddError("Error updating migrated VM",
				fmt.Sprintf("Setting the run strategy and labels of VirtualMachine %s/%s failed: %v", ns, name, err))
			return
		}
	}
	// Everything else that may change in place (validation, retry,
	// delete_policy, timeouts) only matters for later operations.
	plan.copyComputed(state)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
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

func (r *migrationResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, name, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid import ID",
			fmt.Sprintf("Import a migration by its destination as <namespace>/<name>, for example apps/web-01; got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("destination"), &destModel{
		Namespace: types.StringValue(ns), Name: types.StringValue(name),
	})...)
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
	m.Timestamps, m.Disks, m.Conditions, m.Errors = state.Timestamps, state.Disks, state.Conditions, state.Errors
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
