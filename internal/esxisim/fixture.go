package esxisim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// Extent is a region of a disk holding data; everything else reads as zeros.
type Extent struct {
	// Offset and Length locate the region in the disk, in bytes.
	Offset, Length int64
	// Data, when set, is the region's content (Length is then len(Data));
	// otherwise the content is deterministic pseudo-random bytes derived
	// from Seed and the absolute position (see PatternBytes).
	Data []byte
	Seed uint64
}

// DiskSpec describes one virtual disk for AddVM / WriteVM.
type DiskSpec struct {
	// CapacityBytes is the logical size (rounded up to 512-byte sectors).
	CapacityBytes int64
	// Thin marks the disk ddb.thinProvisioned = "1".
	Thin bool
	// Controller is the device node, e.g. "scsi0:0" (default scsi0:N),
	// "sata0:1", "nvme0:0", "ide0:0".
	Controller string
	// Subdir places the disk in a subfolder of the VM folder (the .vmx then
	// names it relative, "sub/x.vmdk").
	Subdir string
	// Datastore places the disk in the same-named folder on another
	// datastore (the .vmx then names it with an absolute path).
	Datastore string
	// FileName is the descriptor's base name without ".vmdk" (default
	// "<vm>" for the first disk, "<vm>_N" for the others).
	FileName string
	// Content is where the data lives; nil means DefaultContent. With
	// VMSpec.Snapshots it is the base's content.
	Content []Extent
	// Deltas are the disk's snapshot deltas, oldest first, written as
	// real vmfsSparse or seSparse files when VMSpec.Snapshots is set (nil:
	// one vmfsSparse delta changing a few grains, see DefaultDeltas).
	Deltas []DeltaSpec
	// BaseDatastore puts the base of a snapshot chain in the folder
	// "base-<FileName>" of that datastore; the first delta then names it
	// by its absolute path.
	BaseDatastore string
}

// DefaultDeltas is the snapshot a disk of the given capacity gets when
// none is specified: one vmfsSparse delta with new data over the first
// grains, over zeros in the middle, and over the last sector.
func DefaultDeltas(capacity int64, seed uint64) []DeltaSpec {
	data := func(off, n int64, s uint64) vmdk.Write {
		b := make([]byte, n)
		PatternBytes(b, s, off)
		return vmdk.Write{Offset: off, Data: b}
	}
	mid := capacity / 2 &^ 4095
	w := []vmdk.Write{data(0, min(4096, capacity), seed+100)}
	if mid >= 4096 && mid+4096 <= capacity-512 {
		w = append(w, data(mid, 4096, seed+101))
	}
	if capacity > 4096 {
		w = append(w, data(capacity-512, 512, seed+102))
	}
	return []DeltaSpec{{Format: vmdk.VMFSSparse, Writes: w}}
}

// NICSpec describes one network adapter.
type NICSpec struct {
	// Network is the port group name (ethernetN.networkName).
	Network string
	// MAC is a static address; a generated 00:50:56 address if empty.
	MAC string
	// Adapter is the virtualDev (default "vmxnet3").
	Adapter string
}

// VMSpec describes a VM for AddVM / WriteVM.
type VMSpec struct {
	Datastore       string // datastore (folder under Root), default "datastore1"
	Name            string // displayName and folder/file base name
	GuestOS         string // .vmx guestOS, e.g. "rhel9-64" (default "otherlinux-64")
	HardwareVersion int    // virtualHW.version (default 19)
	Firmware        string // "bios" (default) or "efi"
	SecureBoot      bool   // uefi.secureBoot.enabled (EFI only)
	CPUs            int    // numvcpus (default 1)
	MemoryMiB       int    // memSize (default 1024)
	Disks           []DiskSpec
	NICs            []NICSpec
	Annotation      string // may span several lines
	// Snapshots gives every disk a snapshot child (-000001.vmdk descriptor,
	// vmfsSparse -delta.vmdk) that the .vmx runs on, and writes a .vmsd
	// with one snapshot. Without it an empty .vmsd is written, as ESXi does.
	Snapshots bool

	// System makes Server.AddVM add a system VM like the vCLS VMs vCenter
	// runs on ESXi 7/8 hosts: its .vmx is kept in host memory at
	// /var/run/crx/infra/<Name>/<Name>.vmx (see SystemVMDir), getallvms
	// prints it with datastore "[]", and no disk files are written (its
	// .vmx names a disk that does not exist here). Datastore, Disks and
	// Snapshots are ignored.
	System bool
	// Invalid makes Server.AddVM register a VM whose files are gone
	// (<Datastore>/<Name>/<Name>.vmx is not written): vmInventory.xml lists
	// it, getallvms prints "Skipping invalid VM 'N'" on stderr, and
	// per-VM vim-cmd commands answer vim.fault.NotFound, as hostd does.
	// Only Name and Datastore are used.
	Invalid bool

	// Power, Tools and IPs are the initial runtime state set by Server.AddVM.
	Power PowerState
	Tools ToolsState
	IPs   []string
}

// DiskFiles are the files written for one disk.
type DiskFiles struct {
	Controller    string
	CapacityBytes int64
	Thin          bool
	// Descriptor and Flat are host paths (/vmfs/volumes/...) of the base;
	// Delta is the newest snapshot's extent (-delta.vmdk or
	// -sesparse.vmdk) and Child its descriptor, when Snapshots is set.
	Descriptor, Flat, Child, Delta string
	// LocalFlat is the flat file's path on this machine.
	LocalFlat string
	// Content is where the base holds data.
	Content []Extent
	// Chain is the snapshot chain the disk runs on, when Snapshots is set.
	Chain *DiskChainFiles
}

// SHA256 returns the hex SHA-256 of the disk's full logical content as
// the guest sees it (through its snapshot chain, if any), computed from
// the spec without reading the files.
func (d DiskFiles) SHA256() string {
	if d.Chain != nil {
		return d.Chain.SHA256
	}
	return ExpectedSHA256(d.CapacityBytes, d.Content)
}

// VMFiles are the files written for one VM.
type VMFiles struct {
	VMXPath  string // host path of the .vmx
	LocalDir string // the VM folder on this machine
	VMSD     string // host path of the .vmsd
	Disks    []DiskFiles
}

// splitmix64 is the pattern generator's mixing function.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// PatternBytes fills p with the deterministic content of a seeded extent
// at absolute disk offset off: byte i is a function of seed and off+i only.
func PatternBytes(p []byte, seed uint64, off int64) {
	for i := range p {
		pos := uint64(off) + uint64(i)
		w := splitmix64(seed ^ (pos>>3)*0x100000001b3)
		p[i] = byte(w >> ((pos & 7) * 8))
	}
}

// extentBytes fills p with extent e's content at absolute offset off.
func extentBytes(e Extent, p []byte, off int64) {
	if e.Data != nil {
		copy(p, e.Data[off-e.Offset:])
		return
	}
	PatternBytes(p, e.Seed, off)
}

func (e Extent) length() int64 {
	if e.Data != nil {
		return int64(len(e.Data))
	}
	return e.Length
}

// DefaultContent returns a realistic layout for a disk of the given size:
// a 1 MiB "boot" region at the start, 2 MiB in the middle and 1 MiB plus
// 512 bytes near the end (so the last block of a dd is partial), with long
// zero runs between them.
func DefaultContent(capacity int64, seed uint64) []Extent {
	const mib = 1 << 20
	var out []Extent
	add := func(off, n int64) {
		off = min(max(off, 0), capacity)
		n = min(n, capacity-off)
		if n <= 0 {
			return
		}
		if len(out) > 0 {
			prev := out[len(out)-1]
			if off < prev.Offset+prev.Length {
				return
			}
		}
		out = append(out, Extent{Offset: off, Length: n, Seed: seed})
	}
	add(0, mib)
	add(capacity/3&^511, 2*mib)
	add(capacity-mib-512-4096, mib+512)
	return out
}

// normalizeExtents sorts extents and clips them to capacity.
func normalizeExtents(capacity int64, exts []Extent) []Extent {
	out := make([]Extent, 0, len(exts))
	for _, e := range exts {
		if e.Data != nil {
			e.Length = int64(len(e.Data))
		}
		if e.Offset < 0 || e.Offset >= capacity || e.Length <= 0 {
			continue
		}
		if e.Offset+e.Length > capacity {
			e.Length = capacity - e.Offset
			if e.Data != nil {
				e.Data = e.Data[:e.Length]
			}
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

// contentReader reads a disk's logical content (later extents win on overlap).
type contentReader struct {
	capacity int64
	exts     []Extent
	off      int64
}

func (r *contentReader) Read(p []byte) (int, error) {
	if r.off >= r.capacity {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.capacity-r.off)]
	clear(p)
	for _, e := range r.exts {
		s, t := max(e.Offset, r.off), min(e.Offset+e.length(), r.off+int64(len(p)))
		if s < t {
			extentBytes(e, p[s-r.off:t-r.off], s)
		}
	}
	r.off += int64(len(p))
	return len(p), nil
}

// ExpectedSHA256 returns the hex disk digest (package diskdigest) of a
// disk of capacity bytes with the given content, as the simulator writes
// it.
func ExpectedSHA256(capacity int64, exts []Extent) string {
	h := diskdigest.New()
	buf := make([]byte, 1<<20)
	_, _ = io.CopyBuffer(h, &contentReader{capacity: roundSector(capacity), exts: normalizeExtents(roundSector(capacity), exts)}, buf)
	return hex.EncodeToString(h.Sum(nil))
}

func roundSector(n int64) int64 { return (n + 511) &^ 511 }

var controllerRE = regexp.MustCompile(`^(scsi|sata|nvme|ide)(\d+):(\d+)$`)

// idBytes derives deterministic identifiers from a name.
func idBytes(parts ...string) []byte {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return h[:]
}

func spacedHex(b []byte) string {
	var parts []string
	for i, c := range b {
		sep := " "
		if i == 8 {
			sep = "-"
		}
		if i == 0 {
			sep = ""
		}
		parts = append(parts, sep+hex.EncodeToString([]byte{c}))
	}
	return strings.Join(parts, "")
}

// WriteVM writes a realistic VM folder under root: the .vmx, one descriptor
// and one SPARSE -flat.vmdk per disk (a 4 GiB disk with 10 MiB of data costs
// 10 MiB), snapshot files and the .vmsd. It does not register the VM.
func WriteVM(root string, spec VMSpec) (*VMFiles, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, spec.Datastore, spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("esxisim: creating VM folder: %w", err)
	}
	hostDir := volumesDir + "/" + spec.Datastore + "/" + spec.Name
	files := &VMFiles{VMXPath: hostDir + "/" + spec.Name + ".vmx", LocalDir: dir, VMSD: hostDir + "/" + spec.Name + ".vmsd"}

	w := &vmxWriter{}
	id := idBytes(spec.Datastore, spec.Name)
	w.header(spec, id)
	if err := w.disks(root, spec, files); err != nil {
		return nil, err
	}
	w.nics(spec.NICs, id)
	vmxData := strings.Join(w.lines, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, spec.Name+".vmx"), []byte(vmxData), 0o644); err != nil {
		return nil, fmt.Errorf("esxisim: writing .vmx: %w", err)
	}
	vmsd := ""
	if spec.Snapshots {
		vmsd = fixtureVMSD(spec.Name, files)
	}
	if err := os.WriteFile(filepath.Join(dir, spec.Name+".vmsd"), []byte(vmsd), 0o644); err != nil {
		return nil, fmt.Errorf("esxisim: writing .vmsd: %w", err)
	}
	return files, nil
}

// withDefaults checks the VM's name and fills in VMware's defaults.
func (spec VMSpec) withDefaults() (VMSpec, error) {
	if spec.Name == "" {
		return spec, errors.New("esxisim: VMSpec.Name is required")
	}
	if strings.ContainsAny(spec.Name, "/\x00") || spec.Name == "." || spec.Name == ".." {
		return spec, fmt.Errorf("esxisim: invalid VM name %q", spec.Name)
	}
	if spec.Datastore == "" {
		spec.Datastore = "datastore1"
	}
	if spec.GuestOS == "" {
		spec.GuestOS = "otherlinux-64"
	}
	if spec.HardwareVersion == 0 {
		spec.HardwareVersion = 19
	}
	if spec.CPUs == 0 {
		spec.CPUs = 1
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 1024
	}
	return spec, nil
}

// vmxWriter collects the lines of a .vmx.
type vmxWriter struct {
	lines []string
}

func (w *vmxWriter) set(k, v string) {
	w.lines = append(w.lines, fmt.Sprintf("%s = \"%s\"", k, vmxEscape(v)))
}

// header sets the VM's identity, firmware and sizing; id is its idBytes.
func (w *vmxWriter) header(spec VMSpec, id []byte) {
	w.set(".encoding", "UTF-8")
	w.set("config.version", "8")
	w.set("virtualHW.version", fmt.Sprint(spec.HardwareVersion))
	w.set("displayName", spec.Name)
	w.set("guestOS", spec.GuestOS)
	if strings.EqualFold(spec.Firmware, "efi") {
		w.set("firmware", "efi")
		if spec.SecureBoot {
			w.set("uefi.secureBoot.enabled", "TRUE")
		}
	}
	w.set("numvcpus", fmt.Sprint(spec.CPUs))
	w.set("memSize", fmt.Sprint(spec.MemoryMiB))
	w.set("uuid.bios", spacedHex(id[:16]))
	w.set("uuid.location", spacedHex(id[:16]))
	w.set("vc.uuid", spacedHex(id[16:32]))
	w.set("pciBridge0.present", "TRUE")
	w.set("svga.present", "TRUE")
	w.set("tools.syncTime", "FALSE")
	if spec.Annotation != "" {
		w.set("annotation", spec.Annotation)
	}
}

// disks writes each disk's files under root, adds them to files and
// declares them and their controllers.
func (w *vmxWriter) disks(root string, spec VMSpec, files *VMFiles) error {
	ctrlSeen := map[string]bool{}
	for i, d := range spec.Disks {
		if d.Controller == "" {
			d.Controller = fmt.Sprintf("scsi0:%d", i)
		}
		m := controllerRE.FindStringSubmatch(d.Controller)
		if m == nil {
			return fmt.Errorf("esxisim: invalid controller %q", d.Controller)
		}
		ctrl := m[1] + m[2]
		if !ctrlSeen[ctrl] {
			ctrlSeen[ctrl] = true
			w.set(ctrl+".present", "TRUE")
			if m[1] == "scsi" {
				w.set(ctrl+".virtualDev", "pvscsi")
			}
		}
		base := d.FileName
		if base == "" {
			base = spec.Name
			if i > 0 {
				base = fmt.Sprintf("%s_%d", spec.Name, i)
			}
		}
		df, ref, err := writeDisk(root, spec, d, base, i)
		if err != nil {
			return err
		}
		df.Controller = d.Controller
		files.Disks = append(files.Disks, df)
		w.set(d.Controller+".present", "TRUE")
		if m[1] == "scsi" {
			w.set(d.Controller+".deviceType", "scsi-hardDisk")
		}
		w.set(d.Controller+".fileName", ref)
	}
	return nil
}

// nics declares the network adapters; id is the VM's idBytes.
func (w *vmxWriter) nics(nics []NICSpec, id []byte) {
	for i, n := range nics {
		p := fmt.Sprintf("ethernet%d", i)
		adapter := n.Adapter
		if adapter == "" {
			adapter = "vmxnet3"
		}
		network := n.Network
		if network == "" {
			network = "VM Network"
		}
		w.set(p+".present", "TRUE")
		w.set(p+".virtualDev", adapter)
		w.set(p+".networkName", network)
		if n.MAC != "" {
			w.set(p+".addressType", "static")
			w.set(p+".address", n.MAC)
		} else {
			w.set(p+".addressType", "generated")
			w.set(p+".generatedAddress", fmt.Sprintf("00:0c:29:%02x:%02x:%02x", id[20], id[21], byte(i)))
		}
	}
}

// fixtureVMSD is the .vmsd of a VM with one snapshot of all its disks.
func fixtureVMSD(name string, files *VMFiles) string {
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC).UnixMicro()
	var b strings.Builder
	fmt.Fprintf(&b, ".encoding = \"UTF-8\"\nsnapshot.lastUID = \"1\"\nsnapshot.current = \"1\"\n")
	fmt.Fprintf(&b, "snapshot0.uid = \"1\"\nsnapshot0.filename = \"%s-Snapshot1.vmsn\"\n", name)
	fmt.Fprintf(&b, "snapshot0.displayName = \"before-migration\"\nsnapshot0.description = \"fixture snapshot\"\n")
	fmt.Fprintf(&b, "snapshot0.createTimeHigh = \"%d\"\nsnapshot0.createTimeLow = \"%d\"\n", created>>32, int32(uint32(created)))
	fmt.Fprintf(&b, "snapshot0.numDisks = \"%d\"\n", len(files.Disks))
	for i, d := range files.Disks {
		fmt.Fprintf(&b, "snapshot0.disk%d.fileName = \"%s\"\nsnapshot0.disk%d.node = \"%s\"\n", i, hostRef(files.VMXPath, d.Descriptor), i, d.Controller)
	}
	b.WriteString("snapshot.numSnapshots = \"1\"\n")
	return b.String()
}

// hostRef is how a .vmx refers to a file: relative inside the VM folder,
// absolute elsewhere.
func hostRef(vmxPath, p string) string {
	dir := vmxPath[:strings.LastIndex(vmxPath, "/")+1]
	if rel, ok := strings.CutPrefix(p, dir); ok {
		return rel
	}
	return p
}

// writeDisk writes one disk's descriptor, sparse flat file and snapshot
// child; it returns the files and the name the .vmx must use.
func writeDisk(root string, spec VMSpec, d DiskSpec, base string, idx int) (DiskFiles, string, error) {
	if d.CapacityBytes <= 0 {
		return DiskFiles{}, "", fmt.Errorf("esxisim: disk %d: CapacityBytes must be positive", idx)
	}
	capacity := roundSector(d.CapacityBytes)
	ds := spec.Datastore
	if d.Datastore != "" {
		ds = d.Datastore
	}
	rel := spec.Name
	if d.Subdir != "" {
		rel += "/" + d.Subdir
	}
	localDir := filepath.Join(root, ds, filepath.FromSlash(rel))
	hostDir := volumesDir + "/" + ds + "/" + rel
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return DiskFiles{}, "", fmt.Errorf("esxisim: creating disk folder: %w", err)
	}
	content := d.Content
	if content == nil {
		content = DefaultContent(capacity, uint64(idx+1))
	}
	content = normalizeExtents(capacity, content)
	df := DiskFiles{
		CapacityBytes: capacity,
		Thin:          d.Thin,
		Descriptor:    hostDir + "/" + base + ".vmdk",
		Flat:          hostDir + "/" + base + "-flat.vmdk",
		LocalFlat:     filepath.Join(localDir, base+"-flat.vmdk"),
		Content:       content,
	}
	if err := writeSparse(df.LocalFlat, capacity, content); err != nil {
		return DiskFiles{}, "", err
	}
	adapter := "lsilogic"
	if strings.HasPrefix(d.Controller, "ide") {
		adapter = "ide"
	}
	desc := flatDescriptor(idBytes(ds, rel, base), base, capacity/512, adapter, d.Thin, spec.HardwareVersion)
	if err := os.WriteFile(filepath.Join(localDir, base+".vmdk"), []byte(desc), 0o644); err != nil {
		return DiskFiles{}, "", fmt.Errorf("esxisim: writing descriptor: %w", err)
	}
	vmxPath := volumesDir + "/" + spec.Datastore + "/" + spec.Name + "/" + spec.Name + ".vmx"
	top := df.Descriptor
	if spec.Snapshots {
		deltas := d.Deltas
		if deltas == nil {
			deltas = DefaultDeltas(capacity, uint64(idx+1))
		}
		cs := DiskChainSpec{Datastore: ds, Folder: rel, Name: base, CapacityBytes: capacity, Thin: d.Thin, Base: content, Deltas: deltas}
		if d.BaseDatastore != "" {
			cs.BaseDatastore, cs.BaseFolder = d.BaseDatastore, "base-"+base
		}
		if err := replaceWithChain(root, &df, filepath.Join(localDir, base+".vmdk"), cs, idx); err != nil {
			return DiskFiles{}, "", err
		}
		top = df.Child
	}
	return df, hostRef(vmxPath, top), nil
}

// flatDescriptor is the descriptor of a base disk of the given sectors
// whose extent is <base>-flat.vmdk; id (idBytes) gives its CID and UUID.
func flatDescriptor(id []byte, base string, sectors int64, adapter string, thin bool, hwVersion int) string {
	cid := hex.EncodeToString(id[:4])
	cyl := min(sectors/(255*63), 65535)
	var b strings.Builder
	fmt.Fprintf(&b, "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=%s\nparentCID=ffffffff\nisNativeSnapshot=\"no\"\ncreateType=\"vmfs\"\n\n", cid)
	fmt.Fprintf(&b, "# Extent description\nRW %d VMFS \"%s-flat.vmdk\"\n\n", sectors, base)
	fmt.Fprintf(&b, "# The Disk Data Base\n#DDB\n\n")
	fmt.Fprintf(&b, "ddb.adapterType = \"%s\"\n", adapter)
	fmt.Fprintf(&b, "ddb.geometry.cylinders = \"%d\"\nddb.geometry.heads = \"255\"\nddb.geometry.sectors = \"63\"\n", cyl)
	fmt.Fprintf(&b, "ddb.longContentID = \"%s%s\"\n", hex.EncodeToString(id[4:16]), cid)
	if thin {
		b.WriteString("ddb.thinProvisioned = \"1\"\n")
	}
	fmt.Fprintf(&b, "ddb.uuid = \"60 00 C2 %s\"\n", spacedHex(id[16:29]))
	fmt.Fprintf(&b, "ddb.virtualHWVersion = \"%d\"\n", hwVersion)
	return b.String()
}

// replaceWithChain replaces the plain disk df (its descriptor at
// localDesc) with the snapshot chain cs, whose base holds the same content;
// idx is the disk's index.
func replaceWithChain(root string, df *DiskFiles, localDesc string, cs DiskChainSpec, idx int) error {
	for _, f := range []string{df.LocalFlat, localDesc} {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("esxisim: %w", err)
		}
	}
	ch, err := WriteDiskChain(root, cs)
	if err != nil {
		return fmt.Errorf("esxisim: disk %d: %w", idx, err)
	}
	b := ch.Links[len(ch.Links)-1]
	df.Descriptor, df.Flat, df.LocalFlat, df.Chain = b.Descriptor, b.Extent, b.LocalExtent, ch
	df.Child, df.Delta = ch.Top, ch.Links[0].Extent
	return nil
}

// writeSparse creates a file of the given size holding only the extents.
func writeSparse(name string, capacity int64, exts []Extent) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("esxisim: creating %s: %w", name, err)
	}
	if err := f.Truncate(capacity); err != nil {
		f.Close()
		return fmt.Errorf("esxisim: sizing %s: %w", name, err)
	}
	buf := make([]byte, 1<<20)
	for _, e := range exts {
		for off := e.Offset; off < e.Offset+e.Length; {
			n := min(int64(len(buf)), e.Offset+e.Length-off)
			extentBytes(e, buf[:n], off)
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				f.Close()
				return fmt.Errorf("esxisim: writing %s: %w", name, err)
			}
			off += n
		}
	}
	return f.Close()
}

// AddVM writes the VM's files under Root (see WriteVM), registers it and
// sets its initial power state, Tools state and IPs from spec. A System or
// Invalid spec adds a system VM or an invalid VM instead (see VMSpec).
func (s *Server) AddVM(spec VMSpec) (int, *VMFiles, error) {
	switch {
	case spec.System && spec.Invalid:
		return 0, nil, errors.New("esxisim: a VMSpec cannot be both System and Invalid")
	case spec.System:
		return s.addSystemVM(spec)
	case spec.Invalid:
		return s.addInvalidVM(spec)
	}
	files, err := WriteVM(s.opts.Root, spec)
	if err != nil {
		return 0, nil, err
	}
	id := s.Register(files.VMXPath)
	if err := s.SetPowerState(id, spec.Power); err != nil {
		return 0, nil, err
	}
	if err := s.SetGuest(id, spec.Tools, spec.IPs...); err != nil {
		return 0, nil, err
	}
	return id, files, nil
}
