package provider

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
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
	vm, err := pickVM(vms, host, m.Name.ValueString(), int(m.VMID.ValueInt64()))
	if err != nil {
		resp.Diagnostics.AddError("Error finding ESXi VM", err.Error())
		return
	}
	m.ID = types.StringValue(fmt.Sprintf("%s/%d", host, vm.VMID))
	m.vmModel = newVMModel(vm)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// pickVM finds one VM by Vmid (when vmid > 0) or by display name, with an
// error that says how to disambiguate.
func pickVM(vms []esxi.VM, host, name string, vmid int) (esxi.VM, error) {
	if vmid > 0 {
		for _, vm := range vms {
			if vm.VMID == vmid {
				return vm, nil
			}
		}
		return esxi.VM{}, fmt.Errorf("ESXi host %q has no VM with Vmid %d. List the host's VMs with the vmmigration_esxi_vms data source or `vim-cmd vmsvc/getallvms` on the host.", host, vmid)
	}
	var found []esxi.VM
	for _, vm := range vms {
		if vm.Name == name {
			found = append(found, vm)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		var near []string
		for _, vm := range vms {
			if strings.EqualFold(vm.Name, name) || strings.EqualFold(strings.TrimSpace(vm.Name), strings.TrimSpace(name)) {
				near = append(near, fmt.Sprintf("%q (Vmid %d)", vm.Name, vm.VMID))
			}
		}
		msg := fmt.Sprintf("ESXi host %q has no VM named %q.", host, name)
		if len(near) > 0 {
			msg += " Names differ only in case or spaces: " + strings.Join(near, ", ") + "."
		}
		return esxi.VM{}, fmt.Errorf("%s Names are matched exactly; list them with the vmmigration_esxi_vms data source.", msg)
	default:
		var ids []string
		sort.Slice(found, func(i, j int) bool { return found[i].VMID < found[j].VMID })
		for _, vm := range found {
			ids = append(ids, fmt.Sprintf("%d (%s)", vm.VMID, vm.VMXPath))
		}
		return esxi.VM{}, fmt.Errorf("%d VMs on ESXi host %q are named %q: Vmids %s. Set vmid instead of name to choose one.", len(found), host, name, strings.Join(ids, ", "))
	}
}
