package esxisim

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// Snapshots as hostd takes and removes them, on the files:
//
//   - snapshot.create <vmid> <name> [<description> [<memory> [<quiesce>]]]
//     gives every disk of the VM a new, empty delta named
//     <disk>-00000N.vmdk (the next free N in the VM folder) whose parent is
//     the descriptor the disk ran on, points the .vmx at the new deltas and
//     adds the snapshot to the .vmsd with the next uid, its disks being the
//     descriptors as they were (the state the snapshot keeps).
//   - snapshot.remove <vmid> <id> consolidates, for each disk, the delta
//     that follows the snapshot's state (the next snapshot's, or the one the
//     VM runs on) into that state's file, so the guest sees the same
//     content; the merged file takes the delta's CID, the delta's children
//     are pointed at it, the delta's files are deleted, and the snapshot
//     leaves the .vmsd with its children handed to its parent.
//
// Delta format rule (the simulator's datastores behave as VMFS 5): a new
// delta takes the format of the delta the disk runs on, since a datastore
// does not change format under a chain; on a disk without snapshots it is
// vmfsSparse below 2 TiB and seSparse from 2 TiB, as ESXi does on VMFS 5.
// SetSnapshotFormat makes new chains use one format, as on VMFS 6 (seSparse).
//
// GuestWrite changes the disk as a running guest would: the data lands in
// the file the VM runs on (the top delta, or the flat base without
// snapshots). Only a powered-on VM writes: a write to a VM that is off
// fails, and a power-off waits for the writes in flight. On ESXi the
// running VM's VMX process is the only writer of its disk files, and
// vim-cmd vmsvc/power.off returns once the VM is powered off, its VMX
// gone (vSphere API VirtualMachine.PowerOffVM_Task, which vim-cmd waits
// on): after it, the files no longer change.

// snapMu serializes changes to disk files and .vmx/.vmsd made by snapshot
// commands and guest writes (hostd runs one task per VM at a time), and
// orders power-offs after the guest writes in flight. Taken before s.mu,
// never while holding it.
var snapMu sync.Mutex

// sesparseFrom is the capacity from which VMFS 5 snapshots are seSparse.
const sesparseFrom = 2 << 40

var snapshotFormats sync.Map // *Server -> vmdk.Format

// SetSnapshotFormat makes snapshots of disks that run on no delta yet use
// format (vmdk.SESparse as on VMFS 6); "" restores the VMFS 5 rule.
func (s *Server) SetSnapshotFormat(f vmdk.Format) {
	if f == "" {
		snapshotFormats.Delete(s)
		return
	}
	snapshotFormats.Store(s, f)
}

// local is the file on this machine behind a /vmfs/volumes host path.
func (s *Server) local(hostPath string) (string, error) {
	rel, ok := rootRel(hostPath)
	if !ok || rel == "." {
		return "", fmt.Errorf("%s is not a file under %s", hostPath, volumesDir)
	}
	return filepath.Join(s.opts.Root, filepath.FromSlash(rel)), nil
}

// vmsdSnap is one snapshot of a .vmsd.
type vmsdSnap struct {
	uid, parent, name, desc, typ string
	file                         string // the .vmsn
	createHigh, createLow        string
	disks                        []vmsdDisk
}

type vmsdDisk struct{ fileName, node string }

type vmsdFile struct {
	lastUID, current int
	snaps            []*vmsdSnap
}

func readVMSD(b []byte) *vmsdFile {
	v := parseVMX(b)
	f := &vmsdFile{}
	f.lastUID, _ = strconv.Atoi(v.get("snapshot.lastUID"))
	f.current, _ = strconv.Atoi(v.get("snapshot.current"))
	for i := 0; ; i++ {
		p := fmt.Sprintf("snapshot%d.", i)
		if !v.has(p + "uid") {
			if i > 1024 {
				break
			}
			continue
		}
		sn := &vmsdSnap{uid: v.get(p + "uid"), parent: v.get(p + "parent"), file: v.get(p + "filename"), name: v.get(p + "displayName"),
			desc: v.get(p + "description"), typ: v.get(p + "type"), createHigh: v.get(p + "createTimeHigh"), createLow: v.get(p + "createTimeLow")}
		n, _ := strconv.Atoi(v.get(p + "numDisks"))
		for d := 0; d < n && d < 64; d++ {
			sn.disks = append(sn.disks, vmsdDisk{fileName: v.get(fmt.Sprintf("%sdisk%d.fileName", p, d)), node: v.get(fmt.Sprintf("%sdisk%d.node", p, d))})
		}
		f.snaps = append(f.snaps, sn)
	}
	return f
}

func (f *vmsdFile) text() string {
	var b strings.Builder
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = \"%s\"\n", k, vmxEscape(v)) }
	kv(".encoding", "UTF-8")
	kv("snapshot.lastUID", strconv.Itoa(f.lastUID))
	if f.current > 0 {
		kv("snapshot.current", strconv.Itoa(f.current))
	}
	for i, sn := range f.snaps {
		p := fmt.Sprintf("snapshot%d.", i)
		kv(p+"uid", sn.uid)
		kv(p+"filename", sn.file)
		if sn.parent != "" {
			kv(p+"parent", sn.parent)
		}
		kv(p+"displayName", sn.name)
		if sn.desc != "" {
			kv(p+"description", sn.desc)
		}
		if sn.typ != "" {
			kv(p+"type", sn.typ)
		}
		kv(p+"createTimeHigh", sn.createHigh)
		kv(p+"createTimeLow", sn.createLow)
		kv(p+"numDisks", strconv.Itoa(len(sn.disks)))
		for d, dk := range sn.disks {
			kv(fmt.Sprintf("%sdisk%d.fileName", p, d), dk.fileName)
			kv(fmt.Sprintf("%sdisk%d.node", p, d), dk.node)
		}
	}
	kv("snapshot.numSnapshots", strconv.Itoa(len(f.snaps)))
	return b.String()
}

// setVMXValues rewrites the values of the given (lower-cased) keys in a
// .vmx, keeping every other line as it is.
func setVMXValues(b []byte, set map[string]string) []byte {
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		k, _, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if v, ok := set[strings.ToLower(strings.TrimSpace(k))]; ok {
			lines[i] = strings.TrimSpace(k) + ` = "` + vmxEscape(v) + `"`
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// vmDisk is one present disk of a .vmx: its device node ("scsi0:0"), the
// .vmx key, the name as written and the descriptor's host path.
type vmDisk struct {
	node, key, name, desc string
}

func vmDisks(vmxPath string, v vmx) []vmDisk {
	var out []vmDisk
	dir := path.Dir(vmxPath)
	for _, k := range v.keys {
		if !strings.HasSuffix(k, ".filename") || !strings.HasSuffix(strings.ToLower(v.vals[k]), ".vmdk") {
			continue
		}
		dev := strings.TrimSuffix(k, ".filename")
		if strings.EqualFold(v.get(dev+".present"), "FALSE") || strings.EqualFold(v.get(dev+".deviceType"), "cdrom-image") {
			continue
		}
		out = append(out, vmDisk{node: dev, key: k, name: v.vals[k], desc: resolveIn(dir, v.vals[k])})
	}
	return out
}

// link is an open descriptor: its host path, parsed text and first extent.
type link struct {
	desc   string
	d      vmdk.Descriptor
	extent string // host path
}

func (s *Server) readLink(desc string) (link, error) {
	b, err := s.readHostFile(desc)
	if err != nil {
		return link{}, fmt.Errorf("%s: %w", desc, err)
	}
	d, err := vmdk.ParseDescriptor(string(b))
	if err != nil {
		return link{}, fmt.Errorf("%s: %w", desc, err)
	}
	if len(d.Extents) != 1 {
		return link{}, fmt.Errorf("%s: %d extents; the simulator snapshots single-extent disks only", desc, len(d.Extents))
	}
	return link{desc: desc, d: d, extent: resolveIn(path.Dir(desc), d.Extents[0].File)}, nil
}

func (l link) parent() string {
	if l.d.ParentFileNameHint == "" {
		return ""
	}
	return resolveIn(path.Dir(l.desc), l.d.ParentFileNameHint)
}

// refName is how a file in dir names target: relative in the same folder,
// absolute elsewhere.
func refName(dir, target string) string {
	if path.Dir(target) == dir {
		return path.Base(target)
	}
	return target
}

var deltaNameRE = regexp.MustCompile(`-\d{6}$`)

func newCID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	c := binary.BigEndian.Uint32(b[:])
	if c == vmdk.NoParentCID {
		c--
	}
	return c
}

func (s *Server) snapshotFormat(top link) (vmdk.Format, error) {
	if top.d.CreateType.IsDelta() {
		return top.d.CreateType, nil
	}
	if f, ok := snapshotFormats.Load(s); ok {
		return f.(vmdk.Format), nil
	}
	sectors, err := top.d.CapacitySectors()
	if err != nil {
		return "", err
	}
	if sectors*vmdk.SectorSize >= sesparseFrom {
		return vmdk.SESparse, nil
	}
	return vmdk.VMFSSparse, nil
}

func (s *Server) snapshotCreate(vv vmView, args []string, stdout io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stdout, "Insufficient arguments.")
		return 1
	}
	name, desc := args[0], ""
	if len(args) > 1 {
		desc = args[1]
	}
	snapMu.Lock()
	defer snapMu.Unlock()
	if err := s.createSnapshotLocked(vv.vmxPath, name, desc, vv.power == PoweredOn, s.now()); err != nil {
		fmt.Fprint(stdout, s.fault("vim.fault.GenericVmConfigFault", "An error occurred while taking a snapshot: "+err.Error()))
		return 1
	}
	s.logSnapshot(SnapshotEvent{Op: "create", VMID: vv.id, Name: name})
	fmt.Fprintln(stdout, "Create Snapshot:")
	return 0
}

func (s *Server) now() time.Time { return time.Now() }

func (s *Server) createSnapshotLocked(vmxPath, name, desc string, running bool, now time.Time) error {
	vb, err := s.readHostFile(vmxPath)
	if err != nil {
		return err
	}
	dir := path.Dir(vmxPath)
	vmsdPath := strings.TrimSuffix(vmxPath, path.Ext(vmxPath)) + ".vmsd"
	f := &vmsdFile{}
	if b, err := s.readHostFile(vmsdPath); err == nil {
		f = readVMSD(b)
	}
	names, err := s.readDir(dir)
	if err != nil {
		return err
	}
	taken := map[string]bool{}
	for _, n := range names {
		taken[n] = true
	}
	f.lastUID++
	sn := &vmsdSnap{uid: strconv.Itoa(f.lastUID), name: name, desc: desc,
		file: strings.TrimSuffix(path.Base(vmxPath), path.Ext(vmxPath)) + "-Snapshot" + strconv.Itoa(f.lastUID) + ".vmsn"}
	if f.current > 0 {
		sn.parent = strconv.Itoa(f.current)
	}
	us := now.UnixMicro()
	sn.createHigh, sn.createLow = strconv.FormatInt(us>>32, 10), strconv.FormatInt(int64(int32(uint32(us))), 10)
	set := map[string]string{}
	for _, dk := range vmDisks(vmxPath, parseVMX(vb)) {
		top, err := s.readLink(dk.desc)
		if err != nil {
			return err
		}
		format, err := s.snapshotFormat(top)
		if err != nil {
			return err
		}
		sectors, err := top.d.CapacitySectors()
		if err != nil {
			return err
		}
		base := deltaNameRE.ReplaceAllString(strings.TrimSuffix(path.Base(dk.desc), ".vmdk"), "")
		var newName string
		for n := 1; ; n++ {
			newName = fmt.Sprintf("%s-%06d", base, n)
			if !taken[newName+".vmdk"] && !taken[newName+format.ExtentSuffix()] {
				break
			}
		}
		taken[newName+".vmdk"] = true
		localDir, err := s.local(dir + "/x")
		if err != nil {
			return err
		}
		if _, err := vmdk.WriteLink(vmdk.LinkSpec{Dir: filepath.Dir(localDir), Name: newName, Format: format, CapacitySectors: sectors,
			CID: newCID(), ParentCID: top.d.CID, ParentFileNameHint: refName(dir, dk.desc)}); err != nil {
			return err
		}
		sn.disks = append(sn.disks, vmsdDisk{fileName: dk.name, node: dk.node})
		set[dk.key] = newName + ".vmdk"
	}
	f.snaps = append(f.snaps, sn)
	f.current = f.lastUID
	if err := s.writeHostFile(vmsdPath, []byte(f.text())); err != nil {
		return err
	}
	return s.writeHostFile(vmxPath, setVMXValues(vb, set))
}

func (s *Server) writeHostFile(hostPath string, b []byte) error {
	p, err := s.local(hostPath)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (s *Server) snapshotRemove(vv vmView, args []string, stdout io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stdout, "Insufficient arguments.")
		return 1
	}
	snapMu.Lock()
	err := s.removeSnapshotLocked(vv.vmxPath, args[0])
	snapMu.Unlock()
	if errors.Is(err, errSnapshotNotFound) {
		fmt.Fprint(stdout, s.fault("vim.fault.NotFound", "The object or item referred to could not be found."))
		return 1
	}
	if err != nil {
		fmt.Fprint(stdout, s.fault("vim.fault.GenericVmConfigFault", "An error occurred while consolidating disks: "+err.Error()))
		return 1
	}
	s.logSnapshot(SnapshotEvent{Op: "remove", VMID: vv.id, ID: args[0]})
	vv2, _ := s.view(vv.id)
	fmt.Fprint(stdout, "Remove Snapshot:\n"+s.snapshotTree(vv2))
	return 0
}

var errSnapshotNotFound = errors.New("snapshot not found")

func (s *Server) removeSnapshotLocked(vmxPath, id string) error {
	vb, err := s.readHostFile(vmxPath)
	if err != nil {
		return err
	}
	vmsdPath := strings.TrimSuffix(vmxPath, path.Ext(vmxPath)) + ".vmsd"
	b, err := s.readHostFile(vmsdPath)
	if err != nil {
		return errSnapshotNotFound
	}
	f := readVMSD(b)
	idx := -1
	for i, sn := range f.snaps {
		if sn.uid == id {
			idx = i
		}
	}
	if idx < 0 {
		return errSnapshotNotFound
	}
	sn := f.snaps[idx]
	vmxSet := map[string]string{}
	disks := vmDisks(vmxPath, parseVMX(vb))
	for _, sd := range sn.disks {
		if err := s.consolidateSnapshotDisk(path.Dir(vmxPath), f, sn, sd, disks, vmxSet); err != nil {
			return err
		}
	}
	for _, o := range f.snaps {
		if o.parent == sn.uid {
			o.parent = sn.parent
		}
	}
	if strconv.Itoa(f.current) == sn.uid {
		f.current, _ = strconv.Atoi(sn.parent)
	}
	f.snaps = append(f.snaps[:idx], f.snaps[idx+1:]...)
	if len(vmxSet) > 0 {
		if err := s.writeHostFile(vmxPath, setVMXValues(vb, vmxSet)); err != nil {
			return err
		}
	}
	return s.writeHostFile(vmsdPath, []byte(f.text()))
}

// descRef is a reference to a descriptor of a disk: a .vmx key, or a disk
// of another snapshot.
type descRef struct {
	desc   string
	vmxKey string
	snap   *vmsdSnap
	disk   int
}

// consolidateSnapshotDisk merges the child of snapshot sn's state of disk
// sd into that state, in the VM folder dir. The references to the child
// are pointed at the merged file: in the other snapshots of f, and in
// vmxSet (.vmx keys to rewrite).
func (s *Server) consolidateSnapshotDisk(dir string, f *vmsdFile, sn *vmsdSnap, sd vmsdDisk, disks []vmDisk, vmxSet map[string]string) error {
	state := resolveIn(dir, sd.fileName)
	refs := diskRefs(dir, f, sn, sd, disks)
	child, seen, err := s.childOf(state, refs)
	if err != nil || child.desc == "" {
		return err
	}
	parent, err := s.readLink(state)
	if err != nil {
		return err
	}
	if err := s.consolidate(child, parent); err != nil {
		return err
	}
	// The child's children now name the merged file.
	for p := range seen {
		if p == child.desc {
			continue
		}
		l, err := s.readLink(p)
		if err != nil {
			continue // consolidated away above
		}
		if l.parent() == child.desc {
			l.d.ParentFileNameHint = refName(path.Dir(l.desc), state)
			if err := s.writeHostFile(l.desc, []byte(l.d.Text())); err != nil {
				return err
			}
		}
	}
	for _, r := range refs {
		if r.desc != child.desc {
			continue
		}
		if r.snap != nil {
			r.snap.disks[r.disk].fileName = refName(dir, state)
		} else {
			vmxSet[r.vmxKey] = refName(dir, state)
		}
	}
	for _, p := range []string{child.desc, child.extent} {
		if lp, err := s.local(p); err == nil {
			_ = os.Remove(lp)
		}
	}
	return nil
}

// diskRefs lists who refers to a descriptor of disk sd: the .vmx and the
// snapshots of f other than sn.
func diskRefs(dir string, f *vmsdFile, sn *vmsdSnap, sd vmsdDisk, disks []vmDisk) []descRef {
	var refs []descRef
	for _, dk := range disks {
		if dk.node == sd.node {
			refs = append(refs, descRef{desc: dk.desc, vmxKey: dk.key})
		}
	}
	for _, o := range f.snaps {
		for k, od := range o.disks {
			if o != sn && od.node == sd.node {
				refs = append(refs, descRef{desc: resolveIn(dir, od.fileName), snap: o, disk: k})
			}
		}
	}
	return refs
}

// childOf finds the child of the descriptor state, the descriptor whose
// parent it is, by walking down from every reference; seen holds the
// descriptors walked. A zero link: state has no child.
func (s *Server) childOf(state string, refs []descRef) (child link, seen map[string]bool, err error) {
	seen = map[string]bool{}
	for _, r := range refs {
		for p := r.desc; p != "" && !seen[p]; {
			seen[p] = true
			l, err := s.readLink(p)
			if err != nil {
				return link{}, nil, err
			}
			if l.parent() == state {
				if child.desc != "" && child.desc != l.desc {
					return link{}, nil, fmt.Errorf("%s has more than one child: the simulator consolidates linear chains only", state)
				}
				child = l
			}
			p = l.parent()
		}
	}
	return child, seen, nil
}

// consolidate merges the delta child into its parent: the parent then
// reads as the child did and takes the child's CID, so the child's own
// children stay consistent.
func (s *Server) consolidate(child, parent link) error {
	cext, err := s.local(child.extent)
	if err != nil {
		return err
	}
	writes, err := vmdk.ReadWrites(cext, child.d.CreateType)
	if err != nil {
		return err
	}
	pext, err := s.local(parent.extent)
	if err != nil {
		return err
	}
	sectors, err := parent.d.CapacitySectors()
	if err != nil {
		return err
	}
	if parent.d.CreateType.IsDelta() {
		own, err := vmdk.ReadWrites(pext, parent.d.CreateType)
		if err != nil {
			return err
		}
		merged := mergeWrites(parent.d.CreateType, own, writes)
		if _, err := vmdk.WriteExtent(pext, parent.d.CreateType, sectors, merged); err != nil {
			return err
		}
	} else if err := applyFlat(pext, writes); err != nil {
		return err
	}
	parent.d.CID = child.d.CID
	return s.writeHostFile(parent.desc, []byte(parent.d.Text()))
}

// mergeWrites lays newer over older at grain granularity; a zero grain
// over a vmfsSparse parent (which has none) becomes a grain of zeros.
func mergeWrites(format vmdk.Format, older, newer []vmdk.Write) []vmdk.Write {
	byOff := map[int64]vmdk.Write{}
	for _, w := range older {
		byOff[w.Offset] = w
	}
	for _, w := range newer {
		if w.Data == nil && format != vmdk.SESparse {
			w = vmdk.Write{Offset: w.Offset, Data: make([]byte, w.ZeroLength)}
		}
		byOff[w.Offset] = w
	}
	out := make([]vmdk.Write, 0, len(byOff))
	for _, w := range byOff {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

func applyFlat(p string, writes []vmdk.Write) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	for _, w := range writes {
		data := w.Data
		if data == nil {
			data = make([]byte, w.ZeroLength)
		}
		if _, err := f.WriteAt(data, w.Offset); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// GuestWrite writes data at offset of the VM's disk on device node (such
// as "scsi0:0") as the running guest would: into the delta the VM runs on,
// or into the flat base when it runs on no snapshot. The written grains of
// a delta are regenerated whole, the rest of each grain read through the
// chain.
func (s *Server) GuestWrite(vmid int, node string, offset int64, data []byte) error {
	return s.GuestWrites(vmid, node, []vmdk.Write{{Offset: offset, Data: data}})
}

// GuestWrites is GuestWrite of several writes, applied in order, with the
// delta rewritten once for all of them.
func (s *Server) GuestWrites(vmid int, node string, writes []vmdk.Write) error {
	vv, ok := s.view(vmid)
	if !ok || !vv.valid {
		return fmt.Errorf("esxisim: no VM %d", vmid)
	}
	snapMu.Lock()
	defer snapMu.Unlock()
	if p, err := s.PowerState(vmid); err != nil {
		return err
	} else if p != PoweredOn {
		return fmt.Errorf("esxisim: VM %d is %s: its guest writes nothing", vmid, p)
	}
	var top string
	for _, dk := range vmDisks(vv.vmxPath, vv.v) {
		if strings.EqualFold(dk.node, node) {
			top = dk.desc
		}
	}
	if top == "" {
		return fmt.Errorf("esxisim: VM %d has no disk %s", vmid, node)
	}
	l, err := s.readLink(top)
	if err != nil {
		return err
	}
	sectors, err := l.d.CapacitySectors()
	if err != nil {
		return err
	}
	capacity := sectors * vmdk.SectorSize
	for _, w := range writes {
		if w.Offset < 0 || int64(len(w.Data)) > capacity-w.Offset {
			return fmt.Errorf("esxisim: %d bytes at %d do not fit the %d-byte disk", len(w.Data), w.Offset, capacity)
		}
	}
	ext, err := s.local(l.extent)
	if err != nil {
		return err
	}
	if !l.d.CreateType.IsDelta() {
		return applyFlat(ext, writes)
	}
	ldesc, err := s.local(top)
	if err != nil {
		return err
	}
	ch, err := vmdk.OpenChain(ldesc, HostResolver(s.opts.Root))
	if err != nil {
		return err
	}
	defer ch.Close()
	// The grains the writes touch, each read once through the chain and
	// then changed by every write that covers part of it, in order.
	gs := l.d.CreateType.GrainSize()
	grains := map[int64][]byte{}
	for _, w := range writes {
		for g := w.Offset / gs * gs; g < w.Offset+int64(len(w.Data)); g += gs {
			buf, ok := grains[g]
			if !ok {
				buf = make([]byte, min(gs, capacity-g))
				if _, err := ch.ReadAt(buf, g); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				grains[g] = buf
			}
			lo, hi := max(w.Offset, g), min(w.Offset+int64(len(w.Data)), g+int64(len(buf)))
			copy(buf[lo-g:hi-g], w.Data[lo-w.Offset:hi-w.Offset])
		}
	}
	changed := make([]vmdk.Write, 0, len(grains))
	for g, buf := range grains {
		changed = append(changed, vmdk.Write{Offset: g, Data: buf})
	}
	own, err := vmdk.ReadWrites(ext, l.d.CreateType)
	if err != nil {
		return err
	}
	_, err = vmdk.WriteExtent(ext, l.d.CreateType, sectors, mergeWrites(l.d.CreateType, own, changed))
	return err
}
