package esxisim

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// VimFailure is how hostd fails in FailVimCmd.
type VimFailure int

// hostd failures, as real hosts print them (samples:
// vcl-vimcmd-internal-errors-comment.txt).
const (
	// VimLoginReset prints "Failed to login: Connection reset by peer" on
	// stderr, exit status 1.
	VimLoginReset VimFailure = iota
	// VimLoginSSL prints "Failed to login: SSL Exception: The SSL handshake
	// timed out ..." on stderr, exit status 1.
	VimLoginSSL
	// VimBadAlloc is the std::bad_alloc crash: the C++ runtime's message and
	// the shell's "Aborted" on stderr, exit status 134.
	VimBadAlloc
	// VimObjectNotFound prints a (vmodl.fault.ManagedObjectNotFound) dump on
	// stdout, exit status 1.
	VimObjectNotFound
)

// FailVimCmd makes the next n vim-cmd invocations fail with f (n <= 0 clears).
func (s *Server) FailVimCmd(n int, f VimFailure) {
	s.mu.Lock()
	s.vimFail, s.vimMode = max(n, 0), f
	s.mu.Unlock()
}

// SetCommandDelay makes every simple command wait d before running (real
// vim-cmd calls cost about half a second).
func (s *Server) SetCommandDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// DropAfterBytes arms a one-shot fault: after n more bytes of stdout have
// been sent (counted across all channels and connections), the connection
// that sends the next byte is closed abruptly, without an exit status.
// A negative n disarms it.
func (s *Server) DropAfterBytes(n int64) {
	s.mu.Lock()
	s.dropBytes = n
	if n < 0 {
		s.dropBytes = -1
	}
	s.mu.Unlock()
}

// DropAfterCommands arms a one-shot fault: the next n simple commands run
// normally, then the connection running the following one is closed
// abruptly before it runs. A negative n disarms it.
func (s *Server) DropAfterCommands(n int) {
	s.mu.Lock()
	s.dropCmds = n
	if n < 0 {
		s.dropCmds = -1
	}
	s.mu.Unlock()
}

// DropAfterRunning arms a "completed but the answer was lost" fault: each
// of the next n simple commands whose command line (words joined by single
// spaces, e.g. "vim-cmd vmsvc/power.off 12") contains substr runs to
// completion, so its effect on the host is applied, and then the
// connection running it is closed abruptly before any of that command's
// output and without an exit status. The caller sees a dropped connection
// although the command was done. n <= 0 or an empty substr disarms it.
func (s *Server) DropAfterRunning(substr string, n int) {
	s.mu.Lock()
	if n <= 0 || substr == "" {
		s.lostMatch, s.lostReplies = "", 0
	} else {
		s.lostMatch, s.lostReplies = substr, n
	}
	s.mu.Unlock()
}

// LostReplies returns how many times the DropAfterRunning fault has fired
// since the server started.
func (s *Server) LostReplies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostFired
}

// ClearFaults disarms every injected fault and the command delay.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.dropBytes, s.dropCmds, s.vimFail, s.delay = -1, -1, 0, 0
	s.lostMatch, s.lostReplies = "", 0
	s.mu.Unlock()
}

// --- vim object dumps ---------------------------------------------------

type dnode any

// dobj is `(type) { fields }`.
type dobj struct {
	typ    string
	fields []dfield
}

type dfield struct {
	k string
	v dnode
}

// darr is `(type) [ items ]`.
type darr struct {
	typ   string
	items []dnode
}

// draw is printed as is.
type draw string

func dstr(s string) draw { return draw(`"` + s + `"`) }
func dnum[T int | int64 | uint64](n T) draw {
	return draw(strconv.FormatInt(int64(n), 10))
}
func dbool(b bool) draw {
	if b {
		return "true"
	}
	return "false"
}
func dnull(t string) draw { return draw("(" + t + ") null") }

const dunset = draw("<unset>")

// render prints a dump in the host's style: 3-space indent, strings in
// double quotes without escaping; ESXi 6.5+ separates fields with commas and
// omits the last one, Legacy (ESXi 4/5) adds dynamicType and a comma after
// every field.
func (s *Server) render(n dnode) string {
	var b strings.Builder
	s.renderTo(&b, n, "")
	return b.String()
}

func (s *Server) renderTo(b *strings.Builder, n dnode, indent string) {
	legacy := s.opts.Legacy
	switch n := n.(type) {
	case draw:
		b.WriteString(string(n))
	case dobj:
		fields := n.fields
		if legacy {
			fields = append([]dfield{{"dynamicType", dunset}}, fields...)
		}
		b.WriteString("(" + n.typ + ") {\n")
		for i, f := range fields {
			b.WriteString(indent + "   " + f.k + " = ")
			s.renderTo(b, f.v, indent+"   ")
			if legacy || i < len(fields)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "}")
	case darr:
		b.WriteString("(" + n.typ + ") [\n")
		for i, it := range n.items {
			b.WriteString(indent + "   ")
			s.renderTo(b, it, indent+"   ")
			if legacy || i < len(n.items)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "]")
	}
}

// fault returns a vim fault dump with the fields common to all faults.
func (s *Server) fault(typ, msg string, extra ...dfield) string {
	fields := []dfield{{"faultCause", dnull("vmodl.MethodFault")}}
	if !s.opts.Legacy {
		fields = append(fields, dfield{"faultMessage", dunset})
	}
	fields = append(fields, extra...)
	fields = append(fields, dfield{"msg", dstr(msg)})
	return s.render(dobj{typ: typ, fields: fields}) + "\n"
}

func (s *Server) notFound(arg string) string {
	return s.fault("vim.fault.NotFound", `Unable to find a VM corresponding to "`+arg+`"`)
}

func (s *Server) invalidPowerState(requested, existing PowerState) string {
	state := map[PowerState]string{PoweredOff: "Powered Off", PoweredOn: "Powered On", Suspended: "Suspended"}[existing]
	return s.fault("vim.fault.InvalidPowerState",
		"The attempted operation cannot be performed in the current state ("+state+").",
		dfield{"requestedState", dstr(requested.vim())},
		dfield{"existingState", dstr(existing.vim())})
}

// --- vim-cmd --------------------------------------------------------------

// vmView is a snapshot of a VM's state and .vmx taken for one command.
type vmView struct {
	vmEntry
	v     vmx
	valid bool
}

func (s *Server) view(vmid int) (vmView, bool) {
	s.mu.Lock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		s.mu.Unlock()
		return vmView{}, false
	}
	vv := vmView{vmEntry: *vm}
	vv.ips = append([]string(nil), vm.ips...)
	s.mu.Unlock()
	if b, err := s.readHostFile(vv.vmxPath); err == nil {
		vv.v, vv.valid = parseVMX(b), true
	}
	return vv, true
}

func cmdVimCmd(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int {
	s.stats.vimcmds.Add(1)
	if code, failed := s.injectedVimFailure(stdout, stderr); failed {
		return code
	}
	if len(args) < 2 {
		fmt.Fprint(stdout, "Commands available under /:\nhbrsvc/       internalsvc/  solo/         vmsvc/\nhostsvc/      proxysvc/     vimsvc/       help\n")
		return 0
	}
	op := args[1]
	rest := args[2:]
	if !strings.Contains(op, "/") && len(rest) > 0 {
		op, rest = op+"/"+rest[0], rest[1:]
	}
	switch op {
	case "vmsvc/getallvms":
		return s.getAllVMs(stdout, stderr)
	case "hostsvc/datastore/listsummary":
		return s.datastoreListSummary(stdout, stderr)
	}
	run, ok := vmCommands[op]
	if !ok {
		fmt.Fprintf(stderr, "Invalid command '%s'\n", strings.Join(args[1:], " "))
		return 1
	}
	if len(rest) < 1 {
		fmt.Fprintln(stdout, "Insufficient arguments.")
		return 1
	}
	vmid, err := strconv.Atoi(rest[0])
	vv, ok := s.view(vmid)
	// hostd does not know a VM it skips as invalid: like unregister in
	// esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt, every
	// per-VM command answers NotFound.
	if err != nil || !ok || !vv.valid {
		fmt.Fprint(stdout, s.notFound(rest[0]))
		return 1
	}
	return run(s, vmid, vv, rest[1:], stdout)
}

// injectedVimFailure plays the failure FailVimCmd asked for, if one is
// left: failed is true and code is the exit status.
func (s *Server) injectedVimFailure(stdout, stderr io.Writer) (code int, failed bool) {
	s.mu.Lock()
	fail := s.vimFail > 0
	mode := s.vimMode
	if fail {
		s.vimFail--
	}
	s.mu.Unlock()
	if !fail {
		return 0, false
	}
	switch mode {
	case VimLoginSSL:
		fmt.Fprintln(stderr, "Failed to login: SSL Exception: The SSL handshake timed out local: 127.0.0.1:52713 peer: 127.0.0.1:443.")
		return 1, true
	case VimBadAlloc:
		fmt.Fprint(stderr, "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted\n")
		return 128 + int(syscall.SIGABRT), true
	case VimObjectNotFound:
		fmt.Fprint(stdout, s.render(dobj{typ: "vmodl.fault.ManagedObjectNotFound", fields: []dfield{
			{"faultCause", dnull("vmodl.MethodFault")},
			{"obj", draw("'vim.VirtualMachine:672'")},
			{"msg", dstr("The object has already been deleted or has not been completely created")},
		}})+"\n")
		return 1, true
	default:
		fmt.Fprintln(stderr, "Failed to login: Connection reset by peer")
		return 1, true
	}
}

// vmCommands are the vim-cmd commands on one VM, by name; args are what
// follows the vmid.
var vmCommands = map[string]func(s *Server, vmid int, vv vmView, args []string, stdout io.Writer) int{
	"vmsvc/power.getstate": func(_ *Server, _ int, vv vmView, _ []string, stdout io.Writer) int {
		fmt.Fprintf(stdout, "Retrieved runtime info\n%s\n", vv.power)
		return 0
	},
	"vmsvc/power.on": func(s *Server, vmid int, _ vmView, _ []string, stdout io.Writer) int {
		return s.powerOn(vmid, stdout)
	},
	"vmsvc/power.off": func(s *Server, vmid int, _ vmView, _ []string, stdout io.Writer) int {
		return s.powerOff(vmid, stdout)
	},
	"vmsvc/power.shutdown": func(s *Server, vmid int, _ vmView, _ []string, stdout io.Writer) int {
		return s.powerShutdown(vmid, stdout)
	},
	"vmsvc/snapshot.create": func(s *Server, _ int, vv vmView, args []string, stdout io.Writer) int {
		return s.snapshotCreate(vv, args, stdout)
	},
	"vmsvc/snapshot.remove": func(s *Server, _ int, vv vmView, args []string, stdout io.Writer) int {
		return s.snapshotRemove(vv, args, stdout)
	},
	"vmsvc/get.guest": func(s *Server, _ int, vv vmView, _ []string, stdout io.Writer) int {
		fmt.Fprint(stdout, "Guest information:\n\n"+s.render(s.guestInfo(vv))+"\n")
		return 0
	},
	"vmsvc/get.summary": func(s *Server, _ int, vv vmView, _ []string, stdout io.Writer) int {
		fmt.Fprint(stdout, "Listsummary:\n"+s.render(s.summary(vv))+"\n")
		return 0
	},
	"vmsvc/snapshot.get": func(s *Server, _ int, vv vmView, _ []string, stdout io.Writer) int {
		fmt.Fprint(stdout, "Get Snapshot:\n"+s.snapshotTree(vv))
		return 0
	},
}

func (s *Server) powerOn(vmid int, stdout io.Writer) int {
	s.mu.Lock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		s.mu.Unlock()
		fmt.Fprint(stdout, s.notFound(strconv.Itoa(vmid)))
		return 1
	}
	cur := vm.power
	if cur != PoweredOn {
		s.setPowerLocked(vm, PoweredOn)
	}
	s.mu.Unlock()
	fmt.Fprint(stdout, "Powering on VM:\n")
	if cur == PoweredOn {
		if s.opts.Legacy {
			fmt.Fprint(stdout, s.invalidPowerState(PoweredOn, PoweredOn))
		} else {
			fmt.Fprint(stdout, "Power on failed\n")
		}
		return 1
	}
	return 0
}

func (s *Server) powerOff(vmid int, stdout io.Writer) int {
	s.stats.power.Add(1)
	snapMu.Lock() // after the guest's writes in flight
	s.mu.Lock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		s.mu.Unlock()
		snapMu.Unlock()
		fmt.Fprint(stdout, s.notFound(strconv.Itoa(vmid)))
		return 1
	}
	cur := vm.power
	if cur != PoweredOff {
		s.setPowerLocked(vm, PoweredOff)
	}
	s.mu.Unlock()
	snapMu.Unlock()
	fmt.Fprint(stdout, "Powering off VM:\n")
	if cur == PoweredOff {
		fmt.Fprint(stdout, s.invalidPowerState(PoweredOff, PoweredOff))
		return 1
	}
	return 0
}

func (s *Server) powerShutdown(vmid int, stdout io.Writer) int {
	s.stats.power.Add(1)
	s.mu.Lock()
	vm, err := s.vmLocked(vmid)
	if err != nil {
		s.mu.Unlock()
		fmt.Fprint(stdout, s.notFound(strconv.Itoa(vmid)))
		return 1
	}
	cur, tools := vm.power, vm.tools
	if cur == PoweredOn && tools == ToolsRunning {
		s.startShutdownLocked(vm)
	}
	s.mu.Unlock()
	switch {
	case cur != PoweredOn:
		fmt.Fprint(stdout, s.invalidPowerState(PoweredOn, cur))
		return 1
	case tools != ToolsRunning:
		fmt.Fprint(stdout, s.fault("vim.fault.ToolsUnavailable",
			"Cannot complete operation because VMware Tools is not running in this virtual machine."))
		return 1
	}
	return 0
}

// vimName escapes a display name as vim presents it.
var vimName = strings.NewReplacer("%", "%25", "/", "%2f", "\\", "%5c")

// getAllVMs prints `vim-cmd vmsvc/getallvms`. Layout, derived from the
// samples (getallvms_*.txt): every column is as wide as its widest value or
// header plus three spaces (the Annotation column without the three); header
// titles are centred on the values' width (rounded down), values are left
// aligned; rows keep their trailing spaces; later lines of a multi-line
// annotation print as bare lines.
func (s *Server) getAllVMs(stdout, stderr io.Writer) int {
	uuidToName, _ := s.datastoreAliases()
	headers := []string{"Vmid", "Name", "File", "Guest OS", "Version", "Annotation"}
	var rows [][]string
	var out strings.Builder
	for _, vm := range s.VMs() {
		vv, ok := s.view(vm.Vmid)
		if !ok || !vv.valid {
			// hostd prints this on stderr, before the table.
			fmt.Fprintf(stderr, "Skipping invalid VM '%d'\n", vm.Vmid)
			continue
		}
		name := vv.v.get("displayName")
		if !vv.v.has("displayName") {
			name = strings.TrimSuffix(path.Base(vm.VMXPath), ".vmx")
		}
		rows = append(rows, []string{
			strconv.Itoa(vm.Vmid),
			vimName.Replace(name),
			s.dsPath(vm.VMXPath, uuidToName),
			vimGuestID(vv.v.get("guestOS")),
			hwVersion(vv.v),
			vv.v.get("annotation"),
		})
	}
	widths := make([]int, len(headers))
	for i, h := range headers {
		widths[i] = len(h)
		for _, r := range rows {
			widths[i] = max(widths[i], len(r[i]))
		}
	}
	last := len(headers) - 1
	for i, h := range headers {
		left := (widths[i] - len(h)) / 2
		out.WriteString(strings.Repeat(" ", left) + h)
		if i < last {
			out.WriteString(strings.Repeat(" ", widths[i]-left-len(h)+3))
		}
	}
	out.WriteString("\n")
	for _, r := range rows {
		for i, c := range r {
			pad := widths[i] - len(c)
			if i < last {
				pad += 3
			}
			out.WriteString(c + strings.Repeat(" ", pad))
		}
		out.WriteString("\n")
	}
	if _, err := io.WriteString(stdout, out.String()); err != nil {
		return 1
	}
	return 0
}

// hwVersion returns "vmx-NN" from virtualHW.version.
func hwVersion(v vmx) string {
	n, err := strconv.Atoi(v.get("virtualHW.version"))
	if err != nil {
		return "vmx-" + v.get("virtualHW.version")
	}
	return fmt.Sprintf("vmx-%02d", n)
}

// vimGuestIDs are the .vmx guestOS values whose vim guest id does not follow
// the usual rule.
var vimGuestIDs = map[string]string{
	"other":                 "otherGuest",
	"other-64":              "otherGuest64",
	"otherlinux":            "otherLinuxGuest",
	"otherlinux-64":         "otherLinux64Guest",
	"other4xlinux-64":       "other4xLinux64Guest",
	"other5xlinux-64":       "other5xLinux64Guest",
	"winxppro":              "winXPProGuest",
	"windows7srv-64":        "windows7Server64Guest",
	"windows8srv-64":        "windows8Server64Guest",
	"windows9srv-64":        "windows9Server64Guest",
	"windows2019srv-64":     "windows2019srv_64Guest",
	"windows2022srvnext-64": "windows2022srvNext_64Guest",
	"":                      "otherGuest",
}

// vimGuestID maps a .vmx guestOS (e.g. "rhel9-64") to its vim id ("rhel9_64Guest").
func vimGuestID(g string) string {
	g = strings.ToLower(g)
	if id, ok := vimGuestIDs[g]; ok {
		return id
	}
	if base, ok := strings.CutSuffix(g, "-64"); ok {
		if base != "" && base[len(base)-1] >= '0' && base[len(base)-1] <= '9' {
			return base + "_64Guest"
		}
		return base + "64Guest"
	}
	return g + "Guest"
}

// guestFullNames gives vim's guestFullName for common guest ids.
var guestFullNames = map[string]string{
	"otherGuest":             "Other (32-bit)",
	"otherGuest64":           "Other (64-bit)",
	"otherLinux64Guest":      "Other Linux (64-bit)",
	"rhel8_64Guest":          "Red Hat Enterprise Linux 8 (64-bit)",
	"rhel9_64Guest":          "Red Hat Enterprise Linux 9 (64-bit)",
	"ubuntu64Guest":          "Ubuntu Linux (64-bit)",
	"debian12_64Guest":       "Debian GNU/Linux 12 (64-bit)",
	"centos9_64Guest":        "CentOS Stream 9 (64-bit)",
	"windows9_64Guest":       "Microsoft Windows 10 (64-bit)",
	"windows2019srv_64Guest": "Microsoft Windows Server 2019 (64-bit)",
	"winXPProGuest":          "Microsoft Windows XP Professional (32-bit)",
}

func guestFullName(id string) string {
	if n, ok := guestFullNames[id]; ok {
		return n
	}
	return id
}

func guestFamily(id string) string {
	switch {
	case strings.HasPrefix(id, "win"):
		return "windowsGuest"
	case strings.HasPrefix(id, "other") && !strings.Contains(id, "Linux"):
		return "otherGuestFamily"
	}
	return "linuxGuest"
}

// vmUUID formats a .vmx uuid ("56 4d 36 cf ...-...") as vim does.
func vmUUID(raw string) string {
	h := strings.NewReplacer(" ", "", "-", "").Replace(raw)
	if len(h) != 32 {
		return ""
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// nics returns the present ethernetN devices of a .vmx, in order.
func nics(v vmx) []int {
	var out []int
	for i := 0; i < 10; i++ {
		if strings.EqualFold(v.get(fmt.Sprintf("ethernet%d.present", i)), "TRUE") {
			out = append(out, i)
		}
	}
	return out
}

// disks returns the .vmdk file names of present disks, in key order.
func disks(v vmx) []string {
	var out []string
	for _, k := range v.keys {
		if !strings.HasSuffix(k, ".filename") || !strings.HasSuffix(strings.ToLower(v.vals[k]), ".vmdk") {
			continue
		}
		dev := strings.TrimSuffix(k, ".filename")
		if strings.EqualFold(v.get(dev+".present"), "FALSE") || strings.EqualFold(v.get(dev+".deviceType"), "cdrom-image") {
			continue
		}
		out = append(out, v.vals[k])
	}
	return out
}

func (s *Server) toolsRunning(vv vmView) bool {
	return vv.power == PoweredOn && vv.tools == ToolsRunning
}

// guestInfo builds `get.guest` (sample:
// get_guest_jenkins_vsphere_cloud_esxi8_tools_not_installed.txt for the
// field set and style, get-guest-tools-running-issue101.txt for a running guest).
func (s *Server) guestInfo(vv vmView) dobj {
	fields := s.guestToolsFields(vv)
	fields = append(fields, df("toolsUpdateStatus", dnull("vim.vm.GuestInfo.ToolsUpdateStatus")))
	if s.toolsRunning(vv) {
		fields = append(fields, guestIdentityFields(vv)...)
	} else {
		fields = append(fields,
			df("guestId", dunset), df("guestFamily", dunset), df("guestFullName", dunset),
			df("guestDetailedData", dunset), df("hostName", dunset), df("ipAddress", dunset), df("net", dunset))
	}
	fields = append(fields, df("ipStack", dunset), df("disk", dunset))
	if vv.power == PoweredOn {
		fields = append(fields, df("screen", dobj{typ: "vim.vm.GuestInfo.ScreenInfo", fields: []dfield{
			df("width", dnum(1024)), df("height", dnum(768))}}))
		fields = append(fields, df("guestState", dstr("running")))
	} else {
		fields = append(fields, df("screen", dunset), df("guestState", dstr("notRunning")))
	}
	fields = append(fields,
		df("hwVersion", dstr(hwVersion(vv.v))),
		df("customizationInfo", dobj{typ: "vim.vm.GuestInfo.CustomizationInfo", fields: []dfield{
			df("customizationStatus", dstr("TOOLSDEPLOYPKG_IDLE")),
			df("startTime", dunset), df("endTime", dunset), df("errorMsg", dunset)}}))
	return dobj{typ: "vim.vm.GuestInfo", fields: fields}
}

// guestToolsFields are get.guest's VMware Tools statuses.
func (s *Server) guestToolsFields(vv vmView) []dfield {
	status, version, running, build, install := "toolsNotRunning", "guestToolsCurrent", "guestToolsNotRunning", "12352", "guestToolsTypeOpenVMTools"
	switch {
	case vv.tools == ToolsNotInstalled:
		status, version, build, install = "toolsNotInstalled", "guestToolsNotInstalled", "0", "guestToolsTypeUnknown"
	case s.toolsRunning(vv):
		status, running = "toolsOk", "guestToolsRunning"
	}
	return []dfield{
		df("toolsStatus", dstr(status)),
		df("toolsVersionStatus", dstr(version)),
		df("toolsVersionStatus2", dstr(version)),
		df("toolsRunningStatus", dstr(running)),
		df("toolsVersion", dstr(build)),
		df("toolsInstallType", dstr(install)),
	}
}

// guestIdentityFields are what running Tools report: the guest OS, host
// name, addresses and NICs.
func guestIdentityFields(vv vmView) []dfield {
	guestID := vimGuestID(vv.v.get("guestOS"))
	host := strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, vv.v.get("displayName")))
	var ip dnode = dunset
	if len(vv.ips) > 0 {
		ip = dstr(vv.ips[0])
	}
	var nicItems []dnode
	for i, n := range nics(vv.v) {
		nicItems = append(nicItems, guestNIC(vv, i, n))
	}
	var net dnode = dunset
	if len(nicItems) > 0 {
		net = darr{typ: "vim.vm.GuestInfo.NicInfo", items: nicItems}
	}
	return []dfield{
		df("guestId", dstr(guestID)),
		df("guestFamily", dstr(guestFamily(guestID))),
		df("guestFullName", dstr(guestFullName(guestID))),
		df("guestDetailedData", dunset),
		df("hostName", dstr(host)),
		df("ipAddress", ip),
		df("net", net),
	}
}

// guestNIC is the i-th NIC, ethernet<n>; the first one holds the VM's
// addresses.
func guestNIC(vv vmView, i, n int) dobj {
	var ips []dnode
	var cfg []dnode
	if i == 0 {
		for _, a := range vv.ips {
			ips = append(ips, dstr(a))
			prefix := 24
			if strings.Contains(a, ":") {
				prefix = 64
			}
			cfg = append(cfg, dobj{typ: "vim.net.IpConfigInfo.IpAddress", fields: []dfield{
				df("ipAddress", dstr(a)), df("prefixLength", dnum(prefix)), df("origin", dunset),
				df("state", dstr("preferred")), df("lifetime", dunset)}})
		}
	}
	var ipArr, cfgArr dnode = dunset, dunset
	if len(ips) > 0 {
		ipArr = darr{typ: "string", items: ips}
		cfgArr = darr{typ: "vim.net.IpConfigInfo.IpAddress", items: cfg}
	}
	mac := vv.v.get(fmt.Sprintf("ethernet%d.address", n))
	if mac == "" {
		mac = vv.v.get(fmt.Sprintf("ethernet%d.generatedAddress", n))
	}
	return dobj{typ: "vim.vm.GuestInfo.NicInfo", fields: []dfield{
		df("network", dstr(vv.v.get(fmt.Sprintf("ethernet%d.networkName", n)))),
		df("ipAddress", ipArr),
		df("macAddress", dstr(strings.ToLower(mac))),
		df("connected", dbool(true)),
		df("deviceConfigId", dnum(4000+i)),
		df("dnsConfig", dnull("vim.net.DnsConfigInfo")),
		df("ipConfig", dobj{typ: "vim.net.IpConfigInfo", fields: []dfield{
			df("ipAddress", cfgArr),
			df("dhcp", dnull("vim.net.DhcpConfigInfo")),
			df("autoConfigurationEnabled", dunset)}}),
		df("netBIOSConfig", dnull("vim.net.NetBIOSConfigInfo")),
	}}
}

// summary builds `get.summary` (field set of get_summary_apache_vcl_poweredOn_winxp.txt).
// df is one field of a dump.
func df(k string, v dnode) dfield { return dfield{k, v} }

func (s *Server) summary(vv vmView) dobj {
	v := vv.v
	mem, _ := strconv.Atoi(v.get("memSize"))
	cpus, _ := strconv.Atoi(v.get("numvcpus"))
	if cpus == 0 {
		cpus = 1
	}
	committed, uncommitted := s.storageUsage(vv)
	return dobj{typ: "vim.vm.Summary", fields: []dfield{
		df("vm", draw(fmt.Sprintf("'vim.VirtualMachine:%d'", vv.id))),
		df("runtime", summaryRuntime(vv, cpus, mem)),
		df("guest", s.summaryGuest(vv)),
		df("config", s.summaryConfig(vv, cpus, mem)),
		df("storage", dobj{typ: "vim.vm.Summary.StorageSummary", fields: []dfield{
			df("committed", dnum(committed)),
			df("uncommitted", dnum(uncommitted)),
			df("unshared", dnum(committed)),
			df("timestamp", dstr(time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))),
		}}),
		df("quickStats", s.summaryQuickStats(vv)),
		df("overallStatus", dstr("green")),
	}}
}

func summaryRuntime(vv vmView, cpus, mem int) dobj {
	var boot dnode = dunset
	maxCPU, maxMem := dnode(dunset), dnode(dunset)
	if vv.power == PoweredOn {
		boot = dstr(vv.bootTime.Format("2006-01-02T15:04:05.000000Z"))
		maxCPU, maxMem = dnum(cpus*2000), dnum(mem)
	}
	return dobj{typ: "vim.vm.RuntimeInfo", fields: []dfield{
		df("host", draw("'vim.HostSystem:ha-host'")),
		df("connectionState", dstr("connected")),
		df("powerState", dstr(vv.power.vim())),
		df("faultToleranceState", dstr("notConfigured")),
		df("toolsInstallerMounted", dbool(false)),
		df("suspendTime", dunset),
		df("bootTime", boot),
		df("suspendInterval", dnum(0)),
		df("question", dnull("vim.vm.QuestionInfo")),
		df("memoryOverhead", dunset),
		df("maxCpuUsage", maxCPU),
		df("maxMemoryUsage", maxMem),
		df("numMksConnections", dnum(0)),
		df("recordReplayState", dstr("inactive")),
		df("cleanPowerOff", dunset),
		df("needSecondaryReason", dunset),
	}}
}

func (s *Server) summaryGuest(vv vmView) dobj {
	v := vv.v
	guestID := vimGuestID(v.get("guestOS"))
	toolsStatus, toolsVersion, toolsRunning := "toolsNotInstalled", "guestToolsNotInstalled", "guestToolsNotRunning"
	switch {
	case s.toolsRunning(vv):
		toolsStatus, toolsVersion, toolsRunning = "toolsOk", "guestToolsCurrent", "guestToolsRunning"
	case vv.tools != ToolsNotInstalled:
		toolsStatus, toolsVersion = "toolsNotRunning", "guestToolsCurrent"
	}
	var gid, gname, host, ip dnode = dunset, dunset, dunset, dunset
	if s.toolsRunning(vv) {
		gid, gname = dstr(guestID), dstr(guestFullName(guestID))
		host = dstr(strings.ToLower(v.get("displayName")))
		if len(vv.ips) > 0 {
			ip = dstr(vv.ips[0])
		}
	}
	return dobj{typ: "vim.vm.Summary.GuestSummary", fields: []dfield{
		df("guestId", gid),
		df("guestFullName", gname),
		df("toolsStatus", dstr(toolsStatus)),
		df("toolsVersionStatus", dstr(toolsVersion)),
		df("toolsRunningStatus", dstr(toolsRunning)),
		df("hostName", host),
		df("ipAddress", ip),
	}}
}

func (s *Server) summaryConfig(vv vmView, cpus, mem int) dobj {
	v := vv.v
	guestID := vimGuestID(v.get("guestOS"))
	return dobj{typ: "vim.vm.Summary.ConfigSummary", fields: []dfield{
		df("name", dstr(vimName.Replace(v.get("displayName")))),
		df("template", dbool(false)),
		df("vmPathName", dstr(s.dsPath(vv.vmxPath, nil))),
		df("memorySizeMB", dnum(mem)),
		df("cpuReservation", dnum(0)),
		df("memoryReservation", dnum(0)),
		df("numCpu", dnum(cpus)),
		df("numEthernetCards", dnum(len(nics(v)))),
		df("numVirtualDisks", dnum(len(disks(v)))),
		df("uuid", dstr(vmUUID(v.get("uuid.bios")))),
		df("instanceUuid", dstr(vmUUID(v.get("vc.uuid")))),
		df("guestId", dstr(guestID)),
		df("guestFullName", dstr(guestFullName(guestID))),
		df("annotation", dstr(v.get("annotation"))),
		df("product", dnull("vim.vApp.ProductInfo")),
		df("installBootRequired", dbool(false)),
		df("ftInfo", dnull("vim.vm.FaultToleranceConfigInfo")),
		df("managedBy", dnull("vim.ext.ManagedByInfo")),
		df("tpmPresent", dbool(v.has("vtpm.present") && strings.EqualFold(v.get("vtpm.present"), "TRUE"))),
		df("numVmiopBackings", dnum(0)),
		df("hwVersion", dstr(hwVersion(v))),
	}}
}

func (s *Server) summaryQuickStats(vv vmView) dobj {
	return dobj{typ: "vim.vm.Summary.QuickStats", fields: []dfield{
		df("overallCpuUsage", dnum(0)),
		df("overallCpuDemand", dnum(0)),
		df("guestMemoryUsage", dnum(0)),
		df("hostMemoryUsage", dnum(0)),
		df("guestHeartbeatStatus", dstr(map[bool]string{true: "green", false: "gray"}[s.toolsRunning(vv)])),
		df("distributedCpuEntitlement", dnum(0)),
		df("distributedMemoryEntitlement", dnum(0)),
		df("staticCpuEntitlement", dnum(0)),
		df("staticMemoryEntitlement", dnum(0)),
		df("privateMemory", dnum(0)),
		df("sharedMemory", dnum(0)),
		df("swappedMemory", dnum(0)),
		df("balloonedMemory", dnum(0)),
		df("consumedOverheadMemory", dnum(0)),
		df("ftLogBandwidth", dnum(-1)),
		df("ftSecondaryLatency", dnum(-1)),
		df("ftLatencyStatus", dstr("gray")),
		df("uptimeSeconds", dnum(0)),
	}}
}

// storageUsage returns the bytes allocated by the files of the VM's
// directory and the disks' capacity not yet allocated.
func (s *Server) storageUsage(vv vmView) (committed, uncommitted int64) {
	dir := path.Dir(vv.vmxPath)
	names, _ := s.readDir(dir)
	for _, n := range names {
		if fi, err := s.statPath(dir + "/" + n); err == nil && !fi.IsDir() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				committed += st.Blocks * 512
			} else {
				committed += fi.Size()
			}
		}
	}
	var capacity int64
	for _, d := range disks(vv.v) {
		b, err := s.readHostFile(resolveIn(dir, d))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) >= 4 && (fs[0] == "RW" || fs[0] == "RDONLY") {
				if n, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
					capacity += n * 512
				}
			}
		}
	}
	return committed, max(capacity-committed, 0)
}

// snapNode is one snapshot of a .vmsd.
type snapNode struct {
	idx               int
	uid, parent       string
	name, desc, state string
	created           time.Time
	children          []*snapNode
}

// snapshotTree renders the snapshot tree of the VM's .vmsd as `snapshot.get`
// prints it after "Get Snapshot:" (samples: snapshot-get-nested-tree.txt,
// snapshot_get_jenkins_*); nothing when there is no .vmsd or no snapshot.
func (s *Server) snapshotTree(vv vmView) string {
	vmsd := strings.TrimSuffix(vv.vmxPath, path.Ext(vv.vmxPath)) + ".vmsd"
	b, err := s.readHostFile(vmsd)
	if err != nil {
		return ""
	}
	var out strings.Builder
	seen := map[*snapNode]bool{}
	for _, r := range vmsdTree(parseVMX(b)) {
		s.writeSnapNode(&out, r, 0, seen)
	}
	return out.String()
}

// vmsdTree returns the root snapshots of a parsed .vmsd, each with its
// children, in snapshotN order.
func vmsdTree(v vmx) []*snapNode {
	byIdx := map[int]*snapNode{}
	for _, k := range v.keys {
		rest, ok := strings.CutPrefix(k, "snapshot")
		if !ok {
			continue
		}
		num, field, ok := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		node := byIdx[n]
		if node == nil {
			node = &snapNode{idx: n, state: "powered off"}
			byIdx[n] = node
		}
		node.set(field, v.vals[k])
	}
	var nodes []*snapNode
	byUID := map[string]*snapNode{}
	for _, n := range byIdx {
		if n.uid == "" {
			continue
		}
		hi, _ := strconv.ParseInt(v.get(fmt.Sprintf("snapshot%d.createTimeHigh", n.idx)), 10, 64)
		lo, _ := strconv.ParseInt(v.get(fmt.Sprintf("snapshot%d.createTimeLow", n.idx)), 10, 64)
		n.created = time.UnixMicro(hi<<32 | int64(uint32(lo))).UTC()
		nodes = append(nodes, n)
		byUID[n.uid] = n
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].idx < nodes[j].idx })
	var roots []*snapNode
	for _, n := range nodes {
		if p, ok := byUID[n.parent]; ok && n.parent != "" && p != n {
			p.children = append(p.children, n)
		} else {
			roots = append(roots, n)
		}
	}
	return roots
}

// set sets the node's field (a lower-cased snapshotN.<field> key) to val.
func (n *snapNode) set(field, val string) {
	switch field {
	case "uid":
		n.uid = val
	case "parent":
		n.parent = val
	case "displayname":
		n.name = val
	case "description":
		n.desc = val
	case "type":
		if val == "1" {
			n.state = "powered on"
		}
	}
}

// writeSnapNode prints n at depth and its children below it, as
// snapshot.get does; a node already printed (a loop) is skipped.
func (s *Server) writeSnapNode(out *strings.Builder, n *snapNode, depth int, seen map[*snapNode]bool) {
	if seen[n] {
		return
	}
	seen[n] = true
	marker := "|-CHILD"
	if depth == 0 {
		marker = "|-ROOT"
	}
	pre := strings.Repeat("--", depth+1)
	out.WriteString(strings.Repeat("--", depth) + marker + "\n")
	out.WriteString(pre + "Snapshot Name        : " + n.name + "\n")
	if !s.opts.Legacy {
		out.WriteString(pre + "Snapshot Id        : " + n.uid + "\n")
	}
	out.WriteString(pre + "Snapshot Desciption  :")
	if n.desc != "" {
		out.WriteString(" " + n.desc)
	}
	out.WriteString("\n")
	c := n.created
	fmt.Fprintf(out, "%sSnapshot Created On  : %d/%d/%d %d:%d:%d\n", pre, c.Month(), c.Day(), c.Year(), c.Hour(), c.Minute(), c.Second())
	out.WriteString(pre + "Snapshot State       : " + n.state + "\n")
	for _, ch := range n.children {
		s.writeSnapNode(out, ch, depth+1, seen)
	}
}
