package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
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
	eng.ForgetInventory(spec.Host)
	if err != nil {
		// No state is saved: the checkpoint record in the cluster holds the
		// progress, and the next apply resumes from it. Saving state here
		// would make Terraform taint the resource and plan a replacement.
		var se *engine.StopError
		if errors.As(err, &se) && se.Field != "" {
			resp.Diagnostics.AddAttributeError(attributePath(se.Field), "Migration stopped", stopDetail(spec, err))
		} else {
			resp.Diagnostics.AddError("Migration stopped", stopDetail(spec, err))
		}
		return
	}
	resp.Diagnostics.Append(m.fromRecord(ctx, rec)...)
	m.Drift = types.ListValueMust(types.StringType, []attr.Value{})
	resp.Diagnostics.Append(r.saveSettings(ctx, eng, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// stopDetail explains an engine stop: what happened, what to do, and that
// the next apply continues from the checkpoint.
func stopDetail(spec engine.Spec, err error) string {
	var se *engine.StopError
	var held *coord.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return fmt.Sprintf("Migration %s/%s is being driven by another Terraform run: %v", spec.Namespace, spec.Name, err)
	case errors.As(err, &se):
		return fmt.Sprintf("Migration %s/%s stopped: %v\n\nProgress is kept in ConfigMap %s/%s; nothing done so far is lost.",
			spec.Namespace, spec.Name, err, spec.Namespace, coord.RecordName(spec.Name))
	default:
		return fmt.Sprintf("Migration %s/%s was interrupted: %v\n\nRun terraform apply again to continue from the last checkpoint (ConfigMap %s/%s).",
			spec.Namespace, spec.Name, err, spec.Namespace, coord.RecordName(spec.Name))
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
		msg := fmt.Sprintf("disk %d: %d of %d bytes (%.1f%%)", ev.Disk, ev.BytesDone, ev.BytesTotal, ev.Percent)
		if rate := ev.RateText(); rate != "" {
			fields["bytes_per_second"] = int64(ev.BytesPerSecond)
			fields["eta_seconds"] = int64(ev.ETA.Seconds())
			msg += " at " + rate
		}
		tflog.Info(ctx, msg, fields)
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

// Read re-observes the migration with engine.Observe, which changes
// nothing, and writes what it sees into the state:
//
//   - the record's evidence into the computed attributes;
//   - the VirtualMachine's run strategy into destination.run_strategy, and
//     its values of the configured labels into destination.labels, so that
//     a change made outside Terraform shows as a change in the plan;
//   - the engine's drift (what the migration made and is gone, replaced or
//     disowned) into drift, which ModifyPlan turns into a replacement;
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
			fmt.Sprintf("Observing migration %s/%s (its record ConfigMap %s, VirtualMachine and DataVolumes) failed: %v", ns, name, coord.RecordName(name), err))
		return
	}
	if obs.Record == nil {
		resp.Diagnostics.AddWarning("Migration record gone",
			fmt.Sprintf("The checkpoint record of migration %s/%s (ConfigMap %s) no longer exists; the migration is removed from the state. "+
				"Import it again with `terraform import` if the migrated VM still exists.", ns, name, coord.RecordName(name)))
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
	if m.Destination.StorageClass.IsNull() {
		resp.Diagnostics.Append(fillImported(&m, obs)...)
	}
	if vm := obs.VM; vm.Exists && vm.Ours && rec.Phase == record.PhaseCompleted {
		m.Destination.RunStrategy = types.StringValue(vm.RunStrategy)
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
	m.Drift, diags = types.ListValueFrom(ctx, types.StringType, obs.Drift)
	resp.Diagnostics.Append(diags...)
	if len(obs.Drift) > 0 {
		resp.Diagnostics.AddWarning("Migration drifted",
			fmt.Sprintf("What migration %s/%s made has changed outside Terraform:\n  - %s\n\n"+
				"The plan replaces the migration: applying it forgets this record (delete_policy %q) and migrates the source VM %q from host %s again into %s/%s. "+
				"To keep things as they are instead, remove the resource from the state (`terraform state rm`).",
				ns, name, strings.Join(obs.Drift, "\n  - "), m.DeletePolicy.ValueString(), rec.Identity.VMName, rec.Identity.Host, ns, name))
	}
	if obs.SourceRunningAgain != "" {
		resp.Diagnostics.AddWarning("Source VM running again after cutover", obs.SourceRunningAgain)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Update changes what can change in place: the VirtualMachine's run
// strategy and labels. validation, retry, delete_policy, timeouts and the
// other settings only matter to later operations; they are stored in the
// state and with the record (for import).
func (r *migrationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state migrationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	eng, diags := r.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns, name := plan.Destination.Namespace.ValueString(), plan.Destination.Name.ValueString()
	ctx = tflog.SetField(ctx, "migration", ns+"/"+name)
	if plan.Destination.RunStrategy.ValueString() != state.Destination.RunStrategy.ValueString() ||
		!sameStringMap(plan.Destination.Labels, state.Destination.Labels) {
		err := eng.UpdateVM(ctx, ns, name, plan.Destination.RunStrategy.ValueString(), stringMap(state.Destination.Labels), stringMap(plan.Destination.Labels))
		if err != nil {
			resp.Diagnostics.AddError("Error updating migrated VM",
				fmt.Sprintf("Setting the run strategy and labels of VirtualMachine %s/%s failed: %v", ns, name, err))
			return
		}
		tflog.Info(ctx, "updated the migrated VM", map[string]any{"run_strategy": plan.Destination.RunStrategy.ValueString()})
	}
	plan.copyComputed(state)
	resp.Diagnostics.Append(r.saveSettings(ctx, eng, &plan)...)
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
	opts := engine.ForgetOptions{WorkDir: r.clients.settings.WorkDir}
	if m.Transport != nil {
		// Images of an unfinished migration over HTTP are staged there.
		opts.StagingDir = m.Transport.StagingDir.ValueString()
	}
	res, err := eng.Forget(ctx, ns, name, engine.ForgetPolicy(policy), opts)
	for _, a := range res.Actions {
		tflog.Info(ctx, a)
	}
	if err != nil {
		resp.Diagnostics.AddError("Error deleting migration",
			fmt.Sprintf("delete_policy %q for migration %s/%s: %v", policy, ns, name, err))
	}
}
