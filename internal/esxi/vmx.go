package esxi

import (
	"cmp"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// kvFile is a parsed `key = "value"` file (.vmx, .vmsd): keys are
// case-insensitive and values have their |XX escapes decoded.
type kvFile struct {
	values map[string]string // lower-cased key -> decoded value
	keys   []string          // lower-cased keys in file order
}

func (f kvFile) get(key string) (string, bool) {
	v, ok := f.values[strings.ToLower(key)]
	return v, ok
}

func (f kvFile) str(key string) string {
	v, _ := f.get(key)
	return v
}

// parseKV parses .vmx-style text. Lines are `key = "value"` (quotes
// optional); `#` starts a comment line.
func parseKV(s string) (kvFile, []Problem) {
	f := kvFile{values: map[string]string{}}
	var probs []Problem
	for i, raw := range strings.Split(s, "\n") {
		ln := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("not a key = value line: %q", truncate(line, 120))})
			continue
		}
		key := strings.ToLower(strings.TrimSpace(line[:eq]))
		val := strings.TrimSpace(line[eq+1:])
		if strings.HasPrefix(val, `"`) {
			if len(val) < 2 || !strings.HasSuffix(val, `"`) {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("value of %q has no closing quote", key)})
				continue
			}
			val = val[1 : len(val)-1]
		}
		val = decodeVMXEscapes(val)
		if old, dup := f.values[key]; dup {
			if old != val {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("key %q set twice with different values; the last one (%q) wins, as in hostd", key, truncate(val, 60))})
			}
		} else {
			f.keys = append(f.keys, key)
		}
		f.values[key] = val
	}
	return f, probs
}

// decodeVMXEscapes decodes VMware's |XX escapes (|0A newline, |22 quote,
// |7C bar). A | not followed by two hex digits is kept as is.
func decodeVMXEscapes(s string) string {
	if !strings.Contains(s, "|") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '|' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			n, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(n))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func parseVMXBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, true
	case "false", "0", "no":
		return false, true
	}
	return false, false
}

// Firmware is a VM's boot firmware.
type Firmware string

// Firmware values.
const (
	FirmwareBIOS Firmware = "bios"
	FirmwareEFI  Firmware = "efi"
)

// VMXDisk is a hard disk declared in a .vmx.
type VMXDisk struct {
	// Device is the controller and unit, e.g. "scsi0:1", "nvme0:0".
	Device string
	// Bus is "scsi", "sata", "nvme" or "ide".
	Bus        string
	Controller int
	Unit       int
	// ControllerType is the controller's virtualDev ("pvscsi", "lsilogic",
	// "lsisas1068", ...); "" when the .vmx does not say.
	ControllerType string
	// FileName is the descriptor name as written in the .vmx.
	FileName string
	// DeviceType is deviceType as written ("scsi-hardDisk", "disk", ...).
	DeviceType string
	// Mode is "persistent" (or ""), "independent-persistent" or
	// "independent-nonpersistent".
	Mode string
	// Present reports device and controller present = TRUE.
	Present bool
}

// Independent reports an independent disk (excluded from snapshots).
func (d VMXDisk) Independent() bool { return strings.HasPrefix(strings.ToLower(d.Mode), "independent") }

// VMXNIC is a network adapter declared in a .vmx.
type VMXNIC struct {
	// Device is "ethernetN".
	Device      string
	Index       int
	NetworkName string
	// MAC is the adapter's address (static address, else the generated one).
	MAC         string
	AddressType string // "generated", "static", "vpx"
	VirtualDev  string // "vmxnet3", "e1000e", ...
	Present     bool
}

// VMXConfig holds the values of a .vmx that describe a VM.
type VMXConfig struct {
	DisplayName     string
	GuestOS         string
	Annotation      string
	HardwareVersion int
	// Firmware is FirmwareBIOS when the .vmx has no firmware key (VMware's default).
	Firmware   Firmware
	SecureBoot bool
	// CPUs is numvcpus; 1 when the key is absent (VMware's default).
	CPUs int
	// CoresPerSocket is cpuid.coresPerSocket; 0 when absent or unusable
	// (with a Problem when present but out of range or not a divisor of
	// CPUs).
	CoresPerSocket int
	// VTPM is vtpm.present.
	VTPM bool
	// MemoryMiB is memSize; 0 (with a Problem) when absent or out of range
	// 1-maxMemoryMiB.
	MemoryMiB int
	Disks     []VMXDisk
	NICs      []VMXNIC
	// WorkingDir is workingDir as written: the folder where ESXi puts the
	// VM's snapshot deltas (and swap) instead of the .vmx's folder; ""
	// when absent. See ResolveWorkingDir.
	WorkingDir string
	// Values holds every key (lower-cased) with its decoded value.
	Values map[string]string
}

var (
	vmxDiskKeyRE = regexp.MustCompile(`^(scsi|sata|nvme|ide)(\d+):(\d+)\.filename$`)
	vmxNICKeyRE  = regexp.MustCompile(`^ethernet(\d+)\.present$`)
)

func isHardDisk(deviceType, fileName string) bool {
	switch strings.ToLower(deviceType) {
	case "disk", "scsi-harddisk", "ata-harddisk", "plaindisk", "rawdisk", "scsi-nonpassthru-rdm", "scsi-passthru-rdm", "":
	default:
		return false
	}
	if deviceType == "" {
		return strings.HasSuffix(strings.ToLower(fileName), ".vmdk")
	}
	return true
}

// Bounds on the numbers a .vmx may hold. They are above what any ESXi
// release allows (ESXi 8: 768 vCPUs, 24 TiB of memory, hardware version
// 21) and far below what would overflow when converted to bytes.
const (
	maxVCPUs           = 4096
	maxMemoryMiB       = 64 << 20 // 64 TiB
	maxHardwareVersion = 1000
	maxDevices         = 1024
)

// isDigits reports a non-empty run of ASCII digits (a number too large to
// parse is out of range, not "not a number").
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// ParseVMX parses a .vmx file. Keys are case-insensitive and values have
// their |XX escapes decoded.
func ParseVMX(s string) (VMXConfig, []Problem) {
	f, probs := parseKV(s)
	p := &vmxParser{f: f, probs: probs}
	c := VMXConfig{Values: f.values}
	c.DisplayName = f.str("displayName")
	c.GuestOS = f.str("guestOS")
	c.Annotation = f.str("annotation")
	c.WorkingDir = f.str("workingDir")
	if enc, ok := f.get(".encoding"); ok && !strings.EqualFold(enc, "UTF-8") {
		p.problem(".encoding is %q, not UTF-8: names with non-ASCII characters may be wrong", enc)
	}
	p.readSizing(&c)
	p.readFirmware(&c)
	c.Disks = p.disks()
	sortBootOrder(c.Disks, f.str("bios.hddOrder"))
	c.NICs = p.nics()
	return c, p.probs
}

// vmxParser reads typed values out of a parsed .vmx, collecting a Problem
// for each value it cannot use.
type vmxParser struct {
	f     kvFile
	probs []Problem
}

func (p *vmxParser) problem(format string, args ...any) {
	p.probs = append(p.probs, Problem{Message: fmt.Sprintf(format, args...)})
}

// count reads a count in [lo, hi]: anything else is a problem and 0, so
// that no sign or overflow error reaches a resource request.
func (p *vmxParser) count(key string, lo, hi int) (int, bool) {
	v, ok := p.f.get(key)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case err != nil && !isDigits(strings.TrimSpace(v)):
		p.problem("%s = %q is not a number", key, v)
		return 0, false
	case err != nil || n < lo || n > hi:
		p.problem("%s = %q is out of range %d-%d", key, v, lo, hi)
		return 0, false
	}
	return n, true
}

// flag reads a boolean key; absent or not a boolean (a problem) is false.
func (p *vmxParser) flag(key string) bool {
	v, ok := p.f.get(key)
	if !ok {
		return false
	}
	b, valid := parseVMXBool(v)
	if !valid {
		p.problem("%s = %q is not a boolean", key, v)
	}
	return b
}

// readSizing reads the hardware version, vCPUs, cores per socket and memory.
func (p *vmxParser) readSizing(c *VMXConfig) {
	c.HardwareVersion, _ = p.count("virtualHW.version", 1, maxHardwareVersion)
	if n, ok := p.count("numvcpus", 1, maxVCPUs); ok {
		c.CPUs = n
	} else if _, present := p.f.get("numvcpus"); !present {
		c.CPUs = 1
	}
	if n, ok := p.count("cpuid.coresPerSocket", 1, maxVCPUs); ok {
		c.CoresPerSocket = n
		if c.CPUs > 0 && c.CPUs%n != 0 {
			p.problem("cpuid.coresPerSocket = %d does not divide numvcpus = %d", n, c.CPUs)
			c.CoresPerSocket = 0
		}
	}
	if n, ok := p.count("memSize", 1, maxMemoryMiB); ok {
		c.MemoryMiB = n
	} else if _, present := p.f.get("memSize"); !present {
		p.problem("memSize is missing")
	}
}

// readFirmware reads the firmware, vTPM and secure boot settings.
func (p *vmxParser) readFirmware(c *VMXConfig) {
	switch fw, ok := p.f.get("firmware"); {
	case !ok || strings.EqualFold(fw, "bios"):
		c.Firmware = FirmwareBIOS
	case strings.EqualFold(fw, "efi"):
		c.Firmware = FirmwareEFI
	default:
		p.problem("unknown firmware %q", fw)
	}
	c.VTPM = p.flag("vtpm.present")
	c.SecureBoot = p.flag("uefi.secureBoot.enabled")
}

// disks returns the hard disks in file order.
func (p *vmxParser) disks() []VMXDisk {
	var disks []VMXDisk
	for _, k := range p.f.keys {
		m := vmxDiskKeyRE.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if d, ok := p.disk(k, m[1], m[2], m[3]); ok {
			disks = append(disks, d)
		}
	}
	return disks
}

// disk reads the disk whose fileName is key, on controller bus+ctrlNum at
// unit; false when the device is not a hard disk (a CD-ROM, say).
func (p *vmxParser) disk(key, bus, ctrlNum, unit string) (VMXDisk, bool) {
	dev := bus + ctrlNum + ":" + unit
	ctrl := bus + ctrlNum
	fileName := p.f.str(key)
	devType := p.f.str(dev + ".deviceType")
	if !isHardDisk(devType, fileName) {
		return VMXDisk{}, false
	}
	d := VMXDisk{
		Device:         dev,
		Bus:            bus,
		FileName:       fileName,
		DeviceType:     devType,
		Mode:           cmp.Or(p.f.str(dev+".mode"), "persistent"),
		ControllerType: p.f.str(ctrl + ".virtualDev"),
	}
	d.Controller, _ = strconv.Atoi(ctrlNum)
	d.Unit, _ = strconv.Atoi(unit)
	devPresent := p.flag(dev + ".present")
	ctrlPresent := p.flag(ctrl + ".present")
	// IDE controllers are built in and often have no present key.
	if bus == "ide" {
		if _, ok := p.f.get(ctrl + ".present"); !ok {
			ctrlPresent = true
		}
	}
	d.Present = devPresent && ctrlPresent
	if devPresent && !ctrlPresent {
		p.problem("disk %s is present but its controller %s is not", dev, ctrl)
	}
	return d, true
}

// sortBootOrder puts disks in boot order: the disk hddOrder (bios.hddOrder)
// names first, then SCSI, SATA, NVMe and IDE, each by controller and unit.
// The first disk becomes the destination VM's boot disk.
func sortBootOrder(disks []VMXDisk, hddOrder string) {
	boot := strings.ToLower(strings.TrimSpace(strings.Split(hddOrder, ",")[0]))
	busRank := map[string]int{"scsi": 0, "sata": 1, "nvme": 2, "ide": 3}
	sort.SliceStable(disks, func(i, j int) bool {
		a, b := disks[i], disks[j]
		if (a.Device == boot) != (b.Device == boot) {
			return a.Device == boot
		}
		if a.Bus != b.Bus {
			return busRank[a.Bus] < busRank[b.Bus]
		}
		if a.Controller != b.Controller {
			return a.Controller < b.Controller
		}
		return a.Unit < b.Unit
	})
}

// nics returns the network adapters by index.
func (p *vmxParser) nics() []VMXNIC {
	var nics []VMXNIC
	for _, k := range p.f.keys {
		m := vmxNICKeyRE.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		nics = append(nics, p.nic(m[1]))
	}
	sort.SliceStable(nics, func(i, j int) bool { return nics[i].Index < nics[j].Index })
	return nics
}

// nic reads adapter ethernet<index>.
func (p *vmxParser) nic(index string) VMXNIC {
	dev := "ethernet" + index
	n := VMXNIC{
		Device:      dev,
		NetworkName: p.f.str(dev + ".networkName"),
		AddressType: p.f.str(dev + ".addressType"),
		VirtualDev:  p.f.str(dev + ".virtualDev"),
		Present:     p.flag(dev + ".present"),
	}
	n.Index, _ = strconv.Atoi(index)
	switch strings.ToLower(n.AddressType) {
	case "static":
		n.MAC = p.f.str(dev + ".address")
	case "generated", "vpx":
		n.MAC = p.f.str(dev + ".generatedAddress")
	default:
		n.MAC = p.f.str(dev + ".address")
		if n.MAC == "" {
			n.MAC = p.f.str(dev + ".generatedAddress")
		}
	}
	n.MAC = strings.ToLower(n.MAC)
	return n
}

// VMSD is a parsed .vmsd (the snapshot database next to a .vmx).
type VMSD struct {
	// CurrentUID is the uid of the snapshot the VM runs on (0: none).
	CurrentUID int
	Snapshots  []VMSDSnapshot
}

// VMSDSnapshot is one snapshotN entry of a .vmsd.
type VMSDSnapshot struct {
	UID         int
	ParentUID   int // 0 for a root snapshot
	DisplayName string
	Description string
	FileName    string // the .vmsn
	Disks       []VMSDDisk
}

// VMSDDisk is one disk captured by a snapshot.
type VMSDDisk struct {
	Node     string // "scsi0:0"
	FileName string
}

// maxVMSDDisks bounds a snapshot's numDisks (a VM has at most 4 SCSI
// controllers x 64 disks plus SATA/NVMe/IDE).
const maxVMSDDisks = 512

var vmsdSnapRE = regexp.MustCompile(`^snapshot(\d+)\.uid$`)

// ParseVMSD parses a .vmsd file.
func ParseVMSD(s string) (VMSD, []Problem) {
	f, probs := parseKV(s)
	var v VMSD
	num := func(key string) int {
		val, ok := f.get(key)
		if !ok {
			return 0
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			probs = append(probs, Problem{Message: fmt.Sprintf("%s = %q is not a non-negative number", key, val)})
			return 0
		}
		return n
	}
	v.CurrentUID = num("snapshot.current")
	for _, k := range f.keys {
		m := vmsdSnapRE.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		p := "snapshot" + m[1] + "."
		s := VMSDSnapshot{
			UID:         num(p + "uid"),
			ParentUID:   num(p + "parent"),
			DisplayName: f.str(p + "displayName"),
			Description: f.str(p + "description"),
			FileName:    f.str(p + "filename"),
		}
		nd := num(p + "numDisks")
		if nd < 0 || nd > maxVMSDDisks {
			probs = append(probs, Problem{Message: fmt.Sprintf("%snumDisks = %d is out of range 0-%d", p, nd, maxVMSDDisks)})
			nd = 0
		}
		for d := 0; d < nd; d++ {
			dp := p + "disk" + strconv.Itoa(d) + "."
			s.Disks = append(s.Disks, VMSDDisk{Node: f.str(dp + "node"), FileName: f.str(dp + "fileName")})
		}
		v.Snapshots = append(v.Snapshots, s)
	}
	if n, ok := f.get("snapshot.numSnapshots"); ok && n != strconv.Itoa(len(v.Snapshots)) {
		probs = append(probs, Problem{Message: fmt.Sprintf("snapshot.numSnapshots = %s but %d snapshots are listed", n, len(v.Snapshots))})
	}
	return v, probs
}

// ResolveWorkingDir returns the absolute folder a .vmx's workingDir names
// (relative to the .vmx's folder unless absolute), or "" when it is absent,
// "." or that folder itself: the deltas are then beside the .vmx.
func ResolveWorkingDir(vmxPath, dir string) (string, error) {
	dir = strings.TrimRight(strings.TrimSpace(dir), "/")
	if dir == "" || dir == "." {
		return "", nil
	}
	full, err := ResolveDiskPath(vmxPath, dir)
	if err != nil {
		return "", fmt.Errorf("workingDir: %w", err)
	}
	if full = path.Clean(full); full == path.Dir(vmxPath) {
		return "", nil
	}
	return full, nil
}
