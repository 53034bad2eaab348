package provider

import (
	"context"
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
)

var (
	_ datasource.DataSource              = (*esxiVMDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*esxiVMDataSource)(nil)
)

type esxiVMDataSource struct {
	clients *clients
}

type esxiVMModel struct {
	ID   types.String `tfsdk:"id"`
	Host types.String `tfsdk:"host"`
	vmModel
}

// NewESXiVMDataSource is the constructor of vmmigration_esxi_vm.
func NewESXiVMDataSource() datasource.DataSource { return &esxiVMDataSource{} }

func (d *esxiVMDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_esxi_vm"
}

func (d *esxiVMDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = esxiVMSchema()
}

func esxiVMSchema() schema.Schema {
	attrs := vmAttributes()
	attrs["id"] = schema.StringAttribute{Computed: true, MarkdownDescription: "`<host>/<vmid>`."}
	attrs["host"] = schema.StringAttribute{Required: true, MarkdownDescription: "Name of an `esxi_host` block of the provider."}
	attrs["name"] = schema.StringAttribute{
		Optional: true, Computed: true,
		MarkdownDescription: "Display name of the VM. Exactly one of `name` and `vmid` must be set; when two VMs share the name, use `vmid`.",
		Validators: []validator.String{
			stringvalidator.ExactlyOneOf(path.MatchRoot("name"), path.MatchRoot("vmid")),
			stringvalidator.LengthAtLeast(1),
		},
	}
	attrs["vmid"] = schema.Int64Attribute{
		Optional: true, Computed: true,
		MarkdownDescription: "Vmid of the VM on the host.",
		Validators:          []validator.Int64{int64validator.AtLeast(1)},
	}
	return schema.Schema{
		MarkdownDescription: "One VM of an ESXi host, by name or Vmid, with its disks, NICs, snapshots, " +
			"firmware, power state and VMware Tools state.",
		Attributes: attrs,
	}
}

func (d *esxiVMDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, diags := clientsFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.clients = c
}

func (d *esxiVMDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m esxiVMModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	host := m.Host.ValueString()
	ctx = tflog.SetField(ctx, "esxi_host", host)
	vms, _, diags := d.clients.inventory(ctx, host)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	vm, err := engine.PickVM(vms, host, m.Name.ValueString(), int(m.VMID.ValueInt64()))
	if err != nil {
		resp.Diagnostics.AddError("Error finding ESXi VM", err.Error())
		return
	}
	m.ID = types.StringValue(fmt.Sprintf("%s/%d", host, vm.VMID))
	m.vmModel = newVMModel(vm)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
