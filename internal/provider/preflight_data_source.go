package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

var (
	_ datasource.DataSource              = (*preflightDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*preflightDataSource)(nil)
)

type preflightDataSource struct {
	clients *clients
}

type preflightModel struct {
	ID             types.String            `tfsdk:"id"`
	Host           types.String            `tfsdk:"host"`
	VMName         types.String            `tfsdk:"vm_name"`
	VMID           types.Int64             `tfsdk:"vmid"`
	Namespace      types.String            `tfsdk:"namespace"`
	Name           types.String            `tfsdk:"name"`
	StorageClass   types.String            `tfsdk:"storage_class"`
	NetworkMap     map[string]types.String `tfsdk:"network_map"`
	PowerOffPolicy types.String            `tfsdk:"power_off_policy"`
	Conversion     types.String            `tfsdk:"conversion"`
	Execution      types.String            `tfsdk:"execution"`
	Passed         types.Bool              `tfsdk:"passed"`
	Checks         []checkModel            `tfsdk:"checks"`
	Blockers       []types.String          `tfsdk:"blockers"`
	Warnings       []types.String          `tfsdk:"warnings"`
	Disks          []plannedDiskModel      `tfsdk:"disks"`
	TotalBytes     types.Int64             `tfsdk:"total_bytes"`
}

type checkModel struct {
	ID       types.String `tfsdk:"id"`
	Severity types.String `tfsdk:"severity"`
	Passed   types.Bool   `tfsdk:"passed"`
	Message  types.String `tfsdk:"message"`
}

type plannedDiskModel struct {
	Index         types.Int64  `tfsdk:"index"`
	Device        types.String `tfsdk:"device"`
	DataPath      types.String `tfsdk:"data_path"`
	CapacityBytes types.Int64  `tfsdk:"capacity_bytes"`
	DataVolume    types.String `tfsdk:"data_volume"`
}

// NewPreflightDataSource is the constructor of vmmigration_preflight.
func NewPreflightDataSource() datasource.DataSource { return &preflightDataSource{} }

func (d *preflightDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_preflight"
}

func (d *preflightDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = preflightSchema()
}

func preflightSchema() schema.Schema {
	str := func(desc string) schema.Attribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	return schema.Schema{
		MarkdownDescription: "The checks a migration makes before it touches anything, for a source VM and " +
			"an intended destination: guest OS and firmware, snapshots, disk kinds, network mapping, " +
			"destination name, namespace, StorageClass and quota, VMware Tools and the power-off policy. " +
			"Each failed check says what to do. Reading it changes nothing on the host or the cluster. " +
			"`passed` is false exactly when a blocker failed.",
		Attributes: map[string]schema.Attribute{
			"id":   str("`<host>/<vmid>:<namespace>/<name>`."),
			"host": schema.StringAttribute{Required: true, MarkdownDescription: "Name of an `esxi_host` block of the provider."},
			"vm_name": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Display name of the source VM. Exactly one of `vm_name` and `vmid`.",
				Validators: []validator.String{
					stringvalidator.ExactlyOneOf(path.MatchRoot("vm_name"), path.MatchRoot("vmid")),
				},
			},
			"vmid": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "Vmid of the source VM.",
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
			},
			"namespace": schema.StringAttribute{Required: true, MarkdownDescription: "Destination namespace."},
			"name":      schema.StringAttribute{Required: true, MarkdownDescription: "Destination VirtualMachine name; DataVolumes are named `<name>-disk-<n>`."},
			"storage_class": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "StorageClass of the DataVolumes.",
			},
			"network_map": schema.MapAttribute{
				Optional:    true,
				ElementType: types.StringType,
				MarkdownDescription: "Destination of each source network (port group) name: `\"pod\"` for the pod " +
					"network, or a Multus NetworkAttachmentDefinition as `\"<namespace>/<name>\"`.",
			},
			"power_off_policy": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How the source will be powered off: " + backticked(engine.PowerOffPolicies) +
					". Defaults to `" + engine.DefaultPowerOffPolicy + "`.",
				Validators: []validator.String{stringvalidator.OneOf(engine.PowerOffPolicies...)},
			},
			"conversion": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The migration's `conversion`: " + backticked(engine.Conversions) + ". Defaults to `" + engine.DefaultConversion +
					"`, whose checks need virt-v2v on this machine and, for Windows, the virtio-win drivers.",
				Validators: []validator.String{stringvalidator.OneOf(engine.Conversions...)},
			},
			"execution": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "The migration's `execution`: " + backticked(engine.Executions) + ". Defaults to the provider's `execution`; " +
					"cluster execution is judged by what it can do (and needs the provider's `worker_image`).",
				Validators: []validator.String{stringvalidator.OneOf(engine.Executions...)},
			},
			"passed": schema.BoolAttribute{Computed: true, MarkdownDescription: "False exactly when a blocker failed."},
			"checks": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Every check, passed or not.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":       str("Stable identifier, e.g. `snapshot_chain`."),
					"severity": str("`blocker` (stops the migration) or `warning`."),
					"passed":   schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the check passed."},
					"message":  str("What was found and, for a failure, what to do."),
				}},
			},
			"blockers": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Messages of the failed blockers, as `<id>: <message>`."},
			"warnings": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Messages of the failed warnings, as `<id>: <message>`."},
			"disks": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "What a migration would copy: each disk and the DataVolume it would become.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"index":          schema.Int64Attribute{Computed: true, MarkdownDescription: "Disk index `n` in `<name>-disk-<n>`."},
					"device":         str("Source controller and unit, e.g. `scsi0:0`."),
					"data_path":      str("Source data file."),
					"capacity_bytes": schema.Int64Attribute{Computed: true, MarkdownDescription: "Bytes to copy."},
					"data_volume":    str("Destination DataVolume name."),
				}},
			},
			"total_bytes": schema.Int64Attribute{Computed: true, MarkdownDescription: "Sum of `capacity_bytes`."},
		},
	}
}

func (d *preflightDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, diags := clientsFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.clients = c
}

// Read previews the migration with the engine (engine.Preview), the same
// judgement the resource's plan and the Validated checkpoint make.
func (d *preflightDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m preflightModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	host := m.Host.ValueString()
	ctx = tflog.SetField(ctx, "esxi_host", host)
	if _, diags := d.clients.esxiClient(host); diags.HasError() {
		resp.Diagnostics.Append(diags...)
		return
	}
	eng, diags := d.clients.engine()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec := engine.Spec{
		Host: host, VMName: m.VMName.ValueString(), VMID: int(m.VMID.ValueInt64()),
		Namespace: m.Namespace.ValueString(), Name: m.Name.ValueString(), StorageClass: m.StorageClass.ValueString(),
		NetworkMap: stringMap(m.NetworkMap), PowerOffPolicy: m.PowerOffPolicy.ValueString(),
		Conversion: m.Conversion.ValueString(), WorkDir: d.clients.settings.WorkDir,
	}
	if m.Execution.IsNull() || m.Execution.IsUnknown() {
		m.Execution = types.StringValue(d.clients.settings.Execution)
	}
	spec.Execution = m.Execution.ValueString()
	p, err := eng.Preview(ctx, spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge})
	switch {
	case err != nil && engine.FieldOf(err) != "":
		resp.Diagnostics.AddError("Error finding ESXi VM", err.Error())
		return
	case errors.As(err, new(*esxi.Error)):
		resp.Diagnostics.AddError("Error reading ESXi inventory", esxiErrorDetail(host, err))
		return
	case err != nil:
		resp.Diagnostics.AddError("Error running pre-flight checks",
			fmt.Sprintf("The pre-flight checks of VM %q could not be evaluated: %v. Check the provider's kubernetes settings and that the API server is reachable.", sourceLabel(spec), err))
		return
	}
	vm := p.VM
	m.ID = types.StringValue(fmt.Sprintf("%s/%d:%s/%s", host, vm.VMID, spec.Namespace, spec.Name))
	m.Passed = types.BoolValue(p.Checks.Passed())
	m.Checks, m.Blockers, m.Warnings = []checkModel{}, []types.String{}, []types.String{}
	for _, c := range p.Checks.Checks {
		m.Checks = append(m.Checks, checkModel{
			ID:       types.StringValue(c.ID),
			Severity: types.StringValue(string(c.Severity)),
			Passed:   types.BoolValue(c.Passed),
			Message:  types.StringValue(c.Message),
		})
	}
	for _, c := range p.Blockers() {
		m.Blockers = append(m.Blockers, types.StringValue(c.ID+": "+c.Message))
	}
	for _, c := range p.Warnings() {
		m.Warnings = append(m.Warnings, types.StringValue(c.ID+": "+c.Message))
	}
	m.Disks = []plannedDiskModel{}
	var total int64
	for _, disk := range p.Disks {
		total += disk.SizeBytes
		m.Disks = append(m.Disks, plannedDiskModel{
			Index:         types.Int64Value(int64(disk.Index)),
			Device:        types.StringValue(disk.Device),
			DataPath:      types.StringValue(disk.SourcePath),
			CapacityBytes: types.Int64Value(disk.SizeBytes),
			DataVolume:    types.StringValue(disk.DataVolume),
		})
	}
	m.TotalBytes = types.Int64Value(total)
	tflog.Info(ctx, "pre-flight checks evaluated", map[string]any{"vm": vm.Name, "passed": p.Checks.Passed(),
		"blockers": len(m.Blockers), "warnings": len(m.Warnings)})
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
