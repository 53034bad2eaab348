package esxi

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Registry holds one [Client] per host name, shared by every caller in the
// process, so that all data sources and resources talking to a host use the
// same connection and the same session limit. Adding a host validates its
// configuration but does not connect: the first operation does.
type Registry struct {
	mu      sync.Mutex
	clients map[string]*Client
	logf    Logger
}

// NewRegistry returns an empty registry. logf may be nil.
func NewRegistry(logf Logger) *Registry {
	return &Registry{clients: map[string]*Client{}, logf: logf}
}

// Add validates cfg and registers a client for cfg.Name. Adding the same
// configuration again returns the existing client; adding a different
// configuration under a name already in use is an error.
func (r *Registry) Add(cfg HostConfig) (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.clients[cfg.Name]; ok {
		if old.cfg == cfg.withDefaults() {
			return old, nil
		}
		return nil, &Error{Class: Permanent, Host: cfg.Name, Op: "configuration",
			Msg: fmt.Sprintf("host name %q is configured twice with different settings: give each host a unique name", cfg.Name)}
	}
	c, err := NewClient(cfg, r.logf)
	if err != nil {
		return nil, err
	}
	r.clients[cfg.Name] = c
	return c, nil
}

// Client returns the client for a configured host name.
func (r *Registry) Client(name string) (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[name]
	if !ok {
		return nil, &Error{Class: Permanent, Host: name, Op: "looking up host",
			Msg: fmt.Sprintf("no ESXi host named %q is configured in the provider: add it to the provider's hosts or fix the name", name)}
	}
	return c, nil
}

// Names returns the configured host names, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.clients))
	for n := range r.clients {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close closes every client's connection.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, c := range r.clients {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
