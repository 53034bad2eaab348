package esxi

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PowerState is a VM's power state.
type PowerState string

// Power states, as vSphere names them.
const (
	PowerStateUnknown PowerState = ""
	PoweredOn         PowerState = "poweredOn"
	PoweredOff        PowerState = "poweredOff"
	Suspended         PowerState = "suspended"
)

// ParsePowerState parses `vim-cmd vmsvc/power.getstate` output
// ("Retrieved runtime info" then "Powered on", "Powered off" or "Suspended").
func ParsePowerState(out string) (PowerState, []Problem) {
	var (
		state PowerState
		probs []Problem
	)
	for i, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		var s PowerState
		switch line {
		case "", "Retrieved runtime info":
			continue
		case "Powered on":
			s = PoweredOn
		case "Powered off":
			s = PoweredOff
		case "Suspended":
			s = Suspended
		default:
			probs = append(probs, Problem{Line: i + 1, Message: fmt.Sprintf("unexpected line %q", truncate(line, 120))})
			continue
		}
		if state != "" && state != s {
			probs = append(probs, Problem{Line: i + 1, Message: "more than one power state printed"})
			return PowerStateUnknown, withSource(probs, "power.getstate")
		}
		state = s
	}
	if state == "" {
		probs = append(probs, Problem{Message: "no power state in output"})
	}
	return state, withSource(probs, "power.getstate")
}

// GuestInfo is the parsed output of `vim-cmd vmsvc/get.guest`.
type GuestInfo struct {
	ToolsStatus        string // "toolsOk", "toolsNotInstalled", "toolsNotRunning", "toolsOld"
	ToolsRunningStatus string // "guestToolsRunning", "guestToolsNotRunning", ...
	ToolsVersionStatus string
	ToolsVersion       string
	GuestID            string
	GuestFullName      string
	GuestState         string // "running", "notRunning"
	HostName           string
	IPAddress          string
	NICs               []GuestNIC
}

// ToolsRunning reports toolsRunningStatus = guestToolsRunning.
func (g GuestInfo) ToolsRunning() bool { return g.ToolsRunningStatus == "guestToolsRunning" }

// GuestNIC is one entry of GuestInfo.net.
type GuestNIC struct {
	Network        string
	MAC            string
	IPs            []string
	Connected      bool
	DeviceConfigID int
}

func dumpRoot(out, typ, src string) (*dumpValue, []Problem) {
	d, probs := parseDump(out)
	for _, r := range d.roots {
		if r.kind == dumpObject && r.typ == typ {
			return r, withSource(probs, src)
		}
	}
	probs = append(probs, Problem{Message: fmt.Sprintf("no (%s) object in output", typ)})
	return nil, withSource(probs, src)
}

func dumpStr(v *dumpValue, keys ...string) string {
	s, _ := v.path(keys...).str()
	return s
}

func dumpInt(v *dumpValue, probs *[]Problem, keys ...string) int64 {
	s, ok := v.path(keys...).str()
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		*probs = append(*probs, Problem{Message: fmt.Sprintf("%s = %q is not a number", strings.Join(keys, "."), s)})
		return 0
	}
	return n
}

// dumpCount reads a size or count in [0, hi]; anything else is a problem
// and 0, so no sign or overflow error reaches a resource request.
func dumpCount(v *dumpValue, probs *[]Problem, hi int64, keys ...string) int64 {
	before := len(*probs)
	n := dumpInt(v, probs, keys...)
	if len(*probs) == before && (n < 0 || n > hi) {
		*probs = append(*probs, Problem{Message: fmt.Sprintf("%s = %d is out of range 0-%d", strings.Join(keys, "."), n, hi)})
		return 0
	}
	return n
}

// ParseGuestInfo parses `vim-cmd vmsvc/get.guest` output. A truncated dump
// yields the fields before the cut plus a Problem.
func ParseGuestInfo(out string) (GuestInfo, []Problem) {
	r, probs := dumpRoot(out, "vim.vm.GuestInfo", "get.guest")
	if r == nil {
		return GuestInfo{}, probs
	}
	g := GuestInfo{
		ToolsStatus:        dumpStr(r, "toolsStatus"),
		ToolsRunningStatus: dumpStr(r, "toolsRunningStatus"),
		ToolsVersionStatus: dumpStr(r, "toolsVersionStatus"),
		ToolsVersion:       dumpStr(r, "toolsVersion"),
		GuestID:            dumpStr(r, "guestId"),
		GuestFullName:      dumpStr(r, "guestFullName"),
		GuestState:         dumpStr(r, "guestState"),
		HostName:           dumpStr(r, "hostName"),
		IPAddress:          dumpStr(r, "ipAddress"),
	}
	if net := r.field("net"); net != nil && net.kind == dumpArray {
		for _, it := range net.items {
			if it.kind != dumpObject {
				continue
			}
			n := GuestNIC{
				Network: dumpStr(it, "network"),
				MAC:     strings.ToLower(dumpStr(it, "macAddress")),
			}
			n.Connected = dumpStr(it, "connected") == "true"
			n.DeviceConfigID = int(dumpInt(it, &probs, "deviceConfigId"))
			if ips := it.field("ipAddress"); ips != nil && ips.kind == dumpArray {
				for _, ip := range ips.items {
					if s, ok := ip.str(); ok {
						n.IPs = append(n.IPs, s)
					}
				}
			}
			g.NICs = append(g.NICs, n)
		}
	}
	return g, probs
}

// Summary is the parsed output of `vim-cmd vmsvc/get.summary`.
type Summary struct {
	PowerState         PowerState
	ConnectionState    string
	Name               string
	VMPathName         string // "[datastore] dir/vm.vmx"
	Annotation         string
	UUID               string
	InstanceUUID       string
	GuestID            string
	GuestFullName      string
	ToolsStatus        string
	ToolsRunningStatus string
	HostName           string
	IPAddress          string
	MemoryMiB          int
	CPUs               int
	NumEthernetCards   int
	NumVirtualDisks    int
	CommittedBytes     int64
	UncommittedBytes   int64
	OverallStatus      string
	Template           bool
}

// ParseSummary parses `vim-cmd vmsvc/get.summary` output.
func ParseSummary(out string) (Summary, []Problem) {
	r, probs := dumpRoot(out, "vim.vm.Summary", "get.summary")
	if r == nil {
		return Summary{}, probs
	}
	s := Summary{
		ConnectionState:    dumpStr(r, "runtime", "connectionState"),
		Name:               dumpStr(r, "config", "name"),
		VMPathName:         dumpStr(r, "config", "vmPathName"),
		Annotation:         dumpStr(r, "config", "annotation"),
		UUID:               dumpStr(r, "config", "uuid"),
		InstanceUUID:       dumpStr(r, "config", "instanceUuid"),
		GuestID:            dumpStr(r, "config", "guestId"),
		GuestFullName:      dumpStr(r, "config", "guestFullName"),
		ToolsStatus:        dumpStr(r, "guest", "toolsStatus"),
		ToolsRunningStatus: dumpStr(r, "guest", "toolsRunningStatus"),
		HostName:           dumpStr(r, "guest", "hostName"),
		IPAddress:          dumpStr(r, "guest", "ipAddress"),
		MemoryMiB:          int(dumpCount(r, &probs, maxMemoryMiB, "config", "memorySizeMB")),
		CPUs:               int(dumpCount(r, &probs, maxVCPUs, "config", "numCpu")),
		NumEthernetCards:   int(dumpCount(r, &probs, maxDevices, "config", "numEthernetCards")),
		NumVirtualDisks:    int(dumpCount(r, &probs, maxDevices, "config", "numVirtualDisks")),
		CommittedBytes:     dumpCount(r, &probs, math.MaxInt64, "storage", "committed"),
		UncommittedBytes:   dumpCount(r, &probs, math.MaxInt64, "storage", "uncommitted"),
		OverallStatus:      dumpStr(r, "overallStatus"),
		Template:           dumpStr(r, "config", "template") == "true",
	}
	switch ps := dumpStr(r, "runtime", "powerState"); ps {
	case "poweredOn", "poweredOff", "suspended":
		s.PowerState = PowerState(ps)
	case "":
	default:
		probs = append(probs, Problem{Source: "get.summary", Message: fmt.Sprintf("unknown powerState %q", ps)})
	}
	return s, probs
}

// Snapshot is one node of a VM's snapshot tree.
type Snapshot struct {
	Name string
	// ID is the snapshot id; 0 on hosts that do not print it.
	ID          int
	Description string
	// Created is the creation time as printed ("2/23/2015 18:12:50", host
	// local time).
	Created string
	// CreatedTime is Created parsed as host local time expressed in UTC
	// (ESXi hosts run in UTC); zero when it does not parse.
	CreatedTime time.Time
	// State is the VM's power state when the snapshot was taken
	// ("powered on", "powered off", "suspended").
	State    string
	Children []Snapshot
}

var (
	snapNodeRE = regexp.MustCompile(`^(-*)\|-(ROOT|CHILD)\s*$`)
	snapAttrRE = regexp.MustCompile(`^(-+)Snapshot ([A-Za-z ]+?)\s*:(.*)$`)
)

// ParseSnapshotGet parses `vim-cmd vmsvc/snapshot.get` output into the list
// of root snapshots (usually one) with their children. `Get Snapshot:` alone
// means no snapshots.
func ParseSnapshotGet(out string) ([]Snapshot, []Problem) {
	p := &snapParser{}
	for i, raw := range strings.Split(out, "\n") {
		ln := i + 1
		line := strings.TrimRight(raw, " \t\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !p.header && !p.readHeader(line, ln) {
			continue
		}
		p.line(line, ln)
	}
	if !p.header {
		p.probs = append(p.probs, Problem{Message: "empty output: expected \"Get Snapshot:\""})
	}
	var out2 []Snapshot
	for _, r := range p.roots {
		out2 = append(out2, r.build())
	}
	return out2, withSource(p.probs, "snapshot.get")
}

// snapNode is a snapshot while its tree is read.
type snapNode struct {
	s        Snapshot
	children []*snapNode
	lastAttr string
}

func (n *snapNode) build() Snapshot {
	s := n.s
	for _, c := range n.children {
		s.Children = append(s.Children, c.build())
	}
	return s
}

// snapParser reads snapshot.get's tree line by line.
type snapParser struct {
	roots  []*snapNode
	path   []*snapNode // path[d] is the latest node at depth d
	probs  []Problem
	header bool
}

func (p *snapParser) problem(ln int, format string, args ...any) {
	p.probs = append(p.probs, Problem{Line: ln, Message: fmt.Sprintf(format, args...)})
}

// readHeader takes the first line, which should be "Get Snapshot:", and
// reports whether the line is still to be read as part of the tree.
func (p *snapParser) readHeader(line string, ln int) bool {
	p.header = true
	if line == "Get Snapshot:" {
		return false
	}
	p.problem(ln, "expected \"Get Snapshot:\", got %q", truncate(line, 120))
	return snapNodeRE.MatchString(line)
}

// line reads one line of the tree: a node, an attribute of the current
// node, or a continuation of its description.
func (p *snapParser) line(line string, ln int) {
	if m := snapNodeRE.FindStringSubmatch(line); m != nil {
		p.node(line, m[1], m[2] == "ROOT", ln)
		return
	}
	if m := snapAttrRE.FindStringSubmatch(line); m != nil {
		depth := len(m[1])/2 - 1
		if len(m[1])%2 != 0 || depth < 0 || depth != len(p.path)-1 {
			p.problem(ln, "snapshot attribute %q does not belong to the current node", truncate(line, 120))
			return
		}
		p.attr(p.path[depth], m[2], strings.TrimSpace(m[3]), ln)
		return
	}
	// A bare line continues a multi-line description.
	if len(p.path) > 0 && isSnapDescription(p.path[len(p.path)-1].lastAttr) {
		n := p.path[len(p.path)-1]
		n.s.Description += "\n" + line
		return
	}
	p.problem(ln, "unrecognised line %q", truncate(line, 120))
}

// node starts a snapshot node indented by indent (ROOT at depth 0 only).
func (p *snapParser) node(line, indent string, root bool, ln int) {
	depth := len(indent) / 2
	if len(indent)%2 != 0 || root != (depth == 0) || depth > len(p.path) {
		p.problem(ln, "snapshot node %q at an impossible depth", line)
		p.path = nil // attributes until the next valid node are dropped
		return
	}
	n := &snapNode{}
	if depth == 0 {
		p.roots = append(p.roots, n)
	} else {
		parent := p.path[depth-1]
		parent.children = append(parent.children, n)
	}
	p.path = append(p.path[:depth], n)
}

// isSnapDescription reports the attribute holding the description
// (vim-cmd spells it "Desciption").
func isSnapDescription(key string) bool { return key == "Desciption" || key == "Description" }

// attr sets attribute key of n to val.
func (p *snapParser) attr(n *snapNode, key, val string, ln int) {
	n.lastAttr = key
	switch {
	case key == "Name":
		n.s.Name = val
	case key == "Id":
		id, err := strconv.Atoi(val)
		if err != nil || id < 0 {
			p.problem(ln, "snapshot id %q is not a non-negative number", val)
			id = 0
		}
		n.s.ID = id
	case isSnapDescription(key):
		n.s.Description = val
	case key == "Created On":
		n.s.Created = val
		if t, err := time.Parse("1/2/2006 15:4:5", val); err == nil {
			n.s.CreatedTime = t
		}
	case key == "State":
		n.s.State = val
	default:
		p.problem(ln, "unknown snapshot attribute %q", key)
	}
}

// HostVersion is the parsed output of `vmware -v`.
type HostVersion struct {
	Product string // "VMware ESXi"
	Version string // "8.0.2"
	Build   string // "22380479"
}

var versionRE = regexp.MustCompile(`^(VMware ESXi)\s+(\d+(?:\.\d+)*)(?:\s+(?:Update\s+\d+\s+)?build-(\d+))?`)

// ParseVersion parses `vmware -v` ("VMware ESXi 8.0.2 build-22380479").
func ParseVersion(out string) (HostVersion, []Problem) {
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	m := versionRE.FindStringSubmatch(line)
	if m == nil {
		return HostVersion{}, []Problem{{Source: "vmware -v", Message: fmt.Sprintf("unrecognised version %q", truncate(line, 120))}}
	}
	return HostVersion{Product: m[1], Version: m[2], Build: m[3]}, nil
}
