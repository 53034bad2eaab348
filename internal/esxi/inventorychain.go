package esxi

import (
	"context"
	"fmt"
	"strconv"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// readChains is the inventory stage after the descriptors: for every disk
// that runs on a snapshot delta it reads the parent descriptors down to the
// base (one round trip per chain level, all disks together) and the sizes
// of the chain's extent files. VMs without snapshots cost nothing here.
func (run *inventoryRun) readChains(ctx context.Context) error {
	run.parsed = map[string]Descriptor{}
	run.sizes = map[string]FileSize{}
	run.headerProblems = map[string]string{}
	for p, r := range run.descs {
		run.parsed[p] = parsedDescriptor(r)
	}
	tops := run.chainTops()
	if len(tops) == 0 {
		return nil
	}
	cr := &chainReader{run: run, statted: map[string]bool{}, deltas: map[string]deltaExtent{}}
	for round := 0; round <= MaxChainLinks; round++ {
		b := cr.plan(tops)
		if len(b.cmds) == 0 {
			return nil
		}
		rs, err := run.batch(ctx, b.labels, b.cmds)
		if err != nil {
			return err
		}
		if err := cr.apply(b, rs); err != nil {
			return err
		}
	}
	return nil
}

// chainTops lists the descriptors of the present disks that run on a
// snapshot delta.
func (run *inventoryRun) chainTops() []string {
	var tops []string
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
				continue
			}
			if dd, ok := run.parsed[p]; ok && (dd.IsDelta() || dd.ParentFileNameHint != "") {
				tops = append(tops, p)
			}
		}
	}
	return tops
}

// chainReader carries the chains stage from one round to the next.
type chainReader struct {
	run *inventoryRun
	// statted holds the extents whose size is asked for already.
	statted map[string]bool
	// deltas holds the snapshot deltas whose header is asked for.
	deltas map[string]deltaExtent
}

// chainBatch is one round's commands. A label's first letter says what
// its command reads: c a descriptor, h a delta's header, s a size.
type chainBatch struct {
	labels  []string
	cmds    []Command
	byLabel map[string]string // label -> the path it reads
}

func (b *chainBatch) add(kind byte, cmd Command, path string) {
	l := string(kind) + strconv.Itoa(len(b.labels))
	b.labels, b.cmds, b.byLabel[l] = append(b.labels, l), append(b.cmds, cmd), path
}

// plan lists the round's commands: the parent descriptors not read yet,
// and the header and size of each extent not asked about yet.
func (cr *chainReader) plan(tops []string) *chainBatch {
	run := cr.run
	b := &chainBatch{byLabel: map[string]string{}}
	for _, p := range PendingChainDescriptors(tops, run.parsed) {
		cmd, err := Cat(p)
		if err != nil {
			run.parsed[p] = Descriptor{} // unreadable: BuildDiskChain says so
			continue
		}
		b.add('c', cmd, p)
	}
	for _, ce := range chainExtents(tops, run.parsed) {
		ep := ce.path
		if cr.statted[ep] {
			continue
		}
		cr.statted[ep] = true
		// A delta's first sector says how much of it is grains. It is
		// read before the length: a running VM only grows its delta,
		// so the header never names a sector past the length read.
		if f := vmdk.ExtentFormat(ce.extent.Type); f != "" {
			if cmd, err := DD(ep, vmdk.DeltaHeaderBytes, 0, 1); err == nil {
				b.add('h', cmd, ep)
				cr.deltas[ep] = deltaExtent{format: f, sectors: ce.extent.Sectors}
			}
		}
		cmd, err := StatSize(ep)
		if err != nil {
			continue
		}
		b.add('s', cmd, ep)
	}
	return b
}

// apply takes in the round's results in command order; a Transient
// failure aborts the stage.
func (cr *chainReader) apply(b *chainBatch, rs map[string]Result) error {
	for _, l := range b.labels {
		p, r := b.byLabel[l], rs[l]
		var err error
		switch l[0] {
		case 'c':
			err = cr.takeDescriptor(p, r)
		case 'h':
			err = cr.takeHeader(p, r)
		default:
			err = cr.takeSize(p, r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (cr *chainReader) takeDescriptor(p string, r Result) error {
	if e := cr.run.c.fileErr("cat", p, 0, r); e != nil && Classify(e) == Transient {
		return e
	}
	cr.run.parsed[p] = parsedDescriptor(r)
	return nil
}

func (cr *chainReader) takeHeader(p string, r Result) error {
	if e := cr.run.c.fileErr("dd", p, 0, r); e != nil {
		if Classify(e) == Transient {
			return e
		}
		// Unread (a running VM locks the delta it writes; a missing
		// file shows elsewhere): its use stays unknown.
		delete(cr.deltas, p)
		return nil
	}
	h := cr.deltas[p]
	h.header = []byte(r.Output[:min(len(r.Output), vmdk.DeltaHeaderBytes)])
	cr.deltas[p] = h
	return nil
}

func (cr *chainReader) takeSize(p string, r Result) error {
	if e := cr.run.c.fileErr("stat", p, 0, r); e != nil {
		if Classify(e) == Transient {
			return e
		}
		return nil
	}
	n, err := ParseStatSize(r.Output, p)
	if err != nil {
		return nil
	}
	// stat gives the length only; for a delta the header tells how much
	// of it is grains. A flat extent's use is unknown.
	fs := FileSize{Bytes: n, AllocatedBytes: -1}
	if h, ok := cr.deltas[p]; ok {
		if g, err := vmdk.DeltaGrainBytes(h.format, h.header, n, h.sectors); err != nil {
			cr.run.headerProblems[p] = err.Error()
		} else {
			fs.AllocatedBytes = g
		}
	}
	cr.run.sizes[p] = fs
	return nil
}

// parsedDescriptor parses a cat result; a failed read is a zero Descriptor.
func parsedDescriptor(r Result) Descriptor {
	if r.ExitStatus != 0 {
		return Descriptor{}
	}
	d, _ := ParseDescriptor(r.Output)
	return d
}

// deltaExtent is a snapshot delta's extent as its descriptor states it,
// and its first sector once read.
type deltaExtent struct {
	format  vmdk.Format
	sectors int64
	header  []byte
}

// chainExtent is an extent file of a chain and its descriptor line.
type chainExtent struct {
	path   string
	extent Extent
}

// chainExtents lists the extent files of every descriptor read so far on
// the chains of tops.
func chainExtents(tops []string, descs map[string]Descriptor) []chainExtent {
	var out []chainExtent
	seen := map[string]bool{}
	for _, p := range tops {
		for depth := 0; p != "" && !seen[p] && depth < MaxChainLinks; depth++ {
			seen[p] = true
			d, ok := descs[p]
			if !ok {
				break
			}
			for _, e := range d.Extents {
				if e.FileName == "" {
					continue
				}
				if ep, err := ResolveDiskPath(p, e.FileName); err == nil {
					out = append(out, chainExtent{path: ep, extent: e})
				}
			}
			if d.ParentFileNameHint == "" {
				break
			}
			parent, err := ResolveDiskPath(p, d.ParentFileNameHint)
			if err != nil {
				break
			}
			p = parent
		}
	}
	return out
}

// diskChain models the chain of the disk whose descriptor is top, or nil
// when it does not run on a snapshot.
func (run *inventoryRun) diskChain(top string) *DiskChain {
	d, ok := run.parsed[top]
	if !ok || (!d.IsDelta() && d.ParentFileNameHint == "") {
		return nil
	}
	ch := BuildDiskChain(top, run.parsed, run.sizes)
	// A delta whose header is not its format's, or contradicts its
	// descriptor or its length, cannot be read through: the disk's chain
	// says so.
	for _, l := range ch.Links {
		for _, ep := range l.ExtentPaths {
			if msg := run.headerProblems[ep]; msg != "" {
				ch.Problems = append(ch.Problems, Problem{Source: ep, Message: "snapshot delta " + msg})
				ch.Complete = false
			}
		}
	}
	return &ch
}

// maxDescriptorBytes bounds a descriptor read whole: ESXi's are under
// 2 KiB; a larger file is not a descriptor.
const maxDescriptorBytes = 64 << 10

// ReadDescriptor returns the text of the disk descriptor at path (`cat`),
// byte for byte. A missing file is an error matching [ErrFileNotFound]; a
// file larger than 64 KiB is refused.
func (c *Client) ReadDescriptor(ctx context.Context, path string) (string, error) {
	cmd, err := Cat(path)
	if err != nil {
		return "", &Error{Class: Permanent, Host: c.cfg.Name, Op: "cat", Path: path, Msg: err.Error()}
	}
	rs, _, err := c.runMany(ctx, "cat", []string{"d"}, []Command{cmd})
	if err != nil {
		return "", err
	}
	r := rs["d"]
	if e := c.fileErr("cat", path, 0, r); e != nil {
		return "", e
	}
	if len(r.Output) > maxDescriptorBytes {
		return "", &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: "cat", Path: path,
			Msg: fmt.Sprintf("%d bytes is too large for a disk descriptor", len(r.Output))}
	}
	return r.Output, nil
}
