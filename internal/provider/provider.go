// Package provider is the Terraform glue of terraform-provider-vmmigration:
// schemas, models and the calls from Terraform's lifecycle into the domain
// packages. It holds no migration logic of its own.
package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

var (
	_ provider.Provider                   = (*vmmigrationProvider)(nil)
	_ provider.ProviderWithValidateConfig = (*vmmigrationProvider)(nil)
)

// vmmigrationProvider is the provider type "vmmigration".
type vmmigrationProvider struct {
	version string
}

// New returns a constructor of the provider for providerserver.Serve and for
// acceptance tests.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &vmmigrationProvider{version: version}
	}
}

func (p *vmmigrationProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "vmmigration"
	resp.Version = p.version
}

func (p *vmmigrationProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = providerSchema()
}

func (p *vmmigrationProvider) ValidateConfig(ctx context.Context, req provider.ValidateConfigRequest, resp *provider.ValidateConfigResponse) {
	var model providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &model)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Values that are unknown at plan time (for example from another
	// resource) are checked again in Configure.
	_, diags := model.settings(lookupEnv, false)
	resp.Diagnostics.Append(diags...)
}

func (p *vmmigrationProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var model providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &model)...)
	if resp.Diagnostics.HasError() {
		return
	}
	s, diags := model.settings(lookupEnv, true)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	clients, diags := newClients(s)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.DataSourceData = clients
	resp.ResourceData = clients
}

func (p *vmmigrationProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewMigrationResource}
}

func (p *vmmigrationProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewESXiVMsDataSource,
		NewESXiVMDataSource,
		NewPreflightDataSource,
	}
}
