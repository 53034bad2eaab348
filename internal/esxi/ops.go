package esxi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// maxScriptBytes keeps one exec's command line well below Linux's 128 KiB
// limit on a single argument (sshd runs `sh -c <command>`).
const maxScriptBytes = 32 << 10

// runMany runs cmds framed in as few execs as the script size limit
// allows, spread over the session pool in parallel, and returns the results
// by label. This is one round trip regardless of len(cmds).
func (c *Client) runMany(ctx context.Context, op string, labels []string, cmds []Command) (map[string]Result, []Problem, error) {
	var batches []*Batch
	var cur *Batch
	size := 0
	for i := range cmds {
		line := len(cmds[i].String()) + len(labels[i]) + 120
		if cur == nil || size+line > maxScriptBytes {
			b, err := NewBatch()
			if err != nil {
				return nil, nil, err
			}
			batches = append(batches, b)
			cur, size = b, 0
		}
		if err := cur.Add(labels[i], cmds[i]); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op, err)
		}
		size += line
	}
	// Spread over the pool: split big batches so every session has work.
	if n := cap(c.sem); len(batches) < n && len(cmds) > 4*len(batches) {
		batches = rebalance(batches, n)
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = map[string]Result{}
		probs   []Problem
		errs    []error
	)
	for _, b := range batches {
		wg.Add(1)
		go func(b *Batch) {
			defer wg.Done()
			rs, ps, err := c.runBatch(ctx, op, b)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			probs = append(probs, ps...)
			for _, r := range rs {
				results[r.Label] = r
			}
		}(b)
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errs[0]
	}
	return results, probs, nil
}

func rebalance(batches []*Batch, n int) []*Batch {
	var items []batchItem
	for _, b := range batches {
		items = append(items, b.items...)
	}
	per := (len(items) + n - 1) / n
	var out []*Batch
	for i := 0; i < len(items); i += per {
		end := min(i+per, len(items))
		b, err := NewBatch()
		if err != nil {
			return batches
		}
		b.items = append(b.items, items[i:end]...)
		out = append(out, b)
	}
	return out
}

// vimErr checks one vim-cmd result for a fault, a shell error or a bad
// exit status and returns a classified error, or nil.
func (c *Client) vimErr(op string, vmid int, r Result) *Error {
	if f := ParseFault(r.Output); f != nil {
		kind, class, hint := faultClass(f)
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: hint, Err: f}
	}
	if kind, class, hint, ok := classifyText(r.Output); ok && r.ExitStatus != 0 {
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: hint, Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	if r.ExitStatus == -1 {
		return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: "the output was cut short: retry"}
	}
	if r.ExitStatus != 0 {
		return &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
			Msg: fmt.Sprintf("vim-cmd exited with status %d", r.ExitStatus), Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	return nil
}

// fileErr classifies a failed cat/stat of path.
func (c *Client) fileErr(op, path string, vmid int, r Result) *Error {
	if r.ExitStatus == 0 {
		return nil
	}
	if r.ExitStatus == -1 {
		return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path, Msg: "the output was cut short: retry"}
	}
	if kind, class, hint, ok := classifyText(r.Output); ok {
		return &Error{Class: class, Kind: kind, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path, Msg: hint, Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
	}
	return &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid, Path: path,
		Msg: fmt.Sprintf("exit status %d", r.ExitStatus), Err: errors.New(strings.TrimSpace(truncate(r.Output, 500)))}
}

// Version returns the host's product version (`vmware -v`).
func (c *Client) Version(ctx context.Context) (HostVersion, error) {
	rs, _, err := c.runMany(ctx, "vmware -v", []string{"version"}, []Command{VMwareVersion()})
	if err != nil {
		return HostVersion{}, err
	}
	r := rs["version"]
	if e := c.vimErr("vmware -v", 0, r); e != nil {
		return HostVersion{}, e
	}
	v, probs := ParseVersion(r.Output)
	if len(probs) > 0 {
		return v, &Error{Class: Permanent, Kind: ErrNotESXi, Host: c.cfg.Name, Op: "vmware -v", Msg: probs[0].Message + ": is this an ESXi host?"}
	}
	return v, nil
}

// PowerState returns the VM's power state (`vim-cmd vmsvc/power.getstate`).
func (c *Client) PowerState(ctx context.Context, vmid int) (PowerState, error) {
	rs, err := c.vimSequence(ctx, "power.getstate", vmid, PowerGetState)
	if err != nil {
		return PowerStateUnknown, err
	}
	return c.stateOf("power.getstate", vmid, rs[0])
}

func (c *Client) stateOf(op string, vmid int, r Result) (PowerState, error) {
	if e := c.vimErr(op, vmid, r); e != nil {
		return PowerStateUnknown, e
	}
	st, probs := ParsePowerState(r.Output)
	if st == PowerStateUnknown {
		return st, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, VMID: vmid,
			Msg: fmt.Sprintf("cannot read the power state (%s)", problemsText(probs))}
	}
	return st, nil
}

func problemsText(ps []Problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// vimSequence runs the given per-VM vim-cmd operations in order in one exec.
func (c *Client) vimSequence(ctx context.Context, op string, vmid int, ctors ...func(int) (Command, error)) ([]Result, error) {
	labels := make([]string, len(ctors))
	cmds := make([]Command, len(ctors))
	for i, mk := range ctors {
		cmd, err := mk(vmid)
		if err != nil {
			return nil, &Error{Class: Permanent, Host: c.cfg.Name, Op: op, VMID: vmid, Msg: err.Error()}
		}
		labels[i] = "s" + strconv.Itoa(i)
		cmds[i] = cmd
	}
	b, err := NewBatch()
	if err != nil {
		return nil, err
	}
	for i := range cmds {
		if err := b.Add(labels[i], cmds[i]); err != nil {
			return nil, err
		}
	}
	rs, _, err := c.runBatch(ctx, op, b)
	if err != nil {
		return nil, err
	}
	return rs, nil
}

// PowerOff powers the VM off hard (`vim-cmd vmsvc/power.off`). A VM that is
// already off is success. The state is read back in the same exec.
func (c *Client) PowerOff(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.off", vmid, PowerOff, PowerGetState)
	if err != nil {
		return err
	}
	st, stErr := c.stateOf("power.off", vmid, rs[1])
	if stErr == nil && st == PoweredOff {
		return nil
	}
	if e := c.vimErr("power.off", vmid, rs[0]); e != nil {
		return e
	}
	if stErr != nil {
		return stErr
	}
	return &Error{Class: Transient, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "power.off", VMID: vmid,
		Msg: fmt.Sprintf("the VM is still %s after power.off: retry", st)}
}

// PowerOn powers the VM on (`vim-cmd vmsvc/power.on`). A VM that is already
// on is success (older hosts print a fault, ESXi 6.x only "Power on
// failed"; the state read back in the same exec decides).
func (c *Client) PowerOn(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.on", vmid, PowerOn, PowerGetState)
	if err != nil {
		return err
	}
	st, stErr := c.stateOf("power.on", vmid, rs[1])
	if stErr == nil && st == PoweredOn {
		return nil
	}
	if e := c.vimErr("power.on", vmid, rs[0]); e != nil {
		return e
	}
	if stErr != nil {
		return stErr
	}
	return &Error{Class: NeedsHuman, Kind: ErrPowerOnFailed, Host: c.cfg.Name, Op: "power.on", VMID: vmid,
		Msg: fmt.Sprintf("the VM is %s after power.on: check for a pending question or error in the host client", st)}
}

// SetPollInterval changes how often Shutdown polls the power state.
func (c *Client) SetPollInterval(d time.Duration) {
	if d > 0 {
		c.pollInterval = d
	}
}

// Shutdown asks VMware Tools to shut the guest down
// (`vim-cmd vmsvc/power.shutdown`) and polls power.getstate until the VM is
// off or ctx ends. A VM that is already off is success. Without running
// Tools it returns an error matching [ErrToolsUnavailable] (class
// NeedsHuman) without touching the VM; the caller decides whether a hard
// [Client.PowerOff] is acceptable. Bound the wait with ctx's deadline.
func (c *Client) Shutdown(ctx context.Context, vmid int) error {
	rs, err := c.vimSequence(ctx, "power.shutdown", vmid, PowerGetState, GetGuest)
	if err != nil {
		return err
	}
	st, err := c.stateOf("power.shutdown", vmid, rs[0])
	if err != nil {
		return err
	}
	switch st {
	case PoweredOff:
		return nil
	case Suspended:
		return &Error{Class: NeedsHuman, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "power.shutdown", VMID: vmid,
			Msg: "the VM is suspended: power it on and shut it down, or power it off (losing its suspended state)"}
	}
	if e := c.vimErr("get.guest", vmid, rs[1]); e != nil {
		return e
	}
	g, _ := ParseGuestInfo(rs[1].Output)
	if !g.ToolsRunning() {
		return &Error{Class: NeedsHuman, Kind: ErrToolsUnavailable, Host: c.cfg.Name, Op: "power.shutdown", VMID: vmid,
			Msg: fmt.Sprintf("VMware Tools is not running in the guest (toolsRunningStatus %q): shut the guest down from inside, or allow a hard power off", g.ToolsRunningStatus)}
	}
	rs, err = c.vimSequence(ctx, "power.shutdown", vmid, PowerShutdown)
	if err != nil {
		return err
	}
	if e := c.vimErr("power.shutdown", vmid, rs[0]); e != nil {
		var f *Fault
		if errors.As(e, &f) && f.ShortType() == "InvalidPowerState" && f.Fields["existingState"] == "poweredOff" {
			return nil
		}
		return e
	}
	return c.waitState(ctx, vmid, PoweredOff)
}

// waitState polls power.getstate until the VM reaches want or ctx ends.
func (c *Client) waitState(ctx context.Context, vmid int, want PowerState) error {
	t := time.NewTicker(c.pollInterval)
	defer t.Stop()
	last := PowerStateUnknown
	for {
		st, err := c.PowerState(ctx, vmid)
		if err == nil {
			if st == want {
				return nil
			}
			last = st
		} else if Classify(err) != Transient || ctx.Err() != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-t.C:
			continue
		}
		break
	}
	return &Error{Class: Transient, Kind: ErrInvalidState, Host: c.cfg.Name, Op: "waiting for power state", VMID: vmid,
		Msg: fmt.Sprintf("the VM is still %s, not %s, when the wait ended: give the guest more time or power it off", last, want), Err: ctx.Err()}
}

// ddBlockSize picks the largest block size (<= 1 MiB, a power of two,
// >= 512) that divides both offset and length.
func ddBlockSize(offset, length int64) (int64, error) {
	if offset < 0 || length <= 0 {
		return 0, fmt.Errorf("invalid range offset=%d length=%d", offset, length)
	}
	for bs := int64(maxDDBlock); bs >= 512; bs /= 2 {
		if offset%bs == 0 && length%bs == 0 {
			return bs, nil
		}
	}
	return 0, fmt.Errorf("range offset=%d length=%d is not aligned to 512 bytes: dd can only read whole blocks", offset, length)
}

// ReadRange streams length bytes of the file at path, starting at offset,
// to w, using `dd` with whole blocks (the largest power-of-two block size
// up to 1 MiB that divides both offset and length). offset and length must
// be multiples of 512. Fewer bytes than asked (the file is shorter) is an
// error; so is a locked file (a powered-on VM's disk): power the VM off
// first. It returns the number of bytes written to w, so a caller can
// resume from offset+n.
func (c *Client) ReadRange(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	bs, err := ddBlockSize(offset, length)
	if err != nil {
		return 0, &Error{Class: Permanent, Host: c.cfg.Name, Op: "dd", Path: path, Msg: err.Error()}
	}
	cmd, err := DD(path, bs, offset/bs, length/bs)
	if err != nil {
		return 0, &Error{Class: Permanent, Host: c.cfg.Name, Op: "dd", Path: path, Msg: err.Error()}
	}
	cw := &countingWriter{w: w}
	res, err := c.exec(ctx, "dd", cmd.String(), cw)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Path == "" {
			e.Path = path
		}
		return cw.n, err
	}
	if res.status != 0 {
		r := Result{Output: res.stderr, ExitStatus: res.status}
		return cw.n, c.fileErr("dd", path, 0, r)
	}
	if cw.n != length {
		return cw.n, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "dd", Path: path,
			Msg: fmt.Sprintf("read %d bytes at offset %d, expected %d: the file is shorter than the range (disk resized or wrong file?)", cw.n, offset, length)}
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}

// FileSizes returns the size in bytes of each path (`stat -c '%s %n'`), in
// one exec. A missing file is an error matching [ErrFileNotFound].
func (c *Client) FileSizes(ctx context.Context, paths ...string) (map[string]int64, error) {
	labels := make([]string, len(paths))
	cmds := make([]Command, len(paths))
	for i, p := range paths {
		cmd, err := StatSize(p)
		if err != nil {
			return nil, &Error{Class: Permanent, Host: c.cfg.Name, Op: "stat", Path: p, Msg: err.Error()}
		}
		labels[i], cmds[i] = "f"+strconv.Itoa(i), cmd
	}
	rs, _, err := c.runMany(ctx, "stat", labels, cmds)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(paths))
	for i, p := range paths {
		r := rs[labels[i]]
		if e := c.fileErr("stat", p, 0, r); e != nil {
			return nil, e
		}
		line := strings.TrimRight(r.Output, "\n")
		sp := strings.IndexByte(line, ' ')
		var n int64
		if sp > 0 {
			n, err = strconv.ParseInt(line[:sp], 10, 64)
		}
		if sp <= 0 || err != nil || line[sp+1:] != p {
			return nil, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "stat", Path: p, Msg: fmt.Sprintf("unexpected stat output %q", truncate(line, 200))}
		}
		out[p] = n
	}
	return out, nil
}

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
