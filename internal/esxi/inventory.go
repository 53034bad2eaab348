package esxi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// Inventory returns every VM registered on the host, fully populated, in
// three round trips whatever the number of VMs: (1) vmInventory.xml and
// getallvms; (2) every .vmx plus power.getstate, get.guest and
// snapshot.get per VM; (3) every disk descriptor. Round trips 2 and 3 are
// split over the session pool in parallel. Per-VM trouble is reported in
// VM.Problems; problems with the host as a whole in the returned list.
//
// Reading is side-effect free, so a transient failure (a dropped
// connection, hostd busy) is retried a few times with backoff.
func (c *Client) Inventory(ctx context.Context) ([]VM, []Problem, error) {
	var vms []VM
	var probs []Problem
	err := retry.Do(ctx, readRetry, isTransient, func(ctx context.Context) error {
		var err error
		vms, probs, err = c.collect(ctx, 0)
		return err
	})
	return vms, probs, err
}

// readRetry bounds retries of read-only operations.
var readRetry = retry.Policy{Attempts: 3, Initial: 500 * time.Millisecond, Max: 2 * time.Second}

func isTransient(err error) bool { return Classify(err) == Transient }

// VM returns one VM by vmid, built the same way as [Client.Inventory]. An
// unknown vmid is an error matching [ErrVMNotFound].
func (c *Client) VM(ctx context.Context, vmid int) (VM, error) {
	if vmid <= 0 {
		return VM{}, &Error{Class: Permanent, Kind: ErrVMNotFound, Host: c.cfg.Name, Op: "reading VM", VMID: vmid, Msg: "vmids are positive integers"}
	}
	vms, probs, err := c.collect(ctx, vmid)
	if err != nil {
		return VM{}, err
	}
	for _, vm := range vms {
		if vm.VMID == vmid {
			vm.Problems = append(vm.Problems, probs...)
			return vm, nil
		}
	}
	return VM{}, &Error{Class: Permanent, Kind: ErrVMNotFound, Host: c.cfg.Name, Op: "reading VM", VMID: vmid,
		Msg: "no VM with this vmid is registered on the host: it may have been unregistered or re-registered under a new vmid; refresh the inventory"}
}

type vmWork struct {
	vm       VM
	gav      *GetAllVMsEntry
	vmx      VMXConfig
	vmxOK    bool
	results  map[string]Result
	guestIPs map[string][]string // by lower-case MAC
}

func (c *Client) collect(ctx context.Context, only int) ([]VM, []Problem, error) {
	var hostProbs []Problem

	// Round 1.
	inv, _ := Cat(InventoryXMLPath)
	labels := []string{"inventory", "getallvms"}
	cmds := []Command{inv, GetAllVMs()}
	if only > 0 {
		l, cm := perVMCommands(only)
		labels, cmds = append(labels, l...), append(cmds, cm...)
	}
	r1, probs, err := c.runMany(ctx, "inventory", labels, cmds)
	if err != nil {
		return nil, nil, err
	}
	hostProbs = append(hostProbs, probs...)
	gavRes := r1["getallvms"]
	if e := c.vimErr("getallvms", 0, gavRes); e != nil {
		return nil, nil, e
	}
	gav, gavProbs := ParseGetAllVMs(gavRes.Output)
	gavByID := map[int]*GetAllVMsEntry{}
	for i := range gav.VMs {
		gavByID[gav.VMs[i].VMID] = &gav.VMs[i]
	}
	skipped := map[int]bool{}
	for _, id := range gav.Skipped {
		skipped[id] = true
	}

	var work []*vmWork
	seen := map[int]bool{}
	invRes := r1["inventory"]
	if e := c.fileErr("cat", InventoryXMLPath, 0, invRes); e != nil {
		hostProbs = append(hostProbs, Problem{Source: InventoryXMLPath, Message: "unreadable, using getallvms paths instead: " + e.Error()})
		hostProbs = append(hostProbs, gavProbs...)
	} else {
		// vmInventory.xml is authoritative for the VM list and paths (a VM
		// it lists that getallvms lacks is reported per VM, and names come
		// from the .vmx), so a getallvms line read as a multi-line
		// annotation, or a row that splits into columns in several ways,
		// is not worth reporting here.
		for _, p := range gavProbs {
			if !strings.Contains(p.Message, "is not a complete VM row") && !strings.Contains(p.Message, "splits into columns") {
				hostProbs = append(hostProbs, p)
			}
		}
		entries, probs := ParseVMInventory(invRes.Output)
		hostProbs = append(hostProbs, probs...)
		for _, e := range entries {
			if only > 0 && e.VMID != only {
				continue
			}
			w := &vmWork{vm: VM{VMID: e.VMID, VMXPath: e.VMXPath}, gav: gavByID[e.VMID]}
			if w.gav == nil {
				if skipped[e.VMID] {
					w.vm.Problems = append(w.vm.Problems, Problem{Source: "getallvms", Message: "hostd skips this VM as invalid (its datastore may be missing or its .vmx unreadable)"})
				} else {
					w.vm.Problems = append(w.vm.Problems, Problem{Source: "getallvms", Message: "registered in vmInventory.xml but not listed by getallvms"})
				}
			}
			seen[e.VMID] = true
			work = append(work, w)
		}
	}
	for i := range gav.VMs {
		g := &gav.VMs[i]
		if seen[g.VMID] || (only > 0 && g.VMID != only) {
			continue
		}
		w := &vmWork{vm: VM{VMID: g.VMID}, gav: g}
		switch {
		case g.Ambiguous:
			w.vm.Problems = append(w.vm.Problems, Problem{Source: "getallvms", Message: "not in vmInventory.xml and its getallvms row is ambiguous: .vmx path unknown"})
		case g.Datastore == "" && strings.HasPrefix(g.File, "/"):
			w.vm.VMXPath = g.File
		default:
			w.vm.VMXPath = VolumesRoot + "/" + g.Datastore + "/" + g.File
		}
		if w.vm.VMXPath != "" {
			if _, _, err := splitVolumePath(w.vm.VMXPath); err != nil {
				w.vm.Problems = append(w.vm.Problems, Problem{Source: "getallvms", Message: err.Error()})
				w.vm.VMXPath = ""
			}
		}
		work = append(work, w)
	}
	sort.Slice(work, func(i, j int) bool { return work[i].vm.VMID < work[j].vm.VMID })
	if only > 0 {
		// The per-VM commands ran in round 1: a missing VM shows there.
		if len(work) == 0 {
			if e := c.vimErr("power.getstate", only, r1[perVMLabel("state", only)]); e != nil && !errors.Is(e, ErrVMNotFound) {
				return nil, nil, e
			}
			return nil, hostProbs, nil
		}
		work[0].results = r1
	}

	// Round 2: .vmx files (and per-VM vim-cmd for the full inventory).
	labels, cmds = nil, nil
	for _, w := range work {
		if w.vm.VMXPath != "" {
			cmd, err := Cat(w.vm.VMXPath)
			if err != nil {
				w.vm.Problems = append(w.vm.Problems, Problem{Source: "vmx", Message: err.Error()})
				w.vm.VMXPath = ""
			} else {
				labels, cmds = append(labels, perVMLabel("vmx", w.vm.VMID)), append(cmds, cmd)
			}
		}
		if only == 0 {
			l, cm := perVMCommands(w.vm.VMID)
			labels, cmds = append(labels, l...), append(cmds, cm...)
		}
	}
	r2, probs, err := c.runMany(ctx, "inventory", labels, cmds)
	if err != nil {
		return nil, nil, err
	}
	hostProbs = append(hostProbs, probs...)
	for _, w := range work {
		if w.results == nil {
			w.results = r2
		}
	}

	// Per-VM vim-cmd results and .vmx.
	var kept []*vmWork
	for _, w := range work {
		gone, err := c.applyVimResults(w)
		if err != nil {
			return nil, nil, err
		}
		if gone {
			hostProbs = append(hostProbs, Problem{Source: "inventory", Message: fmt.Sprintf("vmid %d disappeared during the refresh (unregistered)", w.vm.VMID)})
			continue
		}
		if w.vm.VMXPath != "" {
			r := r2[perVMLabel("vmx", w.vm.VMID)]
			if e := c.fileErr("cat", w.vm.VMXPath, w.vm.VMID, r); e != nil {
				if Classify(e) == Transient {
					return nil, nil, e
				}
				w.vm.Problems = append(w.vm.Problems, Problem{Source: w.vm.VMXPath, Message: e.Error()})
			} else {
				cfg, probs := ParseVMX(r.Output)
				w.vmx, w.vmxOK = cfg, true
				w.vm.Problems = append(w.vm.Problems, withSource(probs, w.vm.VMXPath)...)
			}
		}
		kept = append(kept, w)
	}
	work = kept

	// Round 3: descriptors.
	descLabel := map[string]string{}
	labels, cmds = nil, nil
	for _, w := range work {
		if !w.vmxOK {
			continue
		}
		for _, d := range w.vmx.Disks {
			if !d.Present {
				continue
			}
			p, err := ResolveDiskPath(w.vm.VMXPath, d.FileName)
			if err != nil {
				continue // reported when the disk is assembled
			}
			if _, ok := descLabel[p]; ok {
				continue
			}
			cmd, err := Cat(p)
			if err != nil {
				continue
			}
			l := "d" + strconv.Itoa(len(descLabel))
			descLabel[p] = l
			labels, cmds = append(labels, l), append(cmds, cmd)
		}
	}
	r3 := map[string]Result{}
	if len(cmds) > 0 {
		r3, probs, err = c.runMany(ctx, "inventory", labels, cmds)
		if err != nil {
			return nil, nil, err
		}
		hostProbs = append(hostProbs, probs...)
	}

	vms := make([]VM, 0, len(work))
	for _, w := range work {
		c.assemble(w, func(p string) (Result, bool) {
			l, ok := descLabel[p]
			if !ok {
				return Result{}, false
			}
			r, ok := r3[l]
			return r, ok
		})
		vms = append(vms, w.vm)
	}
	return vms, hostProbs, nil
}

func perVMLabel(kind string, vmid int) string { return kind + ":" + strconv.Itoa(vmid) }

func perVMCommands(vmid int) ([]string, []Command) {
	st, _ := PowerGetState(vmid)
	gg, _ := GetGuest(vmid)
	sg, _ := SnapshotGet(vmid)
	return []string{perVMLabel("state", vmid), perVMLabel("guest", vmid), perVMLabel("snap", vmid)},
		[]Command{st, gg, sg}
}

// applyVimResults fills power state, guest and snapshot data. gone is true
// when hostd no longer knows the VM; a Transient error aborts the refresh.
func (c *Client) applyVimResults(w *vmWork) (gone bool, err error) {
	id := w.vm.VMID
	rs := w.results
	stRes, ok := rs[perVMLabel("state", id)]
	if !ok {
		w.vm.Problems = append(w.vm.Problems, Problem{Source: "power.getstate", Message: "no output"})
		return false, nil
	}
	st, stErr := c.stateOf("power.getstate", id, stRes)
	if stErr != nil {
		if errors.Is(stErr, ErrVMNotFound) {
			return true, nil
		}
		if Classify(stErr) == Transient {
			return false, stErr
		}
		w.vm.Problems = append(w.vm.Problems, Problem{Source: "power.getstate", Message: stErr.Error()})
	}
	w.vm.PowerState = st

	gRes := rs[perVMLabel("guest", id)]
	if e := c.vimErr("get.guest", id, gRes); e != nil {
		if Classify(e) == Transient {
			return false, e
		}
		w.vm.Problems = append(w.vm.Problems, Problem{Source: "get.guest", Message: e.Error()})
	} else {
		g, probs := ParseGuestInfo(gRes.Output)
		w.vm.Problems = append(w.vm.Problems, probs...)
		w.vm.ToolsStatus = g.ToolsStatus
		w.vm.ToolsRunning = g.ToolsRunning()
		ipsByMAC := map[string][]string{}
		for _, n := range g.NICs {
			w.vm.GuestIPs = appendUnique(w.vm.GuestIPs, n.IPs...)
			if n.MAC != "" {
				ipsByMAC[n.MAC] = append(ipsByMAC[n.MAC], n.IPs...)
			}
		}
		if len(w.vm.GuestIPs) == 0 && g.IPAddress != "" {
			w.vm.GuestIPs = []string{g.IPAddress}
		}
		w.guestIPs = ipsByMAC
	}

	sRes := rs[perVMLabel("snap", id)]
	if e := c.vimErr("snapshot.get", id, sRes); e != nil {
		if Classify(e) == Transient {
			return false, e
		}
		w.vm.Problems = append(w.vm.Problems, Problem{Source: "snapshot.get", Message: e.Error()})
	} else {
		snaps, probs := ParseSnapshotGet(sRes.Output)
		w.vm.Snapshots = snaps
		w.vm.Problems = append(w.vm.Problems, probs...)
	}
	return false, nil
}

func appendUnique(list []string, items ...string) []string {
	for _, it := range items {
		dup := false
		for _, x := range list {
			if x == it {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, it)
		}
	}
	return list
}

// assemble fills the VM from its .vmx and disk descriptors.
func (c *Client) assemble(w *vmWork, desc func(string) (Result, bool)) {
	vm := &w.vm
	if w.gav != nil && !w.gav.Ambiguous && w.gav.Datastore != "" {
		vm.Datastore = w.gav.Datastore
	} else if ds, _, err := splitVolumePath(vm.VMXPath); err == nil {
		vm.Datastore = ds
	}
	if !w.vmxOK {
		if w.gav != nil && !w.gav.Ambiguous {
			vm.Name = w.gav.Name
			vm.GuestOS = w.gav.GuestOS
			vm.Annotation = w.gav.Annotation
			if n, err := strconv.Atoi(strings.TrimPrefix(w.gav.Version, "vmx-")); err == nil {
				vm.HardwareVersion = n
			}
		}
		return
	}
	x := w.vmx
	vm.Name = x.DisplayName
	if vm.Name == "" && w.gav != nil && !w.gav.Ambiguous {
		vm.Name = w.gav.Name
	}
	vm.GuestOS = x.GuestOS
	vm.HardwareVersion = x.HardwareVersion
	vm.Firmware = x.Firmware
	vm.SecureBoot = x.SecureBoot
	vm.CPUs = x.CPUs
	vm.MemoryMiB = x.MemoryMiB
	vm.Annotation = x.Annotation
	for _, n := range x.NICs {
		if !n.Present {
			continue
		}
		vm.NICs = append(vm.NICs, NIC{Device: n.Device, NetworkName: n.NetworkName, MAC: n.MAC, AdapterType: n.VirtualDev, IPs: w.guestIPs[n.MAC]})
	}
	for _, d := range x.Disks {
		if !d.Present {
			continue
		}
		disk := Disk{Device: d.Device, Bus: d.Bus, ControllerType: d.ControllerType, Mode: d.Mode, Independent: d.Independent()}
		src := vm.VMXPath + " " + d.Device
		p, err := ResolveDiskPath(vm.VMXPath, d.FileName)
		if err != nil {
			vm.Problems = append(vm.Problems, Problem{Source: src, Message: err.Error()})
			vm.Disks = append(vm.Disks, disk)
			continue
		}
		disk.DescriptorPath = p
		r, ok := desc(p)
		if !ok {
			vm.Problems = append(vm.Problems, Problem{Source: src, Message: "descriptor " + p + " was not read"})
		} else if e := c.fileErr("cat", p, vm.VMID, r); e != nil {
			vm.Problems = append(vm.Problems, Problem{Source: src, Message: e.Error()})
		} else {
			dd, probs := ParseDescriptor(r.Output)
			vm.Problems = append(vm.Problems, withSource(probs, p)...)
			disk.CreateType = dd.CreateType
			disk.CapacityBytes = dd.CapacityBytes()
			disk.Thin = dd.Thin()
			disk.OnSnapshotDelta = dd.IsDelta()
			disk.RDM, disk.RDMPassthrough = dd.RDM()
			if len(dd.Extents) > 0 && dd.Extents[0].FileName != "" {
				dp, err := ResolveDiskPath(p, dd.Extents[0].FileName)
				if err != nil {
					vm.Problems = append(vm.Problems, Problem{Source: p, Message: "extent: " + err.Error()})
				} else {
					disk.DataPath = dp
				}
			}
			if len(dd.Extents) > 1 {
				vm.Problems = append(vm.Problems, Problem{Source: p, Message: fmt.Sprintf("%d extents: only single-extent disks can be copied", len(dd.Extents))})
			}
			if dd.ParentFileNameHint != "" {
				pp, err := ResolveDiskPath(p, dd.ParentFileNameHint)
				if err != nil {
					vm.Problems = append(vm.Problems, Problem{Source: p, Message: "parentFileNameHint: " + err.Error()})
				} else {
					disk.ParentDescriptorPath = pp
				}
			}
			// RDM and snapshot-delta disks are states, not read failures:
			// the Disk flags carry them and the pre-flight checks judge them.
		}
		vm.Disks = append(vm.Disks, disk)
	}
}
