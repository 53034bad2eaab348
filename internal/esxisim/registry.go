package esxisim

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// PowerState is a VM's power state.
type PowerState int

// Power states.
const (
	PoweredOff PowerState = iota
	PoweredOn
	Suspended
)

// String returns the state as power.getstate prints it.
func (p PowerState) String() string {
	switch p {
	case PoweredOn:
		return "Powered on"
	case Suspended:
		return "Suspended"
	}
	return "Powered off"
}

// vim returns the vim.VirtualMachine.PowerState enum value.
func (p PowerState) vim() string {
	switch p {
	case PoweredOn:
		return "poweredOn"
	case Suspended:
		return "suspended"
	}
	return "poweredOff"
}

// ToolsState is the state of VMware Tools in a guest.
type ToolsState int

// VMware Tools states.
const (
	ToolsNotInstalled ToolsState = iota
	ToolsNotRunning
	ToolsRunning
)

// VMInfo describes a registered VM.
type VMInfo struct {
	Vmid    int
	VMXPath string // host path, /vmfs/volumes/<ds>/<dir>/<name>.vmx
	Power   PowerState
	Tools   ToolsState
	IPs     []string
}

// vmEntry is a registered VM. Fields are guarded by Server.mu.
type vmEntry struct {
	id       int
	vmxPath  string
	power    PowerState
	tools    ToolsState
	ips      []string
	hostName string
	bootTime time.Time
	shutdown *time.Timer
}

// Register adds the VM whose .vmx is at vmxPath (a host path such as
// /vmfs/volumes/datastore1/vm/vm.vmx, or a path relative to Options.Root)
// and returns its Vmid. Like hostd, it does not check that the file exists:
// a VM whose .vmx cannot be read is listed as "Skipping invalid VM". The VM
// starts powered off with Tools not installed. Registering the same path
// twice returns the existing Vmid.
func (s *Server) Register(vmxPath string) int {
	if !strings.HasPrefix(vmxPath, "/") {
		vmxPath = volumesDir + "/" + vmxPath
	}
	vmxPath = cleanHostPath(vmxPath)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, vm := range s.vms {
		if vm.vmxPath == vmxPath {
			return vm.id
		}
	}
	id := s.nextVmid
	s.nextVmid += s.opts.VmidStep
	s.vms = append(s.vms, &vmEntry{id: id, vmxPath: vmxPath})
	return id
}

// RegisterAll scans Root for .vmx files (not following symlinks, so a
// datastore name linked to its UUID directory is not seen twice), registers
// them in sorted path order and returns their Vmids.
func (s *Server) RegisterAll() ([]int, error) {
	var paths []string
	err := filepath.WalkDir(s.opts.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(strings.ToLower(d.Name()), ".vmx") {
			rel, err := filepath.Rel(s.opts.Root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("esxisim: scanning %s: %w", s.opts.Root, err)
	}
	sort.Strings(paths)
	ids := make([]int, 0, len(paths))
	for _, p := range paths {
		ids = append(ids, s.Register(p))
	}
	return ids, nil
}

// Unregister removes a VM from the inventory (its files stay).
func (s *Server) Unregister(vmid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, vm := range s.vms {
		if vm.id == vmid {
			if vm.shutdown != nil {
				vm.shutdown.Stop()
				delete(s.timers, vm.shutdown)
			}
			s.vms = append(s.vms[:i], s.vms[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("esxisim: no VM with Vmid %d", vmid)
}

// VMs returns the registered VMs in Vmid order.
func (s *Server) VMs() []VMInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VMInfo, 0, len(s.vms))
	for _, vm := range s.vms {
		out = append(out, VMInfo{Vmid: vm.id, VMXPath: vm.vmxPath, Power: vm.power, Tools: vm.tools, IPs: append([]string(nil), vm.ips...)})
	}
	return out
}

func (s *Server) vmLocked(vmid int) (*vmEntry, error) {
	for _, vm := range s.vms {
		if vm.id == vmid {
			return vm, nil
		}
	}
	return nil, fmt.Errorf("esxisim: no VM with Vmid %d", vmid)
}

// SetPowerState sets a VM's power state directly (cancelling a pending
// guest shutdown).
func (s *Server) SetPowerState(vmid int, p PowerState) error {
	snapMu.Lock() // after the guest's writes in flight
	defer snapMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		return err
	}
	s.setPowerLocked(vm, p)
	return nil
}

func (s *Server) setPowerLocked(vm *vmEntry, p PowerState) {
	if vm.shutdown != nil {
		vm.shutdown.Stop()
		delete(s.timers, vm.shutdown)
		vm.shutdown = nil
	}
	if p == PoweredOn && vm.power != PoweredOn {
		vm.bootTime = time.Now().UTC()
	}
	vm.power = p
}

// PowerState returns a VM's power state.
func (s *Server) PowerState(vmid int) (PowerState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		return PoweredOff, err
	}
	return vm.power, nil
}

// SetGuest sets the VMware Tools state and the guest's IP addresses (shown
// by get.guest and get.summary while the VM is powered on; the first is the
// primary ipAddress).
func (s *Server) SetGuest(vmid int, tools ToolsState, ips ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		return err
	}
	vm.tools = tools
	vm.ips = append([]string(nil), ips...)
	return nil
}

// startShutdownLocked schedules the guest power-off after ShutdownDelay.
func (s *Server) startShutdownLocked(vm *vmEntry) {
	if vm.shutdown != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(s.opts.ShutdownDelay, func() {
		snapMu.Lock() // the guest's writes in flight land first
		defer snapMu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.timers, t)
		if vm.shutdown == t {
			vm.shutdown = nil
			vm.power = PoweredOff
		}
	})
	vm.shutdown = t
	s.timers[t] = struct{}{}
}

// vmx is a parsed .vmx (or .vmsd): keys lower-cased, values unescaped.
type vmx struct {
	vals map[string]string
	keys []string // original order, lower-cased
}

func (v vmx) get(key string) string { return v.vals[strings.ToLower(key)] }

func (v vmx) has(key string) bool {
	_, ok := v.vals[strings.ToLower(key)]
	return ok
}

// parseVMX parses `key = "value"` lines, decoding |XX hex escapes.
func parseVMX(b []byte) vmx {
	v := vmx{vals: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		val = strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		if _, dup := v.vals[k]; !dup {
			v.keys = append(v.keys, k)
		}
		v.vals[k] = vmxUnescape(val)
	}
	return v
}

// vmxUnescape decodes the |XX escapes of .vmx values (|0A newline, |22 quote, |7C pipe).
func vmxUnescape(s string) string {
	if !strings.Contains(s, "|") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '|' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// vmxEscape encodes a value for a .vmx file.
func vmxEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '|' || c == '"' || c < 0x20 {
			fmt.Fprintf(&b, "|%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

var extentRE = regexp.MustCompile(`^(?:RW|RDONLY|NOACCESS)\s+\d+\s+\S+\s+"(.+)"`)

// descriptorExtents returns the extent file names of a .vmdk descriptor and
// its parentFileNameHint.
func descriptorExtents(b []byte) (extents []string, parent string) {
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if m := extentRE.FindStringSubmatch(line); m != nil {
			extents = append(extents, m[1])
		}
		if v, ok := strings.CutPrefix(line, "parentFileNameHint="); ok {
			parent = strings.Trim(v, `"`)
		}
	}
	return extents, parent
}

// resolveIn resolves a file name found in a .vmx or descriptor relative to
// the directory dir of that file (absolute names are taken as they are).
func resolveIn(dir, name string) string {
	if strings.HasPrefix(name, "/") {
		return cleanHostPath(name)
	}
	return cleanHostPath(path.Join(dir, name))
}

// lockedFiles returns the host paths a running VM holds exclusively: the
// extents of the disks its .vmx names (the running snapshot's delta, or the
// flat file without snapshots; parents of a snapshot stay readable, as on a
// real host), swap files and the .vmx.lck.
func (s *Server) lockedFiles(vmxPath string) []string {
	dir := path.Dir(vmxPath)
	var out []string
	if b, err := s.readHostFile(vmxPath); err == nil {
		v := parseVMX(b)
		for _, k := range v.keys {
			if !strings.HasSuffix(k, ".filename") {
				continue
			}
			val := v.vals[k]
			if !strings.HasSuffix(strings.ToLower(val), ".vmdk") {
				continue
			}
			dev := strings.TrimSuffix(k, ".filename")
			if strings.EqualFold(v.get(dev+".present"), "FALSE") {
				continue
			}
			desc := resolveIn(dir, val)
			db, err := s.readHostFile(desc)
			if err != nil {
				continue
			}
			exts, _ := descriptorExtents(db)
			for _, e := range exts {
				out = append(out, resolveIn(path.Dir(desc), e))
			}
		}
	}
	if names, err := s.readDir(dir); err == nil {
		for _, n := range names {
			if strings.HasSuffix(n, ".vswp") || strings.HasSuffix(n, ".lck") || strings.HasSuffix(n, ".vmem") {
				out = append(out, dir+"/"+n)
			}
		}
	}
	return out
}

// isLocked reports whether fi is a file held by a powered-on VM.
func (s *Server) isLocked(fi fs.FileInfo) bool {
	s.mu.Lock()
	var running []string
	for _, vm := range s.vms {
		if vm.power == PoweredOn {
			running = append(running, vm.vmxPath)
		}
	}
	s.mu.Unlock()
	for _, vmxPath := range running {
		for _, p := range s.lockedFiles(vmxPath) {
			rel, ok := rootRel(p)
			if !ok {
				continue
			}
			if lfi, err := s.statRel(rel); err == nil && os.SameFile(fi, lfi) {
				return true
			}
		}
	}
	return false
}

// datastoreAliases maps datastore directory names in Root to the friendly
// name of a symlink pointing at them (as /vmfs/volumes/datastore1 links to
// /vmfs/volumes/<uuid> on a host).
func (s *Server) datastoreAliases() (uuidToName, nameToUUID map[string]string) {
	uuidToName, nameToUUID = map[string]string{}, map[string]string{}
	entries, err := os.ReadDir(s.opts.Root)
	if err != nil {
		return uuidToName, nameToUUID
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(s.opts.Root, e.Name()))
		if err != nil || strings.Contains(strings.TrimPrefix(target, "./"), "/") {
			continue
		}
		target = strings.TrimPrefix(target, "./")
		uuidToName[target] = e.Name()
		nameToUUID[e.Name()] = target
	}
	return uuidToName, nameToUUID
}

// InventoryXML returns /etc/vmware/hostd/vmInventory.xml for the registered
// VMs, in the format of a real host (paths through the datastore UUID
// directory when the datastore name is a symlink to one).
func (s *Server) InventoryXML() string {
	s.mu.Lock()
	override, ok := s.inventoryXML, s.inventoryXMLSet
	s.mu.Unlock()
	if ok {
		return override
	}
	_, nameToUUID := s.datastoreAliases()
	vms := s.VMs()
	var b strings.Builder
	b.WriteString("<ConfigRoot>\n")
	for i, vm := range vms {
		p := vm.VMXPath
		if rel, ok := strings.CutPrefix(p, volumesDir+"/"); ok {
			ds, rest, _ := strings.Cut(rel, "/")
			if u, ok := nameToUUID[ds]; ok {
				p = volumesDir + "/" + u + "/" + rest
			}
		}
		fmt.Fprintf(&b, "  <ConfigEntry id=\"%04d\">\n", i)
		fmt.Fprintf(&b, "    <objID>%d</objID>\n", vm.Vmid)
		fmt.Fprintf(&b, "    <secDomain>%d</secDomain>\n", 2*i+17)
		fmt.Fprintf(&b, "    <vmxCfgPath>%s</vmxCfgPath>\n", xmlEscaper.Replace(p))
		b.WriteString("  </ConfigEntry>\n")
	}
	b.WriteString("</ConfigRoot>\n")
	return b.String()
}

// SetInventoryXML makes /etc/vmware/hostd/vmInventory.xml read as content
// instead of the file generated from the registry, for hosts whose file is
// damaged or holds entries hostd itself ignores. ClearInventoryXML undoes it.
func (s *Server) SetInventoryXML(content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inventoryXML, s.inventoryXMLSet = content, true
}

// ClearInventoryXML goes back to the generated vmInventory.xml.
func (s *Server) ClearInventoryXML() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inventoryXML, s.inventoryXMLSet = "", false
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// dsPath renders a host path as vim does: "[datastore] dir/file.vmx", or
// "[] /abs/path" outside /vmfs/volumes.
func (s *Server) dsPath(p string, uuidToName map[string]string) string {
	rel, ok := strings.CutPrefix(p, volumesDir+"/")
	if !ok {
		return "[] " + p
	}
	ds, rest, _ := strings.Cut(rel, "/")
	if n, ok := uuidToName[ds]; ok {
		ds = n
	}
	return "[" + ds + "] " + rest
}
