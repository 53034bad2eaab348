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
// split over the session pool in parallel.
//
// Problems belong to the VM they concern. Anything about one vmid (its
// vmInventory.xml entry, its getallvms row, hostd's "Skipping invalid VM
// 'N'", its .vmx, descriptors and vim-cmd output) is in that VM's
// VM.Problems and nowhere else, so one broken VM never blocks another. The
// returned list holds only problems about no listed VM: those marked
// [Problem.HostWide] make every VM's data uncertain (vmInventory.xml
// unreadable or unparseable as a whole, a broken exec framing); the others
// are notes that concern no VM in the list (a vmid that disappeared during
// the refresh, a getallvms line that is not a row).
//
// System VMs (see [VM.System]) and invalid VMs are listed like the others.
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

// VM returns one VM by vmid, built the same way as [Client.Inventory] and
// in as many round trips. Its Problems are its own plus the host-wide ones
// ([Problem.HostWide]), which make its data uncertain too; problems of
// other VMs never appear. An unknown vmid is an error matching
// [ErrVMNotFound].
func (c *Client) VM(ctx context.Context, vmid int) (VM, error) {
	if vmid <= 0 {
		return VM{}, &Error{Class: Permanent, Kind: ErrVMNotFound, Host: c.cfg.Name, Op: "reading VM", VMID: vmid, Msg: "vmids are positive integers"}
	}
	vms, probs, err := c.collect(ctx, vmid)
	if err != nil {
		return VM{}, err
	}
	if len(vms) != 1 || vms[0].VMID != vmid {
		return VM{}, &Error{Class: Permanent, Kind: ErrVMNotFound, Host: c.cfg.Name, Op: "reading VM", VMID: vmid,
			Msg: "no VM with this vmid is registered on the host: it may have been unregistered or re-registered under a new vmid; refresh the inventory"}
	}
	vm := vms[0]
	for _, p := range probs {
		if p.HostWide {
			vm.Problems = append(vm.Problems, p)
		}
	}
	return vm, nil
}

// vmWork is one VM while the inventory is collected.
type vmWork struct {
	vm VM
	// gav is the VM's getallvms row, nil when getallvms does not list it.
	gav *GetAllVMsEntry
	// invalid is true for a VM hostd skips as invalid: vim-cmd does not
	// know it and its .vmx cannot be read.
	invalid  bool
	vmx      VMXConfig
	vmxOK    bool
	guestIPs map[string][]string // by lower-case MAC
}

func (w *vmWork) problem(source, msg string) {
	w.vm.Problems = append(w.vm.Problems, Problem{Source: source, VMID: w.vm.VMID, Message: msg})
}

// inventoryRun carries one collection through its stages.
type inventoryRun struct {
	c *Client
	// only is the vmid of the single VM asked for, 0 for all VMs.
	only int
	work []*vmWork
	// host holds problems that concern no listed VM.
	host []Problem
	// results of the configs stage (vim-cmd and .vmx, by label) and of
	// the descriptors stage (by descriptor path).
	configs map[string]Result
	descs   map[string]Result
	// parsed and sizes are what the chains stage read: every descriptor
	// on a snapshot chain (by path) and its extents' sizes.
	parsed map[string]Descriptor
	sizes  map[string]FileSize
	// headerProblems says, by extent path, why a snapshot delta's header
	// could not be read or interpreted.
	headerProblems map[string]string
}

// collect builds the inventory in explicit stages, one round trip each
// except assemble:
//
//  1. list: vmInventory.xml and getallvms give the VM list with .vmx paths,
//     system and invalid VMs; the single-VM filter applies here, once.
//  2. configs: every listed VM's .vmx and power.getstate, get.guest and
//     snapshot.get.
//  3. descriptors: every disk descriptor the .vmx files name.
//  4. chains: for disks on snapshots only, the parent descriptors and the
//     chain's extent sizes, one round trip per chain level.
//  5. assemble: each VM from what the stages read.
//
// Each stage attaches what it learns about a VM to that VM; only problems
// about no listed VM are returned separately (see [Client.Inventory]).
func (c *Client) collect(ctx context.Context, only int) ([]VM, []Problem, error) {
	run := &inventoryRun{c: c, only: only}
	for _, stage := range []func(context.Context) error{run.list, run.readConfigs, run.readDescriptors, run.readChains} {
		if err := stage(ctx); err != nil {
			return nil, nil, err
		}
	}
	return run.assemble(), run.host, nil
}

// batch runs one stage's commands and keeps the framing problems, which
// make everything that exec read uncertain.
func (run *inventoryRun) batch(ctx context.Context, labels []string, cmds []Command) (map[string]Result, error) {
	if len(cmds) == 0 {
		return map[string]Result{}, nil
	}
	rs, probs, err := run.c.runMany(ctx, "inventory", labels, cmds)
	if err != nil {
		return nil, err
	}
	run.host = append(run.host, hostWide(probs)...)
	return rs, nil
}

// list is stage 1: the registered VMs and their .vmx paths.
//
// vmInventory.xml is authoritative for the list and the paths; getallvms
// adds VMs the file lacks (or all of them when the file is unreadable),
// marks invalid VMs ("Skipping invalid VM 'N'") and gives names for VMs
// whose .vmx is not read.
func (run *inventoryRun) list(ctx context.Context) error {
	c := run.c
	inv, _ := Cat(InventoryXMLPath)
	r, err := run.batch(ctx, []string{"inventory", "getallvms"}, []Command{inv, GetAllVMs()})
	if err != nil {
		return err
	}
	gavRes := r["getallvms"]
	if e := c.vimErr("getallvms", 0, gavRes); e != nil {
		return e
	}
	l := newVMListing(ParseGetAllVMs(gavRes.Output))
	entries, err := l.readInventoryXML(c, r["inventory"])
	if err != nil {
		return err
	}
	l.addInventoryEntries(entries)
	l.addGetAllVMsOnly()
	l.settleProblems()

	work := l.work
	// The single-VM filter: the only place that looks at run.only.
	if run.only > 0 {
		var kept []*vmWork
		for _, w := range work {
			if w.vm.VMID == run.only {
				kept = append(kept, w)
			}
		}
		work = kept
	}
	sort.Slice(work, func(i, j int) bool { return work[i].vm.VMID < work[j].vm.VMID })
	sort.SliceStable(l.loose, func(i, j int) bool { return l.loose[i].VMID < l.loose[j].VMID })
	run.work = work
	run.host = append(run.host, l.loose...)
	return nil
}

// vmListing builds stage 1's VM list from vmInventory.xml and getallvms.
type vmListing struct {
	gav      GetAllVMsResult
	gavProbs []Problem
	gavByID  map[int]*GetAllVMsEntry
	skipped  map[int]bool
	// byVM holds problems about one vmid until that VM's work exists;
	// loose holds the others.
	byVM  map[int][]Problem
	loose []Problem
	seen  map[int]bool
	work  []*vmWork
}

func newVMListing(gav GetAllVMsResult, gavProbs []Problem) *vmListing {
	l := &vmListing{
		gav:      gav,
		gavProbs: gavProbs,
		gavByID:  map[int]*GetAllVMsEntry{},
		skipped:  map[int]bool{},
		byVM:     map[int][]Problem{},
		seen:     map[int]bool{},
	}
	for i := range gav.VMs {
		l.gavByID[gav.VMs[i].VMID] = &gav.VMs[i]
	}
	for _, id := range gav.Skipped {
		l.skipped[id] = true
	}
	return l
}

// addProblems files each problem under its VM, or as loose.
func (l *vmListing) addProblems(ps []Problem) {
	for _, p := range ps {
		if p.VMID > 0 && !p.HostWide {
			l.byVM[p.VMID] = append(l.byVM[p.VMID], p)
		} else {
			l.loose = append(l.loose, p)
		}
	}
}

// readInventoryXML parses vmInventory.xml's result and files getallvms'
// problems according to whether the file could be read: unreadable (but
// not transiently) leaves getallvms as the only list and no entries.
func (l *vmListing) readInventoryXML(c *Client, invRes Result) ([]InventoryEntry, error) {
	if e := c.fileErr("cat", InventoryXMLPath, 0, invRes); e != nil {
		if Classify(e) == Transient {
			return nil, e
		}
		// getallvms is now the only list: a line it does not understand
		// may be a VM missing from it.
		l.loose = append(l.loose, Problem{Source: InventoryXMLPath, HostWide: true, Message: "unreadable, using getallvms paths instead: " + e.Error()})
		for i := range l.gavProbs {
			if l.gavProbs[i].VMID == 0 {
				l.gavProbs[i].HostWide = true
			}
		}
		l.addProblems(l.gavProbs)
		return nil, nil
	}
	// With vmInventory.xml authoritative for the list and paths (and
	// names coming from the .vmx), a getallvms line read as part of a
	// multi-line annotation, or a row that splits into columns in
	// several ways, is not worth reporting.
	for _, p := range l.gavProbs {
		if !strings.Contains(p.Message, "is not a complete VM row") && !strings.Contains(p.Message, "splits into columns") {
			l.addProblems([]Problem{p})
		}
	}
	entries, probs := ParseVMInventory(invRes.Output)
	l.addProblems(probs)
	return entries, nil
}

func (l *vmListing) newWork(vmid int) *vmWork {
	w := &vmWork{vm: VM{VMID: vmid}, gav: l.gavByID[vmid]}
	l.seen[vmid] = true
	l.work = append(l.work, w)
	return w
}

// addInventoryEntries lists the VMs of vmInventory.xml, and the entries
// it has but could not give a path for: still registered VMs, listed with
// their problem.
func (l *vmListing) addInventoryEntries(entries []InventoryEntry) {
	for _, e := range entries {
		w := l.newWork(e.VMID)
		w.vm.VMXPath, w.vm.System = e.VMXPath, e.System
	}
	for vmid := range l.byVM {
		if !l.seen[vmid] && l.gavByID[vmid] == nil && !l.skipped[vmid] {
			l.newWork(vmid)
		}
	}
}

// addGetAllVMsOnly lists the VMs getallvms has and vmInventory.xml lacks,
// with the .vmx path getallvms gives, and the VMs hostd skips as invalid.
func (l *vmListing) addGetAllVMsOnly() {
	for i := range l.gav.VMs {
		g := &l.gav.VMs[i]
		if l.seen[g.VMID] {
			continue
		}
		w := l.newWork(g.VMID)
		switch {
		case g.Ambiguous:
			w.problem("getallvms", "not in vmInventory.xml and its getallvms row is ambiguous: .vmx path unknown")
		case g.Datastore == "" && strings.HasPrefix(g.File, "/"):
			w.vm.VMXPath = g.File
		default:
			w.vm.VMXPath = VolumesRoot + "/" + g.Datastore + "/" + g.File
		}
		if w.vm.VMXPath != "" {
			system, err := checkVMXPath(w.vm.VMXPath)
			if err != nil {
				w.problem("getallvms", err.Error())
				w.vm.VMXPath = ""
			}
			w.vm.System = system
		}
	}
	for _, id := range l.gav.Skipped {
		if !l.seen[id] {
			l.newWork(id)
		}
	}
}

// settleProblems marks system and invalid VMs, notes VMs getallvms does
// not list, and hands each VM its waiting problems; problems about a vmid
// listed nowhere concern no listed VM and become loose.
func (l *vmListing) settleProblems() {
	for _, w := range l.work {
		id := w.vm.VMID
		if g := w.gav; g != nil && !g.Ambiguous && g.Datastore == "" && strings.HasPrefix(g.File, "/") {
			// getallvms prints "[] /abs/path.vmx" for system VMs.
			w.vm.System = true
		}
		switch {
		case l.skipped[id]:
			w.invalid = true
			w.problem("getallvms", "hostd skips this VM as invalid (its datastore may be missing or its .vmx unreadable)")
		case w.gav == nil:
			w.problem("getallvms", "registered in vmInventory.xml but not listed by getallvms")
		}
		w.vm.Problems = append(w.vm.Problems, l.byVM[id]...)
		delete(l.byVM, id)
	}
	for _, ps := range l.byVM {
		l.loose = append(l.loose, ps...)
	}
}

// readConfigs is stage 2: .vmx files and per-VM vim-cmd output. System
// VMs are never migrated, so their .vmx (outside /vmfs/volumes, e.g.
// /var/run/crx/infra/) is not read. vim-cmd does not know invalid VMs, so
// they get none; their .vmx is still read, and why it cannot be ("No such
// file or directory") is their own problem.
func (run *inventoryRun) readConfigs(ctx context.Context) error {
	var labels []string
	var cmds []Command
	for _, w := range run.work {
		if w.vm.VMXPath != "" && !w.vm.System {
			cmd, err := Cat(w.vm.VMXPath)
			if err != nil {
				w.problem("vmx", err.Error())
				w.vm.VMXPath = ""
			} else {
				labels, cmds = append(labels, perVMLabel("vmx", w.vm.VMID)), append(cmds, cmd)
			}
		}
		if !w.invalid {
			l, cm := perVMCommands(w.vm.VMID)
			labels, cmds = append(labels, l...), append(cmds, cm...)
		}
	}
	rs, err := run.batch(ctx, labels, cmds)
	if err != nil {
		return err
	}
	run.configs = rs

	var kept []*vmWork
	for _, w := range run.work {
		gone := false
		if !w.invalid {
			var err error
			if gone, err = run.c.applyVimResults(w, rs); err != nil {
				return err
			}
		}
		if gone {
			run.host = append(run.host, Problem{Source: "inventory", VMID: w.vm.VMID, Message: fmt.Sprintf("vmid %d disappeared during the refresh (unregistered)", w.vm.VMID)})
			continue
		}
		if w.vm.VMXPath != "" && !w.vm.System {
			r := rs[perVMLabel("vmx", w.vm.VMID)]
			if e := run.c.fileErr("cat", w.vm.VMXPath, w.vm.VMID, r); e != nil {
				if Classify(e) == Transient {
					return e
				}
				w.problem(w.vm.VMXPath, e.Error())
			} else {
				cfg, probs := ParseVMX(r.Output)
				w.vmx, w.vmxOK = cfg, true
				w.vm.Problems = append(w.vm.Problems, withVMID(withSource(probs, w.vm.VMXPath), w.vm.VMID)...)
			}
		}
		kept = append(kept, w)
	}
	run.work = kept
	return nil
}

// readDescriptors is stage 3: every disk descriptor the read .vmx files
// name, each once.
func (run *inventoryRun) readDescriptors(ctx context.Context) error {
	descLabel := map[string]string{}
	var labels []string
	var cmds []Command
	for _, w := range run.work {
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
	rs, err := run.batch(ctx, labels, cmds)
	if err != nil {
		return err
	}
	run.descs = map[string]Result{}
	for p, l := range descLabel {
		if r, ok := rs[l]; ok {
			run.descs[p] = r
		}
	}
	return nil
}

// assemble is stage 4: each VM from its getallvms row, .vmx and
// descriptors.
func (run *inventoryRun) assemble() []VM {
	vms := make([]VM, 0, len(run.work))
	for _, w := range run.work {
		run.c.assemble(w, func(p string) (Result, bool) {
			r, ok := run.descs[p]
			return r, ok
		}, run.diskChain)
		w.vm.Problems = withVMID(w.vm.Problems, w.vm.VMID)
		vms = append(vms, w.vm)
	}
	return vms
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
func (c *Client) applyVimResults(w *vmWork, rs map[string]Result) (gone bool, err error) {
	id := w.vm.VMID
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
func (c *Client) assemble(w *vmWork, desc func(string) (Result, bool), chain func(string) *DiskChain) {
	vm := &w.vm
	if w.gav != nil && !w.gav.Ambiguous && w.gav.Datastore != "" {
		vm.Datastore = w.gav.Datastore
	} else if ds, _, err := splitVolumePath(vm.VMXPath); err == nil {
		vm.Datastore = ds
	}
	if !w.vmxOK {
		w.assembleFromGetAllVMs()
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
	vm.CoresPerSocket, vm.VTPM = x.CoresPerSocket, x.VTPM
	vm.MemoryMiB = x.MemoryMiB
	vm.Annotation = x.Annotation
	// A workingDir off the datastores is not one ESXi can use: the deltas
	// are then taken to be beside the .vmx.
	vm.WorkingDir, _ = ResolveWorkingDir(vm.VMXPath, x.WorkingDir)
	for _, n := range x.NICs {
		if !n.Present {
			continue
		}
		vm.NICs = append(vm.NICs, NIC{Device: n.Device, NetworkName: n.NetworkName, MAC: n.MAC, AdapterType: n.VirtualDev, IPs: w.guestIPs[n.MAC]})
	}
	for _, d := range x.Disks {
		if d.Present {
			vm.Disks = append(vm.Disks, c.assembleDisk(vm, d, desc, chain))
		}
	}
}

// assembleFromGetAllVMs fills what getallvms knows of a VM whose .vmx was
// not read.
func (w *vmWork) assembleFromGetAllVMs() {
	if w.gav == nil || w.gav.Ambiguous {
		return
	}
	vm := &w.vm
	vm.Name = w.gav.Name
	vm.GuestOS = w.gav.GuestOS
	vm.Annotation = w.gav.Annotation
	if n, err := strconv.Atoi(strings.TrimPrefix(w.gav.Version, "vmx-")); err == nil && n > 0 && n <= maxHardwareVersion {
		vm.HardwareVersion = n
	}
}

// assembleDisk is one present disk of vm's .vmx, from its descriptor and
// snapshot chain.
func (c *Client) assembleDisk(vm *VM, d VMXDisk, desc func(string) (Result, bool), chain func(string) *DiskChain) Disk {
	disk := Disk{Device: d.Device, Bus: d.Bus, ControllerType: d.ControllerType, Mode: d.Mode, Independent: d.Independent()}
	src := vm.VMXPath + " " + d.Device
	p, err := ResolveDiskPath(vm.VMXPath, d.FileName)
	if err != nil {
		vm.Problems = append(vm.Problems, Problem{Source: src, Message: err.Error()})
		return disk
	}
	disk.DescriptorPath = p
	r, ok := desc(p)
	if !ok {
		vm.Problems = append(vm.Problems, Problem{Source: src, Message: "descriptor " + p + " was not read"})
	} else if e := c.fileErr("cat", p, vm.VMID, r); e != nil {
		vm.Problems = append(vm.Problems, Problem{Source: src, Message: e.Error()})
	} else {
		vm.Problems = append(vm.Problems, applyDescriptor(&disk, p, r.Output)...)
		// RDM and snapshot-delta disks are states, not read failures:
		// the Disk flags carry them and the pre-flight checks judge them.
		// So are a chain's problems (a missing parent, a CID mismatch).
		if disk.Chain = chain(p); disk.Chain != nil && disk.Chain.Complete {
			disk.Thin = disk.Chain.BaseThin
		}
	}
	return disk
}

// applyDescriptor fills disk from the text of its descriptor at path p and
// returns the problems found.
func applyDescriptor(disk *Disk, p, text string) []Problem {
	dd, probs := ParseDescriptor(text)
	out := withSource(probs, p)
	disk.CreateType = dd.CreateType
	capacity, cprobs := DescriptorCapacity(dd)
	out = append(out, withSource(cprobs, p)...)
	disk.CapacityBytes = capacity
	disk.Thin = dd.Thin()
	disk.OnSnapshotDelta = dd.IsDelta()
	disk.RDM, disk.RDMPassthrough = dd.RDM()
	if len(dd.Extents) > 0 && dd.Extents[0].FileName != "" {
		dp, err := ResolveDiskPath(p, dd.Extents[0].FileName)
		if err != nil {
			out = append(out, Problem{Source: p, Message: "extent: " + err.Error()})
		} else {
			disk.DataPath = dp
		}
	}
	if len(dd.Extents) > 1 {
		out = append(out, Problem{Source: p, Message: fmt.Sprintf("%d extents: only single-extent disks can be copied", len(dd.Extents))})
	}
	if dd.ParentFileNameHint != "" {
		pp, err := ResolveDiskPath(p, dd.ParentFileNameHint)
		if err != nil {
			out = append(out, Problem{Source: p, Message: "parentFileNameHint: " + err.Error()})
		} else {
			disk.ParentDescriptorPath = pp
		}
	}
	return out
}
