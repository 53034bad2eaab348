// Command terraform-provider-vmmigration is the Terraform provider that moves
// virtual machines off VMware ESXi onto KubeVirt.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/provider"
)

// version is set by the release build with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/vmmigration/vmmigration",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
