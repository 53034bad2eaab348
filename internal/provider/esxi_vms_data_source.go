package provider

import (
	"context"
	"fmt"
	"regexp"

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
	_ datasource.DataSource              = (*esxiVMsDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*esxiVMsDataSource)(nil)
)

// powerStates are the values of power_state filters and attributes.
var powerStates = []string{string(esxi.PoweredOn), string(esxi.PoweredOff), string(esxi.Suspended)}

type esxiVMsDataSource struct {
	clients *clients
}

type esxiVMsModel struct {
	ID         types.String   `tfsdk:"id"`
	Host       types.String   `tfsdk:"host"`
	Name       types.String   `tfsdk:"name"`
	NameRegex  types.String   `tfsdk:"name_regex"`
	PowerState types.String   `tfsdk:"power_state"`
	VMs        []vmModel      `tfsdk:"vms"`
	Problems   []types.String `tfsdk:"problems"`
}

// NewESXiVMsDataSource is the constructor of vmmigration_esxi_vms.
func NewESXiVMsDataSource() datasource.DataSource { return &esxiVMsDataSource{} }

func (d *esxiVMsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_esxi_vms"
}

func (d *esxiVMsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = esxiVMsSchema()
}

func esxiVMsSchema() schema.Schema {
	return schema.Schema{
		MarkdownDescription: "The inventory of one ESXi host: every registered VM with its disks, NICs, " +
			"snapshots, firmware and power state, read over SSH in a constant number of round trips " +
			"however many VMs the host has. Use it with `for_each` to plan a migration wave.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, MarkdownDescription: "The host name."},
			"host": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Name of an `esxi_host` block of the provider.",
			},
			"name": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Only VMs with exactly this display name.",
				Validators:          []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("name_regex"))},
			},
			"name_regex": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Only VMs whose display name matches this regular expression (RE2 syntax, unanchored: use `^...$` for a whole-name match).",
				Validators:          []validator.String{regexValidator{}},
			},
			"power_state": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Only VMs in this power state: " + backticked(powerStates) + ".",
				Validators:          []validator.String{stringvalidator.OneOf(powerStates...)},
			},
			"vms": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Matching VMs, ordered by Vmid.",
				NestedObject:        schema.NestedAttributeObject{Attributes: vmAttributes()},
			},
			"problems": schema.ListAttribute{
				Computed:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "Host output that could not be parsed (for example a VM listed by `getallvms` whose `.vmx` is unreadable). Each VM also has its own `problems`.",
			},
		},
	}
}

func (d *esxiVMsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, diags := clientsFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.clients = c
}

func (d *esxiVMsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m esxiVMsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	host := m.Host.ValueString()
	ctx = tflog.SetField(ctx, "esxi_host", host)

	vms, problems, diags := d.clients.inventory(ctx, host)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	var re *regexp.Regexp
	if !m.NameRegex.IsNull() {
		re = regexp.MustCompile(m.NameRegex.ValueString()) // checked by regexValidator
	}
	m.ID = types.StringValue(host)
	m.VMs = []vmModel{}
	for _, vm := range vms {
		if !m.Name.IsNull() && vm.Name != m.Name.ValueString() {
			continue
		}
		if re != nil && !re.MatchString(vm.Name) {
			continue
		}
		if !m.PowerState.IsNull() && string(vm.PowerState) != m.PowerState.ValueString() {
			continue
		}
		m.VMs = append(m.VMs, newVMModel(vm))
	}
	m.Problems = []types.String{}
	for _, p := range problems {
		m.Problems = append(m.Problems, types.StringValue(p.String()))
	}
	tflog.Debug(ctx, "read ESXi inventory", map[string]any{"vms": len(vms), "matching": len(m.VMs), "problems": len(problems)})
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// regexValidator checks that a string compiles as an RE2 expression.
type regexValidator struct{}

func (regexValidator) Description(context.Context) string {
	return "must be a valid RE2 regular expression"
}
func (v regexValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}
func (regexValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := regexp.Compile(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid regular expression",
			fmt.Sprintf("%q is not a valid RE2 regular expression: %v.", req.ConfigValue.ValueString(), err))
	}
}

func backticked(vs []string) string {
	s := ""
	for i, v := range vs {
		switch {
		case i == 0:
		case i == len(vs)-1:
			s += " or "
		default:
			s += ", "
		}
		s += "`" + v + "`"
	}
	return s
}
