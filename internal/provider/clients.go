package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// clients is what Configure hands every resource and data source: the
// settings and, once they exist, the lazily connected clients built from them.
// Nothing here connects until a resource or data source asks for it.
type clients struct {
	settings settings
}

func newClients(s settings) *clients {
	return &clients{settings: s}
}

// clientsFrom recovers the clients from ProviderData. ProviderData is nil
// while Terraform validates, before Configure has run.
func clientsFrom(data any) (*clients, diag.Diagnostics) {
	var diags diag.Diagnostics
	if data == nil {
		return nil, diags
	}
	c, ok := data.(*clients)
	if !ok {
		diags.AddError("Unexpected provider data",
			fmt.Sprintf("Expected *provider.clients, got %T. This is a bug in the provider; please report it.", data))
		return nil, diags
	}
	return c, diags
}
