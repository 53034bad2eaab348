package provider

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// clients is what Configure hands every resource and data source: settings
// and lazily connected clients. Nothing here connects until a resource or
// data source asks for it, so validate and unrelated plans work offline.
type clients struct {
	settings settings
	esxi     *esxi.Registry
	kube     *kube.Client

	mu  sync.Mutex
	eng *engine.Engine

	progressMu sync.Mutex
	progress   map[string]func(engine.Event)
}

func newClients(s settings) (*clients, diag.Diagnostics) {
	var diags diag.Diagnostics
	c := &clients{
		settings: s,
		esxi:     esxi.NewRegistry(nil),
		kube:     kube.New(s.Kubernetes),
		progress: map[string]func(engine.Event){},
	}
	for _, h := range s.Hosts {
		_, err := c.esxi.Add(h.HostConfig)
		if err != nil {
			diags.AddError("Invalid ESXi host configuration",
				fmt.Sprintf("ESXi host %q: %v", h.Name, err))
		}
	}
	return c, diags
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

// esxiClient returns the client of a configured host.
func (c *clients) esxiClient(host string) (*esxi.Client, diag.Diagnostics) {
	var diags diag.Diagnostics
	if c == nil {
		diags.AddError("Provider not configured", "The provider was not configured before use. This is a bug in the provider; please report it.")
		return nil, diags
	}
	cl, err := c.esxi.Client(host)
	if err != nil {
		names := c.esxi.Names()
		diags.AddError("Unknown ESXi host",
			fmt.Sprintf("No esxi_host block of the provider is named %q (configured: %v). Add one or fix the name.", host, names))
		return nil, diags
	}
	return cl, diags
}

// engine returns the migration engine, created on first use.
func (c *clients) engine() (*engine.Engine, diag.Diagnostics) {
	var diags diag.Diagnostics
	if c == nil {
		diags.AddError("Provider not configured", "The provider was not configured before use. This is a bug in the provider; please report it.")
		return nil, diags
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng != nil {
		return c.eng, diags
	}
	limits := map[string]int{}
	for _, h := range c.settings.Hosts {
		limits[h.Name] = h.MaxConcurrentMigrations
	}
	eng, err := engine.New(engine.Deps{ESXi: c.esxi, Kube: c.kube, HostLimits: limits, Progress: c.routeProgress, VirtioWin: c.settings.VirtioWin,
		WorkerImage: c.settings.WorkerImage, MaxConcurrentConversions: c.settings.MaxConcurrentConversions})
	if err != nil {
		diags.AddError("Error starting the migration engine", err.Error())
		return nil, diags
	}
	c.eng = eng
	return eng, diags
}

// watchProgress sends the engine's events about one migration to f until
// the returned function is called. Events reach the operation that drives
// the migration, so they are logged with its context.
func (c *clients) watchProgress(namespace, name string, f func(engine.Event)) func() {
	key := namespace + "/" + name
	c.progressMu.Lock()
	c.progress[key] = f
	c.progressMu.Unlock()
	return func() {
		c.progressMu.Lock()
		delete(c.progress, key)
		c.progressMu.Unlock()
	}
}

func (c *clients) routeProgress(ev engine.Event) {
	c.progressMu.Lock()
	f := c.progress[ev.Namespace+"/"+ev.Name]
	c.progressMu.Unlock()
	if f != nil {
		f(ev)
	}
}

// inventory reads a host's inventory through the engine, which shares one
// read between the data sources and resources of a run for
// engine.DefaultInventoryMaxAge.
func (c *clients) inventory(ctx context.Context, host string) ([]esxi.VM, []esxi.Problem, diag.Diagnostics) {
	if _, diags := c.esxiClient(host); diags.HasError() {
		return nil, nil, diags
	}
	var diags diag.Diagnostics
	eng, diags := c.engine()
	if diags.HasError() {
		return nil, nil, diags
	}
	vms, problems, err := eng.Inventory(ctx, host, engine.DefaultInventoryMaxAge)
	if err != nil {
		diags.AddError("Error reading ESXi inventory", esxiErrorDetail(host, err))
		return nil, nil, diags
	}
	return vms, problems, diags
}

// esxiErrorDetail says what kind of failure an ESXi error is and what to do.
func esxiErrorDetail(host string, err error) string {
	switch esxi.Classify(err) {
	case esxi.Transient:
		return fmt.Sprintf("ESXi host %q could not be read because of a temporary failure; running the command again usually succeeds. %v", host, err)
	case esxi.NeedsHuman:
		return fmt.Sprintf("ESXi host %q refused the provider and needs your attention (credentials, host key, lockdown mode or SSH service). %v", host, err)
	default:
		return fmt.Sprintf("Reading ESXi host %q failed: %v", host, err)
	}
}
