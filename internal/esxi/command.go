package esxi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// OpKind names one of the operations this package sends to a host.
type OpKind string

// The closed set of operations. Every command line the package runs is built
// from one of these by [Command.String].
const (
	OpGetAllVMs     OpKind = "getallvms"
	OpPowerGetState OpKind = "power.getstate"
	OpPowerShutdown OpKind = "power.shutdown"
	OpPowerOff      OpKind = "power.off"
	OpPowerOn       OpKind = "power.on"
	OpGetGuest      OpKind = "get.guest"
	OpGetSummary    OpKind = "get.summary"
	OpSnapshotGet   OpKind = "snapshot.get"
	// OpSnapshotCreate and OpSnapshotRemove are built in snapshot.go.
	OpSnapshotCreate OpKind = "snapshot.create"
	OpSnapshotRemove OpKind = "snapshot.remove"
	OpCat            OpKind = "cat"
	OpDD             OpKind = "dd"
	OpStatSize       OpKind = "stat"
	OpVersion        OpKind = "vmware -v"
)

// Command is one validated shell command. Build it with the constructor
// functions ([GetAllVMs], [PowerGetState], [Cat], [DD], ...); the zero value
// is not a valid command.
type Command struct {
	kind  OpKind
	vmid  int
	paths []string
	bs    int64
	skip  int64
	count int64
	// args are the quoted words after the vmid (snapshot name and
	// description, or a snapshot id).
	args []string
}

// Kind reports which operation c performs.
func (c Command) Kind() OpKind { return c.kind }

// VMID returns the VM the command acts on, or 0.
func (c Command) VMID() int { return c.vmid }

// Paths returns the files the command reads, if any.
func (c Command) Paths() []string { return append([]string(nil), c.paths...) }

// GetAllVMs lists registered VMs: `vim-cmd vmsvc/getallvms`.
func GetAllVMs() Command { return Command{kind: OpGetAllVMs} }

// VMwareVersion prints the product and build: `vmware -v`.
func VMwareVersion() Command { return Command{kind: OpVersion} }

func vimVMCommand(kind OpKind, vmid int) (Command, error) {
	if vmid <= 0 {
		return Command{}, fmt.Errorf("invalid vmid %d: vmids are positive integers", vmid)
	}
	return Command{kind: kind, vmid: vmid}, nil
}

// PowerGetState is `vim-cmd vmsvc/power.getstate <vmid>`.
func PowerGetState(vmid int) (Command, error) { return vimVMCommand(OpPowerGetState, vmid) }

// PowerShutdown is `vim-cmd vmsvc/power.shutdown <vmid>` (guest shutdown via VMware Tools).
func PowerShutdown(vmid int) (Command, error) { return vimVMCommand(OpPowerShutdown, vmid) }

// PowerOff is `vim-cmd vmsvc/power.off <vmid>` (hard power off).
func PowerOff(vmid int) (Command, error) { return vimVMCommand(OpPowerOff, vmid) }

// PowerOn is `vim-cmd vmsvc/power.on <vmid>`.
func PowerOn(vmid int) (Command, error) { return vimVMCommand(OpPowerOn, vmid) }

// GetGuest is `vim-cmd vmsvc/get.guest <vmid>`.
func GetGuest(vmid int) (Command, error) { return vimVMCommand(OpGetGuest, vmid) }

// GetSummary is `vim-cmd vmsvc/get.summary <vmid>`.
func GetSummary(vmid int) (Command, error) { return vimVMCommand(OpGetSummary, vmid) }

// SnapshotGet is `vim-cmd vmsvc/snapshot.get <vmid>`.
func SnapshotGet(vmid int) (Command, error) { return vimVMCommand(OpSnapshotGet, vmid) }

func validatePaths(paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("no file given")
	}
	for _, p := range paths {
		if err := ValidatePath(p); err != nil {
			return err
		}
	}
	return nil
}

// Cat is `cat '<file>'...`.
func Cat(paths ...string) (Command, error) {
	if err := validatePaths(paths); err != nil {
		return Command{}, err
	}
	return Command{kind: OpCat, paths: append([]string(nil), paths...)}, nil
}

// StatSize is `stat -c '%s %n' '<file>'...`, printing each file's size in bytes.
func StatSize(paths ...string) (Command, error) {
	if err := validatePaths(paths); err != nil {
		return Command{}, err
	}
	return Command{kind: OpStatSize, paths: append([]string(nil), paths...)}, nil
}

// maxDDBlock is the largest dd block size this package uses (1 MiB): BusyBox
// dd allocates one block of memory.
const maxDDBlock = 1 << 20

// DD is `dd 'if=<file>' bs=<bs> skip=<skip> count=<count>`, reading count
// whole blocks of bs bytes starting skip blocks into the file.
func DD(path string, bs, skip, count int64) (Command, error) {
	if err := ValidatePath(path); err != nil {
		return Command{}, err
	}
	if bs <= 0 || bs > maxDDBlock || bs%512 != 0 {
		return Command{}, fmt.Errorf("dd block size %d is not a multiple of 512 between 512 and %d", bs, maxDDBlock)
	}
	if skip < 0 || count <= 0 {
		return Command{}, fmt.Errorf("dd skip=%d count=%d: skip must be >= 0 and count > 0", skip, count)
	}
	return Command{kind: OpDD, paths: []string{path}, bs: bs, skip: skip, count: count}, nil
}

// String returns the shell text of c. Every variable part is either an
// integer formatted by strconv or a word quoted by [Quote].
func (c Command) String() string {
	switch c.kind {
	case OpGetAllVMs:
		return "vim-cmd vmsvc/getallvms"
	case OpPowerGetState, OpPowerShutdown, OpPowerOff, OpPowerOn, OpGetGuest, OpGetSummary, OpSnapshotGet:
		return "vim-cmd vmsvc/" + string(c.kind) + " " + strconv.Itoa(c.vmid)
	case OpSnapshotCreate, OpSnapshotRemove:
		return "vim-cmd vmsvc/" + string(c.kind) + " " + strconv.Itoa(c.vmid) + " " + quoteAll(c.args)
	case OpCat:
		return "cat " + quoteAll(c.paths)
	case OpStatSize:
		return "stat -c " + Quote("%s %n") + " " + quoteAll(c.paths)
	case OpDD:
		return "dd " + Quote("if="+c.paths[0]) +
			" bs=" + strconv.FormatInt(c.bs, 10) +
			" skip=" + strconv.FormatInt(c.skip, 10) +
			" count=" + strconv.FormatInt(c.count, 10)
	case OpVersion:
		return "vmware -v"
	case OpDatastoreList:
		return "vim-cmd hostsvc/datastore/listsummary"
	}
	// Unreachable for values built by the constructors; produce a command
	// that fails loudly rather than an empty string that would succeed.
	return "false"
}

func quoteAll(ws []string) string {
	q := make([]string, len(ws))
	for i, w := range ws {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}

// Batch frames several commands into one exec. Each command's output
// (stdout and stderr merged) is wrapped between a begin marker and an end
// marker carrying the command's exit status:
//
//	echo '@@VMM <nonce> <label>'; <command> 2>&1; echo "@@VMM-END <nonce> $?"
//
// The nonce is 128 random bits drawn per batch, so nothing the host prints
// (file contents, VM names) can forge a marker.
type Batch struct {
	nonce string
	items []batchItem
}

type batchItem struct {
	label string
	cmd   Command
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)

// NewBatch returns an empty batch with a fresh random nonce.
func NewBatch() (*Batch, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("generating batch nonce: %w", err)
	}
	return &Batch{nonce: hex.EncodeToString(b[:])}, nil
}

// Add appends cmd under label. Labels must be unique within the batch and
// made of [A-Za-z0-9_.:/-].
func (b *Batch) Add(label string, cmd Command) error {
	if !labelRE.MatchString(label) {
		return fmt.Errorf("invalid batch label %q", label)
	}
	for _, it := range b.items {
		if it.label == label {
			return fmt.Errorf("duplicate batch label %q", label)
		}
	}
	if cmd.kind == "" {
		return fmt.Errorf("batch label %q: zero Command", label)
	}
	b.items = append(b.items, batchItem{label: label, cmd: cmd})
	return nil
}

// Len is the number of commands in the batch.
func (b *Batch) Len() int { return len(b.items) }

// Script returns the shell text of the whole batch, one framed command per line.
func (b *Batch) Script() string {
	var sb strings.Builder
	for _, it := range b.items {
		sb.WriteString("echo ")
		sb.WriteString(Quote(beginMarker + " " + b.nonce + " " + it.label))
		sb.WriteString("; ")
		sb.WriteString(it.cmd.String())
		sb.WriteString(" 2>&1; echo \"")
		sb.WriteString(endMarker + " " + b.nonce)
		sb.WriteString(" $?\"\n")
	}
	return sb.String()
}

const (
	beginMarker = "@@VMM"
	endMarker   = "@@VMM-END"
)

// Result is the output of one framed command.
type Result struct {
	Label string
	// Output is everything the command printed on stdout and stderr, byte
	// for byte (a file without a final newline stays without one).
	Output string
	// ExitStatus is the command's exit status; -1 when the end marker was
	// never seen (the exec was cut short).
	ExitStatus int
}

// Parse splits the exec's stdout into one Result per command, in order.
// Commands whose begin marker is missing get ExitStatus -1 and a Problem.
func (b *Batch) Parse(stdout []byte) ([]Result, []Problem) {
	var probs []Problem
	results := make([]Result, 0, len(b.items))
	rest := stdout
	for _, it := range b.items {
		begin := []byte(beginMarker + " " + b.nonce + " " + it.label + "\n")
		i := bytes.Index(rest, begin)
		if i < 0 {
			probs = append(probs, Problem{Source: "batch", Message: fmt.Sprintf("no output section for %q (%s): the exec ended early", it.label, it.cmd.kind)})
			results = append(results, Result{Label: it.label, ExitStatus: -1})
			continue
		}
		body := rest[i+len(begin):]
		end := []byte(endMarker + " " + b.nonce + " ")
		j := bytes.Index(body, end)
		if j < 0 {
			probs = append(probs, Problem{Source: "batch", Message: fmt.Sprintf("output section for %q (%s) has no end marker: the exec ended early", it.label, it.cmd.kind)})
			results = append(results, Result{Label: it.label, Output: string(body), ExitStatus: -1})
			rest = nil
			continue
		}
		tail := body[j+len(end):]
		nl := bytes.IndexByte(tail, '\n')
		if nl < 0 {
			nl = len(tail)
		}
		// $? is 0-255; anything else (a sign, a huge number) is not an
		// exit status the shell printed.
		status, err := strconv.Atoi(string(tail[:nl]))
		if err != nil || !isDigits(string(tail[:nl])) || status > 255 {
			probs = append(probs, Problem{Source: "batch", Message: fmt.Sprintf("bad exit status %q for %q", tail[:nl], it.label)})
			status = -1
		}
		results = append(results, Result{Label: it.label, Output: string(body[:j]), ExitStatus: status})
		if nl < len(tail) {
			rest = tail[nl+1:]
		} else {
			rest = nil
		}
	}
	return results, probs
}
