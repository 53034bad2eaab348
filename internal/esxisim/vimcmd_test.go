package esxisim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// trimLines removes trailing spaces of each line (some samples lost them).
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func TestGetAllVMsMatchesSamples(t *testing.T) {
	tests := []struct {
		name      string
		sample    string
		firstVmid int
		vms       [][]string // rel path, displayName, guestOS, hw
		exact     bool       // the sample kept trailing spaces
	}{
		{
			name: "esxi8 no vms", sample: "getallvms_jenkins_vsphere_cloud_esxi8_no_vms.txt", firstVmid: 1,
		},
		{
			name: "esxi8 one vm", sample: "getallvms_jenkins_vsphere_cloud_esxi8_one_vm.txt", firstVmid: 1,
			vms: [][]string{{"pve-esx/x8/x8.vmx", "x8", "centos9-64", "20"}},
		},
		{
			name: "colon in datastore, trailing spaces", sample: "getallvms_wtsi_packer_colon_in_datastore_trailing_spaces.txt", firstVmid: 40,
			vms:   [][]string{{"wtgc-vmbd-01:datastore1/packer-vmware-iso/packer-vmware-iso.vmx", "packer-vmware-iso", "ubuntu-64", "8"}},
			exact: true,
		},
		{
			name: "esxi5 guests", sample: "", firstVmid: 1,
		},
	}
	for _, tt := range tests {
		if tt.sample == "" {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(o *Options) { o.FirstVmid = tt.firstVmid })
			for _, vm := range tt.vms {
				writeVMX(t, s, vm[0], "displayName", vm[1], "guestOS", vm[2], "virtualHW.version", vm[3])
				s.Register(vm[0])
			}
			c := dial(t, s)
			r := mustRun(t, c, "vim-cmd vmsvc/getallvms")
			want := sample(t, tt.sample)
			got := r.out
			if !tt.exact {
				got = trimLines(got)
			}
			if got != want || r.code != 0 {
				t.Errorf("getallvms (exit %d):\ngot:\n%q\nwant:\n%q", r.code, got, want)
			}
		})
	}
}

// TestGetAllVMsColumnRule checks the layout rule against the ESXi 5 sample,
// whose lines carry a comment marker and whose rows are unsorted.
func TestGetAllVMsColumnRule(t *testing.T) {
	s := newServer(t, func(o *Options) { o.FirstVmid = 112 })
	names := []struct{ name, guest string }{
		{"mono-asp-net-vnext-ubuntu-s-14_0", "ubuntu"},
		{"mono-asp-net-vnext-debian-7_5", "debian5"},
	}
	for _, n := range names {
		rel := "datastore2_maxtor_120GB/" + n.name + "/" + n.name + ".vmx"
		writeVMX(t, s, rel, "displayName", n.name, "guestOS", n.guest, "virtualHW.version", "7")
		s.Register(rel)
	}
	r := mustRun(t, dial(t, s), "vim-cmd vmsvc/getallvms")
	lines := strings.Split(r.out, "\n")
	smp := strings.Split(sample(t, "esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt"), "\n")
	var header, row string
	for _, l := range smp {
		if strings.HasPrefix(l, "# Vmid") {
			header = strings.TrimPrefix(l, "# ")
		}
		if strings.HasPrefix(l, "#112") {
			row = strings.TrimPrefix(l, "#")
		}
	}
	// The sample had more rows (wider columns): compare the header up to
	// "File" and the row up to the guest column, which only depend on the
	// Vmid and Name widths, both maximal in our two rows.
	if got, want := lines[0][:strings.Index(lines[0], "File")], header[:strings.Index(header, "File")]; got != want {
		t.Errorf("header prefix:\ngot  %q\nwant %q", got, want)
	}
	if got, want := lines[1][:strings.Index(lines[1], "ubuntuGuest")], row[:strings.Index(row, "ubuntuGuest")]; got != want {
		t.Errorf("row prefix:\ngot  %q\nwant %q", got, want)
	}
}

func TestGetAllVMsTraps(t *testing.T) {
	s := newServer(t, nil)
	writeVMX(t, s, "ds1/a/a.vmx", "displayName", "web (prod) [eu]", "guestOS", "rhel9-64", "virtualHW.version", "19",
		"annotation", "first line\n42 starts with digits")
	writeVMX(t, s, "ds1/b/b.vmx", "displayName", "a/b%c", "guestOS", "windows2019srv-64", "virtualHW.version", "19")
	id1 := s.Register("ds1/a/a.vmx")
	s.Register("/vmfs/volumes/ds1/missing/missing.vmx")
	s.Register("ds1/b/b.vmx")
	r := mustRun(t, dial(t, s), "vim-cmd vmsvc/getallvms")
	// hostd prints the skipped VM on stderr, before the table.
	if r.err != "Skipping invalid VM '2'\n" || strings.Contains(r.out, "Skipping") || !strings.HasPrefix(r.out, "Vmid") {
		t.Errorf("want the Skipping line alone on stderr, got stdout %q stderr %q", r.out, r.err)
	}
	if m := mustRun(t, dial(t, s), "vim-cmd vmsvc/getallvms 2>&1"); !strings.HasPrefix(m.out, "Skipping invalid VM '2'\nVmid") {
		t.Errorf("merged output should start with the Skipping line: %q", m.out)
	}
	if !strings.Contains(r.out, "\n1      web (prod) [eu]   [ds1] a/a.vmx   rhel9_64Guest            vmx-19    first line\n42 starts with digits\n") {
		t.Errorf("multi-line annotation row wrong:\n%s", r.out)
	}
	if !strings.Contains(r.out, "a%2fb%25c") || !strings.Contains(r.out, "windows2019srv_64Guest") {
		t.Errorf("name escaping or guest id wrong:\n%s", r.out)
	}
	if id1 != 1 {
		t.Errorf("first Vmid = %d, want 1", id1)
	}
}

func TestPowerAndGuest(t *testing.T) {
	s := newServer(t, func(o *Options) { o.ShutdownDelay = 300 * time.Millisecond })
	idTools, _, err := s.AddVM(VMSpec{Name: "tools", GuestOS: "rhel9-64", Disks: []DiskSpec{{CapacityBytes: 8 << 20}},
		NICs: []NICSpec{{Network: "VM Network", MAC: "00:50:56:aa:bb:cc"}}, Power: PoweredOn, Tools: ToolsRunning, IPs: []string{"10.0.0.5", "fe80::1"}})
	if err != nil {
		t.Fatal(err)
	}
	idNoTools, _, err := s.AddVM(VMSpec{Name: "notools", Disks: []DiskSpec{{CapacityBytes: 8 << 20}}, Power: PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	itoa := strconv.Itoa

	r := mustRun(t, c, "vim-cmd vmsvc/power.getstate "+itoa(idTools))
	if want := sample(t, "power_getstate_on_apache_vcl.txt"); r.out != want || r.code != 0 {
		t.Errorf("getstate on: got %q (exit %d), want %q", r.out, r.code, want)
	}

	r = mustRun(t, c, "vim-cmd vmsvc/get.guest "+itoa(idTools))
	for _, w := range []string{"Guest information:\n\n(vim.vm.GuestInfo) {\n", `   toolsRunningStatus = "guestToolsRunning",`,
		`   ipAddress = "10.0.0.5",`, `            "fe80::1"` + "\n         ],", `         macAddress = "00:50:56:aa:bb:cc",`, "\n}\n"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("get.guest running lacks %q:\n%s", w, r.out)
		}
	}
	r = mustRun(t, c, "vim-cmd vmsvc/get.guest "+itoa(idNoTools))
	wantNotInstalled := sample(t, "get_guest_jenkins_vsphere_cloud_esxi8_tools_not_installed.txt")
	wantNotInstalled = strings.Replace(wantNotInstalled, `"vmx-20"`, `"vmx-19"`, 1)
	if r.out != wantNotInstalled {
		t.Errorf("get.guest not installed:\ngot:\n%s\nwant:\n%s", r.out, wantNotInstalled)
	}

	// Shutdown without Tools: the real ToolsUnavailable fault.
	start := time.Now()
	r = mustRun(t, c, "vim-cmd vmsvc/power.shutdown "+itoa(idNoTools))
	wantFault := "(vim.fault.ToolsUnavailable) {\n   faultCause = (vmodl.MethodFault) null,\n   faultMessage = <unset>,\n" +
		"   msg = \"Cannot complete operation because VMware Tools is not running in this virtual machine.\"\n}\n"
	if r.out != wantFault || r.code != 1 {
		t.Errorf("shutdown without tools: got %q exit %d, want %q", r.out, r.code, wantFault)
	}
	if n := s.Stats().PowerCommands; n != 1 {
		t.Errorf("PowerCommands = %d after one shutdown ran, want 1", n)
	}
	// Shutdown with Tools: returns at once, powers off after the delay.
	r = mustRun(t, c, "vim-cmd vmsvc/power.shutdown "+itoa(idTools)+` && echo "ok $?"`)
	if r.out != "ok 0\n" || time.Since(start) > 250*time.Millisecond {
		t.Errorf("shutdown with tools: got %q after %v", r.out, time.Since(start))
	}
	if st, _ := s.PowerState(idTools); st != PoweredOn {
		t.Errorf("right after shutdown: state %v, want still on", st)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		r = mustRun(t, c, "vim-cmd vmsvc/power.getstate "+itoa(idTools))
		if r.out == "Retrieved runtime info\nPowered off\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM never powered off: %q", r.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("powered off after %v, want >= ShutdownDelay", el)
	}

	// power.off of an off VM: InvalidPowerState.
	r = mustRun(t, c, "vim-cmd vmsvc/power.off "+itoa(idTools))
	wantOff := "Powering off VM:\n(vim.fault.InvalidPowerState) {\n   faultCause = (vmodl.MethodFault) null,\n   faultMessage = <unset>,\n" +
		"   requestedState = \"poweredOff\",\n   existingState = \"poweredOff\",\n" +
		"   msg = \"The attempted operation cannot be performed in the current state (Powered Off).\"\n}\n"
	if r.out != wantOff || r.code != 1 {
		t.Errorf("power.off of off VM:\ngot  %q (exit %d)\nwant %q", r.out, r.code, wantOff)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/power.on "+itoa(idTools))
	if r.out != "Powering on VM:\n" || r.code != 0 {
		t.Errorf("power.on: got %q exit %d", r.out, r.code)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/power.on "+itoa(idTools))
	if r.out != "Powering on VM:\nPower on failed\n" || r.code != 1 {
		t.Errorf("power.on of on VM: got %q exit %d", r.out, r.code)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/power.off "+itoa(idTools))
	if r.out != "Powering off VM:\n" || r.code != 0 {
		t.Errorf("power.off: got %q exit %d", r.out, r.code)
	}
}

func TestLegacyStyle(t *testing.T) {
	s := newServer(t, func(o *Options) { o.Legacy = true })
	r := mustRun(t, dial(t, s), "vim-cmd vmsvc/power.off 16")
	// esxi5 sample: comment marker "# <TAB>" in front of each line.
	var want strings.Builder
	for _, l := range strings.Split(sample(t, "esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt"), "\n") {
		if strings.HasPrefix(l, "# \t") {
			want.WriteString(strings.TrimPrefix(l, "# \t") + "\n")
		}
	}
	if r.out != want.String() || r.code != 1 {
		t.Errorf("legacy NotFound:\ngot  %q\nwant %q", r.out, want.String())
	}
}

func TestNotFoundAndArgs(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	tests := []struct {
		cmd, out string
		code     int
	}{
		{"vim-cmd vmsvc/get.summary 99", "(vim.fault.NotFound) {\n   faultCause = (vmodl.MethodFault) null,\n   faultMessage = <unset>,\n   msg = \"Unable to find a VM corresponding to \"99\"\"\n}\n", 1},
		{"vim-cmd vmsvc/power.getstate abc", "(vim.fault.NotFound) {\n   faultCause = (vmodl.MethodFault) null,\n   faultMessage = <unset>,\n   msg = \"Unable to find a VM corresponding to \"abc\"\"\n}\n", 1},
		{"vim-cmd vmsvc/power.getstate", "Insufficient arguments.\n", 1},
	}
	for _, tt := range tests {
		r := mustRun(t, c, tt.cmd)
		if r.out != tt.out || r.code != tt.code {
			t.Errorf("%s: got %q exit %d, want %q exit %d", tt.cmd, r.out, r.code, tt.out, tt.code)
		}
	}
}

func TestSnapshotGet(t *testing.T) {
	s := newServer(t, nil)
	// A real .vmsd from a host, dropped in unchanged.
	writeVMX(t, s, "ds/test flo/test flo.vmx", "displayName", "test flo", "guestOS", "other-64", "virtualHW.version", "14")
	writeFile(t, s, "ds/test flo/test flo.vmsd", []byte(sample(t, "vmsd_xen_orchestra_4_snapshots.vmsd")))
	id := s.Register("ds/test flo/test flo.vmx")
	// A VM without .vmsd and one with an empty .vmsd.
	writeVMX(t, s, "ds/none/none.vmx", "displayName", "none")
	idNone := s.Register("ds/none/none.vmx")
	idFix, _, err := s.AddVM(VMSpec{Name: "fix", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	idSnap, _, err := s.AddVM(VMSpec{Name: "snap", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}, Snapshots: true})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	for _, vmid := range []int{idNone, idFix} {
		r := mustRun(t, c, "vim-cmd vmsvc/snapshot.get "+strconv.Itoa(vmid))
		if want := sample(t, "snapshot_get_no_snapshot_apache_vcl.txt"); r.out != want {
			t.Errorf("no snapshot: got %q want %q", r.out, want)
		}
	}
	r := mustRun(t, c, "vim-cmd vmsvc/snapshot.get "+strconv.Itoa(id))
	want := "Get Snapshot:\n|-ROOT\n--Snapshot Name        : SNAPSHOT POST INSTALL\n--Snapshot Id        : 1\n" +
		"--Snapshot Desciption  : blablabla\n--Snapshot Created On  : 11/28/2022 15:24:12\n--Snapshot State       : powered off\n" +
		"--|-CHILD\n----Snapshot Name        : SECOND\n----Snapshot Id        : 2\n----Snapshot Desciption  : small\n" +
		"----Snapshot Created On  : 1/1/1970 0:0:0\n----Snapshot State       : powered off\n" +
		"----|-CHILD\n------Snapshot Name        : third\n------Snapshot Id        : 3\n------Snapshot Desciption  :\n" +
		"------Snapshot Created On  : 1/1/1970 0:0:0\n------Snapshot State       : powered off\n" +
		"------|-CHILD\n--------Snapshot Name        : from cli\n--------Snapshot Id        : 4\n--------Snapshot Desciption  :\n" +
		"--------Snapshot Created On  : 1/1/1970 0:0:0\n--------Snapshot State       : powered off\n"
	if r.out != want {
		t.Errorf("snapshot.get of real .vmsd:\ngot:\n%s\nwant:\n%s", r.out, want)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/snapshot.get "+strconv.Itoa(idSnap))
	want = "Get Snapshot:\n|-ROOT\n--Snapshot Name        : before-migration\n--Snapshot Id        : 1\n" +
		"--Snapshot Desciption  : fixture snapshot\n--Snapshot Created On  : 5/6/2024 7:8:9\n--Snapshot State       : powered off\n"
	if r.out != want {
		t.Errorf("snapshot.get of fixture:\ngot  %q\nwant %q", r.out, want)
	}
}

func TestRealVMXServedUnchanged(t *testing.T) {
	s := newServer(t, nil)
	data, err := os.ReadFile(filepath.Join("testdata", "vmx_intel_mfd_esxi_base_r91_efi_snapshot_child.vmx"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, s, "datastore1/Base_R91/Base_R91.vmx", data)
	ids, err := s.RegisterAll()
	if err != nil || len(ids) != 1 {
		t.Fatalf("RegisterAll = %v, %v", ids, err)
	}
	c := dial(t, s)
	r := mustRun(t, c, "cat '/vmfs/volumes/datastore1/Base_R91/Base_R91.vmx'")
	if r.out != string(data) {
		t.Errorf("cat changed the file")
	}
	r = mustRun(t, c, "vim-cmd vmsvc/getallvms")
	want := "Vmid     Name                    File                    Guest OS     Version   Annotation\n" +
		"1      Base_R91   [datastore1] Base_R91/Base_R91.vmx   otherGuest64   vmx-13              \n"
	if r.out != want {
		t.Errorf("getallvms:\ngot  %q\nwant %q", r.out, want)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/get.summary 1")
	for _, w := range []string{"Listsummary:\n(vim.vm.Summary) {\n   vm = 'vim.VirtualMachine:1',\n", `      name = "Base_R91",`,
		`      vmPathName = "[datastore1] Base_R91/Base_R91.vmx",`, "      memorySizeMB = 2048,", "      numCpu = 4,",
		"      numEthernetCards = 1,", "      numVirtualDisks = 1,", `      powerState = "poweredOff",`, "   overallStatus = \"green\"\n}\n"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("get.summary lacks %q:\n%s", w, r.out)
		}
	}
}

func TestInventoryXML(t *testing.T) {
	s := newServer(t, func(o *Options) { o.FirstVmid = 11 })
	uuid := "613b3787-f424611a-1234-a0369fa88738"
	if err := os.MkdirAll(filepath.Join(s.opts.Root, uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(uuid, filepath.Join(s.opts.Root, "datastore1")); err != nil {
		t.Fatal(err)
	}
	writeVMX(t, s, "datastore1/CentOS_NAS/CentOS_NAS.vmx", "displayName", "CentOS_NAS")
	writeVMX(t, s, "datastore1/R&D <x>/R&D <x>.vmx", "displayName", "R&D <x>")
	s.Register("datastore1/CentOS_NAS/CentOS_NAS.vmx")
	s.Register("datastore1/R&D <x>/R&D <x>.vmx")
	c := dial(t, s)
	r := mustRun(t, c, "cat /etc/vmware/hostd/vmInventory.xml")
	want := "<ConfigRoot>\n  <ConfigEntry id=\"0000\">\n    <objID>11</objID>\n    <secDomain>17</secDomain>\n" +
		"    <vmxCfgPath>/vmfs/volumes/" + uuid + "/CentOS_NAS/CentOS_NAS.vmx</vmxCfgPath>\n  </ConfigEntry>\n" +
		"  <ConfigEntry id=\"0001\">\n    <objID>12</objID>\n    <secDomain>19</secDomain>\n" +
		"    <vmxCfgPath>/vmfs/volumes/" + uuid + "/R&amp;D &lt;x&gt;/R&amp;D &lt;x&gt;.vmx</vmxCfgPath>\n  </ConfigEntry>\n</ConfigRoot>\n"
	if r.out != want {
		t.Errorf("vmInventory.xml:\ngot:\n%s\nwant:\n%s", r.out, want)
	}
	// getallvms shows the friendly datastore name; the UUID path works too.
	r = mustRun(t, c, "vim-cmd vmsvc/getallvms")
	if !strings.Contains(r.out, "[datastore1] CentOS_NAS/CentOS_NAS.vmx") {
		t.Errorf("getallvms lacks friendly datastore name:\n%s", r.out)
	}
	r = mustRun(t, c, "stat -c '%s %n' '/vmfs/volumes/"+uuid+"/CentOS_NAS/CentOS_NAS.vmx'")
	if r.code != 0 {
		t.Errorf("stat via UUID path: %+v", r)
	}
}

func TestVimCmdFaults(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	tests := []struct {
		mode        VimFailure
		out, errOut string
		code        int
	}{
		{VimLoginReset, "", "Failed to login: Connection reset by peer\n", 1},
		{VimLoginSSL, "", "Failed to login: SSL Exception: The SSL handshake timed out local: 127.0.0.1:52713 peer: 127.0.0.1:443.\n", 1},
		{VimBadAlloc, "", "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\nAborted\n", 134},
		{VimObjectNotFound, "(vmodl.fault.ManagedObjectNotFound) {\n   faultCause = (vmodl.MethodFault) null,\n   obj = 'vim.VirtualMachine:672',\n   msg = \"The object has already been deleted or has not been completely created\"\n}\n", "", 1},
	}
	for _, tt := range tests {
		s.FailVimCmd(2, tt.mode)
		for i := 0; i < 2; i++ {
			r := mustRun(t, c, "vim-cmd vmsvc/getallvms")
			if r.out != tt.out || r.err != tt.errOut || r.code != tt.code {
				t.Errorf("mode %d call %d: got out %q err %q exit %d, want %q %q %d", tt.mode, i, r.out, r.err, r.code, tt.out, tt.errOut, tt.code)
			}
		}
		if r := mustRun(t, c, "vim-cmd vmsvc/getallvms"); r.code != 0 {
			t.Errorf("mode %d: third call should succeed, got %+v", tt.mode, r)
		}
	}
}
