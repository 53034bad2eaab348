package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

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
// saved with the record (transport, validation, retry, shutdown_timeout,
// delete_policy). What none of them tells takes its default.
func fillImported(m *migrationModel, obs engine.Observation) diag.Diagnostics {
	var diags diag.Diagnostics
	rec := obs.Record
	d := m.Destination
	// An imported migration keeps the default conversion, so that a
	// configuration leaving it out does not replace (migrate again) what
	// was imported; the devices are read from the VM below.
	conv := engine.DefaultConversion
	if rec.ConversionMode != "" {
		conv = rec.ConversionMode
	}
	m.Conversion = types.StringValue(conv)
	importedStorage(d, rec, obs.DataVolumes)
	importedVM(d, rec, obs.VM, conv)
	importedRecordAttributes(m, rec)
	s, err := parseSettings(obs.Settings)
	if err != nil {
		diags.AddWarning("Import incomplete", fmt.Sprintf("The settings saved with migration %s/%s could not be read (%v): transport, validation and retry are left empty and show as changes in the next plan.", d.Namespace.ValueString(), d.Name.ValueString(), err))
		return diags
	}
	if s != nil {
		s.apply(m)
	}
	return diags
}

// importedStorage fills the destination's storage attributes from the
// first disk's DataVolume, or the defaults where it says nothing.
func importedStorage(d *destModel, rec *record.Record, dvs []engine.DataVolumeObservation) {
	d.StorageClass = types.StringValue("")
	d.AccessMode, d.VolumeMode = types.StringValue(engine.DefaultAccessMode), types.StringValue(engine.DefaultVolumeMode)
	if len(rec.Disks) == 0 {
		return
	}
	for _, dv := range dvs {
		if dv.Name != rec.Disks[0].DataVolume {
			continue
		}
		if dv.StorageClass != "" {
			d.StorageClass = types.StringValue(dv.StorageClass)
		}
		if len(dv.AccessModes) > 0 {
			d.AccessMode = types.StringValue(dv.AccessModes[0])
		}
		if dv.VolumeMode != "" {
			d.VolumeMode = types.StringValue(dv.VolumeMode)
		}
	}
}

// importedVM fills the destination's device, network and label attributes
// from the VirtualMachine when it is the migration's, or the defaults of
// the conversion.
func importedVM(d *destModel, rec *record.Record, vm engine.VMObservation, conv string) {
	d.DiskBus, d.RunStrategy = types.StringValue(engine.DefaultDiskBus(conv)), types.StringValue(engine.DefaultRunStrategy)
	d.NICModel, d.Timezone = types.StringValue(engine.DefaultNICModel(conv)), types.StringValue(engine.DefaultTimezone)
	if !vm.Exists || !vm.Ours {
		return
	}
	setIfObserved(&d.RunStrategy, vm.RunStrategy)
	setIfObserved(&d.DiskBus, vm.DiskBus)
	setIfObserved(&d.NICModel, vm.NICModel)
	setIfObserved(&d.Timezone, vm.Timezone)
	if rec.Source != nil && len(vm.Networks) > 0 {
		nm := map[string]types.String{}
		for i, n := range vm.Networks {
			nic := sourceNICOf(rec.Source.NICs, n, i)
			switch {
			case nic == nil:
			case n.Pod:
				nm[nic.Network] = types.StringValue(preflight.PodNetwork)
			case n.Multus != "":
				nm[nic.Network] = types.StringValue(n.Multus)
			}
		}
		d.NetworkMap = nm
	}
	labels := map[string]types.String{}
	for k, v := range vm.Labels {
		if !engine.IsOwnLabel(k) {
			labels[k] = types.StringValue(v)
		}
	}
	if len(labels) > 0 {
		d.Labels = labels
	}
}

func setIfObserved(attr *types.String, observed string) {
	if observed != "" {
		*attr = types.StringValue(observed)
	}
}

// importedRecordAttributes fills what the record itself says (format,
// mode, power-off policy) and the defaults of what it does not keep.
func importedRecordAttributes(m *migrationModel, rec *record.Record) {
	m.TargetFormat = types.StringValue(engine.DefaultTargetFormat)
	if len(rec.Disks) > 0 && rec.Disks[0].ArtifactFormat != "" {
		m.TargetFormat = types.StringValue(rec.Disks[0].ArtifactFormat)
	}
	m.Execution = types.StringValue(rec.ExecutionOf())
	m.Mode, m.PrecopyRounds = types.StringValue(engine.ModeCold), types.Int64Value(engine.DefaultPrecopyRounds)
	m.PrecopyStop = types.Int64Value(engine.DefaultPrecopyStopBytes)
	if rec.Warm != nil {
		m.Mode, m.PrecopyRounds = types.StringValue(engine.ModeWarm), types.Int64Value(int64(rec.Warm.Rounds))
		if rec.Warm.StopBytes != nil {
			// Else the precopy began before the attribute existed: the
			// state gains the default, as a configuration would.
			m.PrecopyStop = types.Int64Value(*rec.Warm.StopBytes)
		}
	}
	m.PowerOffPolicy = types.StringValue(engine.DefaultPowerOffPolicy)
	if rec.PowerOff != nil && rec.PowerOff.Policy != "" {
		m.PowerOffPolicy = types.StringValue(rec.PowerOff.Policy)
	}
	m.ShutdownTO = types.StringValue(durationString(engine.DefaultShutdownTimeout))
	m.DeletePolicy = types.StringValue(string(engine.DefaultDeletePolicy))
}

// sourceNICOf is the source NIC behind the VM's i-th network: the one
// whose MAC address its interface carries, else the i-th (the provider
// renders them in order; a VM made by another tool may not).
func sourceNICOf(nics []record.SourceNIC, n engine.NetworkObservation, i int) *record.SourceNIC {
	if n.MAC != "" {
		for j := range nics {
			if strings.EqualFold(nics[j].MAC, n.MAC) {
				return &nics[j]
			}
		}
	}
	if i < len(nics) {
		return &nics[i]
	}
	return nil
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
		ns, name, m.Matched(), rec.Identity.VMName, rec.Identity.VMID, rec.Identity.Host, ns, coord.RecordName(name))
	if len(rep.Labelled) > 0 {
		fmt.Fprintf(&b, "\n\nLabelled %s=%s so that they count as this migration's: %s.", engine.LabelMigration, name, strings.Join(rep.Labelled, ", "))
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
