package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

// DefaultInventoryMaxAge is how long a plan reuses one host's inventory:
// a plan reads every data source and resource within seconds, so N
// migrations from one host cost one batched inventory read.
const DefaultInventoryMaxAge = 30 * time.Second

// inventoryCache shares host inventories between concurrent callers.
type inventoryCache struct {
	mu      sync.Mutex
	entries map[string]*inventoryEntry
}

type inventoryEntry struct {
	done chan struct{}
	// started is when the read began, at when it ended.
	started, at time.Time
	vms         []esxi.VM
	problems    []esxi.Problem
	err         error
}

// Inventory returns every VM of a configured host (and the host-wide
// problems), reusing a read made at most maxAge ago by any caller; a zero
// maxAge always reads the host. Concurrent callers share one read.
func (e *Engine) Inventory(ctx context.Context, host string, maxAge time.Duration) ([]esxi.VM, []esxi.Problem, error) {
	ent, err := e.inventory(ctx, host, maxAge)
	if err != nil {
		return nil, nil, err
	}
	return ent.vms, ent.problems, ent.err
}

// inventory is Inventory's read, with when it was made.
func (e *Engine) inventory(ctx context.Context, host string, maxAge time.Duration) (*inventoryEntry, error) {
	c, err := e.hostClient(host)
	if err != nil {
		return nil, err
	}
	ic := &e.inventories
	ic.mu.Lock()
	if ic.entries == nil {
		ic.entries = map[string]*inventoryEntry{}
	}
	ent, ok := ic.entries[host]
	if ok {
		select {
		case <-ent.done:
			ok = ent.err == nil && maxAge > 0 && time.Since(ent.at) <= maxAge
		default:
			ok = maxAge > 0
		}
	}
	if !ok {
		ent = &inventoryEntry{done: make(chan struct{}), started: time.Now()}
		ic.entries[host] = ent
		ic.mu.Unlock()
		ent.vms, ent.problems, ent.err = c.Inventory(ctx)
		ent.at = time.Now()
		close(ent.done)
	} else {
		ic.mu.Unlock()
		select {
		case <-ent.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ent, nil
}

// ForgetInventory drops a host's cached inventory after a change made to
// the host (a power-off).
func (e *Engine) ForgetInventory(host string) {
	e.inventories.mu.Lock()
	defer e.inventories.mu.Unlock()
	delete(e.inventories.entries, host)
}

// hostClient returns the client of a configured host, or an error that
// names the attribute to fix.
func (e *Engine) hostClient(host string) (*esxi.Client, error) {
	c, err := e.deps.ESXi.Client(host)
	if err != nil {
		return nil, onField(FieldSourceHost, needsHuman("HostNotConfigured",
			fmt.Sprintf("ESXi host %q is not configured in the provider (configured: %s)", host, strings.Join(e.deps.ESXi.Names(), ", ")),
			"add an esxi_host block named "+host+" to the provider configuration, or fix source.host", err))
	}
	return c, nil
}

// PickVM finds the VM a configuration names among a host's VMs: by vmid
// when vmid is set, else by exact display name. It is the one place that
// turns "the VM called X" into a VM, for plan and apply alike. System VMs
// (vCLS and the like) are never picked. Each error says how to fix it and
// carries the attribute it concerns.
func PickVM(vms []esxi.VM, host, name string, vmid int) (esxi.VM, error) {
	if vmid > 0 {
		for _, vm := range vms {
			if vm.VMID != vmid {
				continue
			}
			if vm.System {
				return esxi.VM{}, onField(FieldSourceVMID, permanent("SourceVMIsSystem",
					fmt.Sprintf("vmid %d on ESXi host %q is the system VM %q (%s), which the host or vCenter manages; system VMs such as vCLS are never migrated", vmid, host, vm.Name, vm.VMXPath), "", nil))
			}
			if name != "" && vm.Name != name {
				return esxi.VM{}, onField(FieldSourceVMID, permanent("SourceVMMismatch",
					fmt.Sprintf("vmid %d on ESXi host %q is named %q, not %q. Give a vmid and a name that belong to the same VM, or only one of them", vmid, host, vm.Name, name), "", nil))
			}
			return vm, nil
		}
		return esxi.VM{}, onField(FieldSourceVMID, permanent("SourceVMNotFound",
			fmt.Sprintf("ESXi host %q has no VM with vmid %d. List the host's VMs with the vmmigration_esxi_vms data source or `vim-cmd vmsvc/getallvms` on the host", host, vmid), "", nil))
	}
	var found []esxi.VM
	for _, vm := range vms {
		if vm.Name == name && !vm.System {
			found = append(found, vm)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		msg := fmt.Sprintf("ESXi host %q has no VM named %q.", host, name)
		var near []string
		for _, vm := range vms {
			if !vm.System && (strings.EqualFold(vm.Name, name) || strings.EqualFold(strings.TrimSpace(vm.Name), strings.TrimSpace(name))) {
				near = append(near, fmt.Sprintf("%q (vmid %d)", vm.Name, vm.VMID))
			}
		}
		if len(near) > 0 {
			msg += " Names differ only in case or spaces: " + strings.Join(near, ", ") + "."
		}
		return esxi.VM{}, onField(FieldSourceVMName, permanent("SourceVMNotFound",
			msg+" Names are matched exactly; list them with the vmmigration_esxi_vms data source", "", nil))
	}
	var ids []string
	for _, vm := range found {
		ids = append(ids, fmt.Sprintf("%d (%s)", vm.VMID, vm.VMXPath))
	}
	return esxi.VM{}, onField(FieldSourceVMName, needsHuman("SourceVMAmbiguous",
		fmt.Sprintf("%d VMs on ESXi host %q are named %q: vmids %s. Set vmid instead of the name to choose one", len(found), host, name, strings.Join(ids, ", ")), "", nil))
}

// findSource observes the source VM a migration names. With a recorded
// identity it reads that vmid and checks it is still the same .vmx; before
// discovery it picks the VM the spec names from the host's inventory,
// reusing one read at most maxAge old (zero: the VM as the host shows it
// now, see pickNamedNow).
func (e *Engine) findSource(ctx context.Context, spec Spec, id record.Identity, maxAge time.Duration) (*esxi.VM, error) {
	c, err := e.hostClient(spec.Host)
	if err != nil {
		return nil, err
	}
	var listing *inventoryEntry
	if id.VMID == 0 && maxAge == 0 && spec.VMID == 0 {
		var vm *esxi.VM
		if vm, listing = e.pickNamedNow(ctx, c, spec); vm != nil {
			return vm, nil
		}
	}
	if id.VMID != 0 {
		vm, err := c.VM(ctx, id.VMID)
		if errors.Is(err, esxi.ErrVMNotFound) {
			return nil, onField(FieldSource, permanent("SourceVMNotFound",
				fmt.Sprintf("the source VM %q (vmid %d) is no longer registered on ESXi host %q", id.VMName, id.VMID, spec.Host),
				"register the VM on the host again, or remove this migration and start a new one", err))
		}
		if err != nil {
			return nil, err
		}
		if id.VMXPath != "" && vm.VMXPath != id.VMXPath {
			return nil, onField(FieldSource, permanent("SourceVMChanged",
				fmt.Sprintf("vmid %d on ESXi host %q is now %s, not %s as recorded: the VM was unregistered and another took its id", id.VMID, spec.Host, vm.VMXPath, id.VMXPath),
				"find the original VM (its new vmid) and start a new migration for it", nil))
		}
		return &vm, nil
	}
	if maxAge == 0 && spec.VMID > 0 {
		// One VM, read now: no need for the whole inventory.
		vm, err := c.VM(ctx, spec.VMID)
		switch {
		case errors.Is(err, esxi.ErrVMNotFound):
			_, perr := PickVM(nil, spec.Host, spec.VMName, spec.VMID)
			return nil, perr
		case err != nil:
			return nil, err
		}
		picked, err := PickVM([]esxi.VM{vm}, spec.Host, spec.VMName, spec.VMID)
		if err != nil {
			return nil, err
		}
		return &picked, nil
	}
	if listing == nil {
		if listing, err = e.inventory(ctx, spec.Host, maxAge); err != nil {
			return nil, err
		}
	}
	vms, hostProblems, err := listing.vms, listing.problems, listing.err
	if err != nil {
		return nil, err
	}
	vm, err := PickVM(vms, spec.Host, spec.VMName, spec.VMID)
	if err != nil {
		return nil, err
	}
	// What makes every VM's data uncertain concerns this one too, as
	// Client.VM reports it: plan and apply see the same problems.
	vm.Problems = slices.Clone(vm.Problems)
	for _, p := range hostProblems {
		if p.HostWide {
			vm.Problems = append(vm.Problems, p)
		}
	}
	return &vm, nil
}

// pickNamedNow finds the VM a spec names without reading every VM of the
// host for each migration: the name is looked up in the host's listing
// that a wave's discoveries share (at most DefaultInventoryMaxAge old, as
// a plan's), and the VM found is read again now by its vmid, which must
// still carry that name and .vmx. It reports false when the shared
// listing gives no single VM of that name or the fresh read disagrees
// with it; the caller then reads the whole host now, so a VM registered,
// renamed or re-registered since the listing is found, and a verdict
// against the migration (no such VM, two of that name) is never made on
// a listing older than the call. A listing whose read began after the
// call did (this call's own, or a concurrent caller's) is that whole
// read: it is returned for the caller's verdict rather than read again.
func (e *Engine) pickNamedNow(ctx context.Context, c *esxi.Client, spec Spec) (*esxi.VM, *inventoryEntry) {
	called := time.Now()
	ent, err := e.inventory(ctx, spec.Host, DefaultInventoryMaxAge)
	if err != nil || ent.err != nil {
		return nil, nil
	}
	listed, err := PickVM(ent.vms, spec.Host, spec.VMName, 0)
	if err != nil {
		if ent.started.Before(called) {
			ent = nil
		}
		return nil, ent
	}
	vm, err := c.VM(ctx, listed.VMID)
	if err != nil || vm.System || vm.Name != spec.VMName || vm.VMXPath != listed.VMXPath {
		return nil, nil
	}
	return &vm, nil
}

// esxiClient returns the source host's client.
func (r *run) esxiClient() (*esxi.Client, error) { return r.e.hostClient(r.spec.Host) }

// observeSource reads the source VM now: by the recorded vmid (checking
// it is still the same .vmx), else the VM the spec names.
func (r *run) observeSource(ctx context.Context) (*esxi.VM, error) {
	vm, err := r.e.findSource(ctx, r.spec, r.rec().Identity, 0)
	if err != nil {
		return nil, err
	}
	r.src = vm
	return vm, nil
}
