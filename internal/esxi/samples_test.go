package esxi

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadSample reads testdata/samples/<name> and strips the "# source:" line
// that documents where the sample came from (a real host never prints it).
func loadSample(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "# source:") {
		t.Fatalf("%s: first line is not a # source: comment", name)
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// excerpt returns lines a..b (1-based, inclusive) of s.
func excerpt(s string, a, b int) string {
	ls := strings.Split(s, "\n")
	return strings.Join(ls[a-1:b], "\n") + "\n"
}

// uncomment removes the comment markers ("\t# ", "#") some samples keep
// from the source they were quoted in, leaving the host's output.
func uncomment(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		l = strings.TrimLeft(l, " \t")
		l = strings.TrimPrefix(l, "#")
		ls[i] = strings.TrimLeft(l, " \t")
	}
	return strings.Join(ls, "\n")
}

type sampleCase struct {
	file  string
	name  string
	check func(t *testing.T, s string)
}

func wantNoProblems(t *testing.T, probs []Problem) {
	t.Helper()
	if len(probs) != 0 {
		t.Errorf("unexpected problems: %v", probs)
	}
}

func wantProblems(t *testing.T, probs []Problem, substrs ...string) {
	t.Helper()
	if len(probs) != len(substrs) {
		t.Fatalf("got %d problems %v, want %d", len(probs), probs, len(substrs))
	}
	for i, s := range substrs {
		if !strings.Contains(probs[i].String(), s) {
			t.Errorf("problem %d = %q, want it to contain %q", i, probs[i], s)
		}
	}
}

func checkGetAllVMs(want []GetAllVMsEntry, skipped []int) func(*testing.T, string) {
	return func(t *testing.T, s string) {
		got, probs := ParseGetAllVMs(s)
		wantNoProblems(t, probs)
		for i := range got.VMs {
			got.VMs[i].Line = 0
		}
		if !reflect.DeepEqual(got.VMs, want) {
			t.Errorf("VMs:\n got %+v\nwant %+v", got.VMs, want)
		}
		if !reflect.DeepEqual(got.Skipped, skipped) {
			t.Errorf("Skipped = %v, want %v", got.Skipped, skipped)
		}
	}
}

func checkPowerState(want PowerState) func(*testing.T, string) {
	return func(t *testing.T, s string) {
		got, probs := ParsePowerState(s)
		wantNoProblems(t, probs)
		if got != want {
			t.Errorf("state = %q, want %q", got, want)
		}
	}
}

func checkFault(want *Fault) func(*testing.T, string) {
	return func(t *testing.T, s string) {
		got := ParseFault(s)
		if want != nil && want.Fields == nil && got != nil && len(got.Fields) == 0 {
			got.Fields = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("fault:\n got %#v\nwant %#v", got, want)
		}
	}
}

func checkSnapshots(want []Snapshot) func(*testing.T, string) {
	return func(t *testing.T, s string) {
		got, probs := ParseSnapshotGet(s)
		wantNoProblems(t, probs)
		clearTimes(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("snapshots:\n got %+v\nwant %+v", got, want)
		}
	}
}

func clearTimes(ss []Snapshot) {
	for i := range ss {
		ss[i].CreatedTime = ss[i].CreatedTime.UTC()
		if !ss[i].CreatedTime.IsZero() {
			ss[i].CreatedTime = ss[i].CreatedTime.Round(0)
		}
		clearTimes(ss[i].Children)
	}
}

func checkDescriptor(createType, parent string, extents []Extent, capacity int64, thin, delta bool) func(*testing.T, string) {
	return func(t *testing.T, s string) {
		d, probs := ParseDescriptor(s)
		wantNoProblems(t, probs)
		if d.CreateType != createType || d.ParentFileNameHint != parent {
			t.Errorf("createType %q parent %q, want %q %q", d.CreateType, d.ParentFileNameHint, createType, parent)
		}
		if !reflect.DeepEqual(d.Extents, extents) {
			t.Errorf("extents = %+v, want %+v", d.Extents, extents)
		}
		if d.CapacityBytes() != capacity || d.Thin() != thin || d.IsDelta() != delta {
			t.Errorf("capacity %d thin %v delta %v, want %d %v %v", d.CapacityBytes(), d.Thin(), d.IsDelta(), capacity, thin, delta)
		}
		if rdm, _ := d.RDM(); rdm {
			t.Error("RDM = true")
		}
	}
}

// sshdConfig parses `sshd -T`-style "keyword value" lines.
func sshdConfig(s string) map[string][]string {
	m := map[string][]string{}
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		m[strings.ToLower(f[0])] = strings.Split(f[1], ",")
	}
	return m
}

func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

var sampleCases = []sampleCase{
	{file: "esxi-authlog-command-logging-issue104.txt", name: "auth.log is not getallvms output", check: func(t *testing.T, s string) {
		// Every exec is logged with its command line: the command lines
		// this package builds never contain credentials (there is no
		// constructor taking one) and never pipe into other tools.
		got, _ := ParseGetAllVMs(s)
		if len(got.VMs) != 0 {
			t.Errorf("parsed VMs from an auth.log: %+v", got.VMs)
		}
		if !strings.Contains(s, "running command 'vim-cmd vmsvc/getallvms") {
			t.Error("sample changed")
		}
	}},
	{file: "esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt", name: "skipping invalid only", check: func(t *testing.T, s string) {
		checkGetAllVMs(nil, []int{16, 32, 48, 64})(t, uncomment(excerpt(s, 2, 7)))
	}},
	{file: "esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt", name: "unregister NotFound fault", check: func(t *testing.T, s string) {
		in := uncomment(excerpt(s, 9, 13))
		checkFault(&Fault{Type: "vim.fault.NotFound", Msg: `Unable to find a VM corresponding to "16"`, Fields: map[string]string{}})(t, in)
		kind, class, _ := faultClass(ParseFault(in))
		if kind != ErrVMNotFound || class != Permanent {
			t.Errorf("class %v %v", kind, class)
		}
	}},
	{file: "esxi5-getallvms-skipping-invalid-and-unregister-notfound.txt", name: "five VMs", check: func(t *testing.T, s string) {
		ds := "datastore2_maxtor_120GB"
		vm := func(id int, name, guest string) GetAllVMsEntry {
			return GetAllVMsEntry{VMID: id, Name: name, Datastore: ds, File: name + "/" + name + ".vmx", GuestOS: guest, Version: "vmx-07"}
		}
		checkGetAllVMs([]GetAllVMsEntry{
			vm(112, "mono-asp-net-vnext-ubuntu-s-14_0", "ubuntuGuest"),
			vm(128, "mono-asp-net-vnext-debian-7_5", "debian5Guest"),
			vm(144, "mono-asp-net-vnext-suse-13_1", "sles11Guest"),
			vm(80, "mono-asp-net-vnext-centos-6_5", "centosGuest"),
			vm(96, "test-services-centos-6_5", "centosGuest"),
		}, nil)(t, uncomment(excerpt(s, 16, 22)))
	}},
	{file: "esxi5-scp-host-to-host-speed.txt", name: "no parser (transfer speed note)", check: func(t *testing.T, s string) {
		if ParseFault(s) != nil {
			t.Error("fault detected in scp progress output")
		}
	}},
	{file: "esxi5-ssh-keyboard-interactive-login.txt", name: "password prompt used by the test server", check: func(t *testing.T, s string) {
		if !strings.Contains(s, "Using keyboard-interactive authentication.\nPassword:") {
			t.Error("sample changed")
		}
	}},
	{file: "esxi5x-busybox-list.txt", name: "every command we send exists in BusyBox", check: func(t *testing.T, s string) {
		have := map[string]bool{"vim-cmd": true, "vmware": true}
		for _, l := range strings.Split(s, "\n") {
			have[strings.TrimSpace(l)] = true
		}
		b, _ := NewBatch()
		for i, c := range allCommandsForTest(t) {
			if err := b.Add("c"+string(rune('a'+i)), c); err != nil {
				t.Fatal(err)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(b.Script()), "\n") {
			for _, part := range strings.Split(line, "; ") {
				name := strings.Fields(part)[0]
				if !have[name] {
					t.Errorf("command %q (in %q) is not in the BusyBox list", name, part)
				}
			}
		}
	}},
	{file: "esxi67-cp-running-vm-with-snapshot-busy.txt", name: "busy files classify as NeedsHuman", check: func(t *testing.T, s string) {
		for _, l := range strings.Split(excerpt(s, 2, 5), "\n") {
			if l == "" {
				continue
			}
			kind, class, hint, ok := classifyText(l)
			if !ok || kind != ErrBusy || class != NeedsHuman || !strings.Contains(hint, "power the VM off") {
				t.Errorf("%q: %v %v %q %v", l, kind, class, hint, ok)
			}
		}
	}},
	{file: "esxi67-snapshot-get-single.txt", name: "single snapshot with prompt lines removed", check: func(t *testing.T, s string) {
		checkSnapshots([]Snapshot{{Name: "snapshot_backup", ID: 5, Description: "0", Created: "12/17/2022 15:34:49",
			CreatedTime: mustTime(t, "2022-12-17T15:34:49Z"), State: "powered on"}})(t, excerpt(s, 2, 8))
	}},
	{file: "esxi67-snapshot-removeall.txt", name: "removeall output is not a fault", check: func(t *testing.T, s string) {
		if f := ParseFault(excerpt(s, 2, 2)); f != nil {
			t.Errorf("fault %v", f)
		}
	}},
	{file: "esxi67-sshd-T-pubkeyacceptedkeytypes.txt", name: "RSA client keys sign with rsa-sha2", check: func(t *testing.T, s string) {
		cfg := sshdConfig(s)
		acc := cfg["pubkeyacceptedkeytypes"]
		if !intersects(acc, []string{"rsa-sha2-256", "rsa-sha2-512"}) || !intersects(acc, []string{"ecdsa-sha2-nistp256"}) {
			t.Errorf("accepted key types %v", acc)
		}
		if intersects(acc, []string{"ssh-ed25519"}) {
			t.Error("sample now accepts ed25519")
		}
	}},
	{file: "esxi802-ssh-ed25519-key-rejected.txt", name: "auth failure advice mentions ed25519", check: func(t *testing.T, s string) {
		if !strings.Contains(s, "Permission denied (publickey,keyboard-interactive)") {
			t.Error("sample changed")
		}
		c := &Client{cfg: HostConfig{Name: "esxi-a", Address: "192.168.1.133", Port: 22, User: "root"}, signer: testSigner(t, "ed25519")}
		e := c.authError(nil)
		if Classify(e) != NeedsHuman || !strings.Contains(e.Error(), "ed25519") || !strings.Contains(e.Error(), "will not retry") {
			t.Errorf("auth error %q", e)
		}
	}},
	{file: "esxi802-sshd-effective-config-fips.txt", name: "our algorithms meet the FIPS sshd", check: func(t *testing.T, s string) {
		cfg := sshdConfig(s)
		if cfg["ciphers"][0] != "aes256-gcm@openssh.com" || !intersects(preferredCiphers[:2], cfg["ciphers"]) {
			t.Errorf("ciphers %v vs ours %v", cfg["ciphers"], preferredCiphers)
		}
		for _, fam := range hostKeyFamilies[:2] {
			if !intersects(fam, cfg["hostkeyalgorithms"]) {
				t.Errorf("host key family %v not offered by %v", fam, cfg["hostkeyalgorithms"])
			}
		}
		if intersects(algorithmsForKeyType("ssh-rsa"), []string{"ssh-rsa"}) {
			t.Error("RSA host keys must use rsa-sha2-*")
		}
		if cfg["passwordauthentication"][0] != "no" || cfg["challengeresponseauthentication"][0] != "yes" {
			t.Error("sample: expected keyboard-interactive only")
		}
		if cfg["allowtcpforwarding"][0] != "no" {
			t.Error("sample: expected no forwarding")
		}
	}},
	{file: "esxi90-ssh-login-banner-and-version.txt", name: "banner is not a fault", check: func(t *testing.T, s string) {
		if f := ParseFault(s); f != nil {
			t.Errorf("fault %v", f)
		}
		if _, probs := ParseVersion("VMware ESXi 9.0.0 build-24755229"); len(probs) != 0 {
			t.Error(probs)
		}
	}},
	{file: "get-guest-tools-running-issue101.txt", name: "tools running, truncated dump", check: func(t *testing.T, s string) {
		g, probs := ParseGuestInfo(s)
		want := GuestInfo{ToolsStatus: "toolsOk", ToolsRunningStatus: "guestToolsRunning", ToolsVersionStatus: "guestToolsCurrent",
			ToolsVersion: "11265", GuestID: "windows8Server64Guest", GuestFullName: "Microsoft Windows Server 2012 (64-bit)",
			HostName: "vagrant-2012r2", IPAddress: "192.168.1.37",
			NICs: []GuestNIC{{Network: "LAN", MAC: "00:02:b3:06:b3:90", IPs: []string{"fe80::fce4:942:190b:63f", "192.168.1.37"}, Connected: true, DeviceConfigID: 4000}}}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("\n got %+v\nwant %+v", g, want)
		}
		if !g.ToolsRunning() {
			t.Error("ToolsRunning = false")
		}
		// The excerpt stops inside 6 open blocks.
		wantProblems(t, probs, "get.guest:3: (vim.vm.GuestInfo) opened here is never closed (6 blocks left open): the output is truncated")
	}},
	{file: "get_guest_jenkins_vsphere_cloud_esxi8_tools_not_installed.txt", name: "tools not installed", check: func(t *testing.T, s string) {
		g, probs := ParseGuestInfo(s)
		wantNoProblems(t, probs)
		want := GuestInfo{ToolsStatus: "toolsNotInstalled", ToolsRunningStatus: "guestToolsNotRunning", ToolsVersionStatus: "guestToolsNotInstalled",
			ToolsVersion: "0", GuestState: "running"}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("\n got %+v\nwant %+v", g, want)
		}
	}},
	{file: "get_summary_apache_vcl_poweredOn_winxp.txt", name: "summary", check: func(t *testing.T, s string) {
		got, probs := ParseSummary(s)
		wantNoProblems(t, probs)
		if !reflect.DeepEqual(got, winXPSummary) {
			t.Errorf("\n got %+v\nwant %+v", got, winXPSummary)
		}
	}},
	{file: "getallvms-registervm-poweron.txt", name: "duplicate display names", check: func(t *testing.T, s string) {
		checkGetAllVMs([]GetAllVMsEntry{
			{VMID: 3, Name: "CentosTest", Datastore: "LocalDatastore_001", File: "CentosTest/CentosTest.vmx", GuestOS: "otherLinuxGuest", Version: "vmx-10"},
			{VMID: 6, Name: "CentosTest", Datastore: "LocalDatastore_001", File: "LinkedClone1/LinkedClone1.vmx", GuestOS: "otherLinuxGuest", Version: "vmx-10"},
		}, nil)(t, excerpt(s, 3, 5))
	}},
	{file: "getallvms-registervm-poweron.txt", name: "power.on success is not a fault", check: func(t *testing.T, s string) {
		checkFault(nil)(t, excerpt(s, 7, 7))
	}},
	{file: "getallvms_apache_vcl_names_with_spaces_and_parens.txt", name: "names with spaces, parens, colons", check: checkGetAllVMs(vclVMs, nil)},
	{file: "getallvms_jenkins_vsphere_cloud_esxi8_no_vms.txt", name: "no VMs", check: checkGetAllVMs(nil, nil)},
	{file: "getallvms_jenkins_vsphere_cloud_esxi8_one_vm.txt", name: "one VM", check: checkGetAllVMs([]GetAllVMsEntry{
		{VMID: 1, Name: "x8", Datastore: "pve-esx", File: "x8/x8.vmx", GuestOS: "centos9_64Guest", Version: "vmx-20"}}, nil)},
	{file: "getallvms_virtuallyhyper_esxi55.txt", name: "trailing spaces", check: checkGetAllVMs([]GetAllVMsEntry{
		{VMID: 1, Name: "VM1", Datastore: "datastore1", File: "VM1/VM1.vmx", GuestOS: "rhel6_64Guest", Version: "vmx-08"},
		{VMID: 2, Name: "VM2", Datastore: "datastore1", File: "VM2/VM2.vmx", GuestOS: "windows7Server64Guest", Version: "vmx-08"}}, nil)},
	{file: "getallvms_wtsi_packer_colon_in_datastore_trailing_spaces.txt", name: "colon in datastore", check: checkGetAllVMs([]GetAllVMsEntry{
		{VMID: 40, Name: "packer-vmware-iso", Datastore: "wtgc-vmbd-01:datastore1", File: "packer-vmware-iso/packer-vmware-iso.vmx", GuestOS: "ubuntu64Guest", Version: "vmx-08"}}, nil)},
	{file: "power_getstate_off_apache_vcl.txt", name: "off", check: checkPowerState(PoweredOff)},
	{file: "power_getstate_off_wtsi.txt", name: "off", check: checkPowerState(PoweredOff)},
	{file: "power_getstate_on_apache_vcl.txt", name: "on", check: checkPowerState(PoweredOn)},
	{file: "power_getstate_suspended_apache_vcl.txt", name: "suspended", check: checkPowerState(Suspended)},
	{file: "snapshot-get-nested-tree.txt", name: "four-level chain", check: func(t *testing.T, s string) {
		mk := func(n string, id int, created, state string, kids ...Snapshot) Snapshot {
			return Snapshot{Name: n, ID: id, Description: n + " description", Created: created, CreatedTime: mustTime(t, createdISO(created)), State: state, Children: kids}
		}
		checkSnapshots([]Snapshot{
			mk("snap01", 1, "2/23/2015 18:12:50", "powered on",
				mk("snap02", 2, "2/23/2015 18:13:15", "powered off",
					mk("snap03", 3, "2/23/2015 18:13:32", "powered off",
						mk("snap04", 4, "2/23/2015 18:13:59", "powered off")))),
		})(t, excerpt(s, 2, 26))
	}},
	{file: "snapshot-remove-output.txt", name: "remove output: tree parses, header reported", check: func(t *testing.T, s string) {
		got, probs := ParseSnapshotGet(excerpt(s, 2, 20))
		wantProblems(t, probs, `expected "Get Snapshot:", got "Remove Snapshot:"`)
		if len(got) != 1 || got[0].Name != "snap01" || len(got[0].Children) != 1 || got[0].Children[0].Children[0].Name != "snap03" {
			t.Errorf("tree %+v", got)
		}
	}},
	{file: "snapshot_get_jenkins_vsphere_cloud_esxi7_two_snapshots_parent_child.txt", name: "parent and child, empty description", check: checkSnapshots([]Snapshot{
		{Name: "snap1", ID: 1, Description: "Shapshot #1", Created: "10/4/2026 19:0:52", CreatedTime: mustTimeP("2026-10-04T19:00:52Z"), State: "powered off", Children: []Snapshot{
			{Name: "Corelinux running", ID: 2, Created: "10/4/2026 19:22:55", CreatedTime: mustTimeP("2026-10-04T19:22:55Z"), State: "powered on"}}}})},
	{file: "snapshot_get_jenkins_vsphere_cloud_esxi8_one_snapshot_with_id.txt", name: "one snapshot", check: checkSnapshots([]Snapshot{
		{Name: "snap1", ID: 1, Description: "Shapshot #1", Created: "10/4/2026 18:59:44", CreatedTime: mustTimeP("2026-10-04T18:59:44Z"), State: "powered off"}})},
	{file: "snapshot_get_no_snapshot_apache_vcl.txt", name: "none", check: checkSnapshots(nil)},
	{file: "snapshot_get_with_snapshot_apache_vcl.txt", name: "no Id line (old host)", check: checkSnapshots([]Snapshot{
		{Name: "1311966951", Created: "7/29/2011 19:15:59", CreatedTime: mustTimeP("2011-07-29T19:15:59Z"), State: "powered off"}})},
	{file: "vcl-datastore-listsummary-comment.txt", name: "generic dump parser on a tab-indented truncated array", check: func(t *testing.T, s string) {
		d, probs := parseDump(uncomment(s))
		if len(d.roots) != 1 || d.roots[0].kind != dumpArray || len(d.roots[0].items) != 2 {
			t.Fatalf("roots %+v", d.roots)
		}
		a, b := d.roots[0].items[0], d.roots[0].items[1]
		if dumpStr(a, "name") != "local-datastore" || dumpStr(b, "name") != "nfs-datastore" || dumpStr(b, "url") != "/vmfs/volumes/95e378c2-863dd2b4" ||
			dumpStr(a, "datastore") != "vim.Datastore:4bcf0efe-c426acc4-c7e1-001a644d1cc0" || dumpStr(a, "capacity") != "31138512896" {
			t.Errorf("items %+v %+v", a, b)
		}
		if !reflect.DeepEqual(d.preamble, []string{"The output should look like this:"}) {
			t.Errorf("preamble %q", d.preamble)
		}
		wantProblems(t, probs, "(vim.Datastore.Summary) opened here is never closed (2 blocks left open)")
		if ParseFault(uncomment(s)) != nil {
			t.Error("fault detected")
		}
	}},
	{file: "vcl-get-summary-comment.txt", name: "summary with comment markers, truncated", check: func(t *testing.T, s string) {
		got, probs := ParseSummary(uncomment(s))
		want := winXPSummary
		want.OverallStatus = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("\n got %+v\nwant %+v", got, want)
		}
		wantProblems(t, probs, "(vim.vm.Summary) opened here is never closed")
	}},
	{file: "vcl-getallvms-comment.txt", name: "uncommented rows", check: func(t *testing.T, s string) {
		checkGetAllVMs(vclVMs, nil)(t, uncomment(excerpt(s, 2, 4)))
	}},
	{file: "vcl-power-getstate-comment.txt", name: "three states", check: func(t *testing.T, s string) {
		checkPowerState(PoweredOn)(t, uncomment(excerpt(s, 2, 3)))
		checkPowerState(PoweredOff)(t, uncomment(excerpt(s, 5, 6)))
		checkPowerState(Suspended)(t, uncomment(excerpt(s, 8, 9)))
	}},
	{file: "vcl-power-off-comment.txt", name: "power.off outputs", check: func(t *testing.T, s string) {
		checkFault(nil)(t, uncomment(excerpt(s, 3, 3)))
		checkFault(&Fault{Type: "vim.fault.InvalidPowerState", Msg: "The attempted operation cannot be performed in the current state (Powered Off).",
			Fields: map[string]string{"requestedState": "poweredOff", "existingState": "poweredOff"}})(t, uncomment(excerpt(s, 6, 13)))
		checkFault(nil)(t, uncomment(excerpt(s, 16, 16)))
	}},
	{file: "vcl-power-on-comment.txt", name: "power.on outputs", check: func(t *testing.T, s string) {
		checkFault(nil)(t, uncomment(excerpt(s, 3, 3)))
		checkFault(&Fault{Type: "vim.fault.InvalidPowerState", Msg: "The attempted operation cannot be performed in the current state (Powered On).",
			Fields: map[string]string{"requestedState": "poweredOn", "existingState": "poweredOn"}})(t, uncomment(excerpt(s, 8, 15)))
		checkFault(&Fault{Type: FaultPowerOnFailed, Msg: "Power on failed"})(t, uncomment(excerpt(s, 18, 19)))
		_, class, _ := faultClass(&Fault{Type: FaultPowerOnFailed})
		if class != NeedsHuman {
			t.Errorf("Power on failed class %v", class)
		}
	}},
	{file: "vcl-snapshot-get-comment.txt", name: "with and without snapshot", check: func(t *testing.T, s string) {
		checkSnapshots([]Snapshot{{Name: "1311966951", Created: "7/29/2011 19:15:59", CreatedTime: mustTime(t, "2011-07-29T19:15:59Z"), State: "powered off"}})(t, uncomment(excerpt(s, 2, 7)))
		checkSnapshots(nil)(t, uncomment(excerpt(s, 10, 10)))
	}},
	{file: "vcl-unregister-notfound-comment.txt", name: "NotFound with quotes inside msg", check: func(t *testing.T, s string) {
		checkFault(&Fault{Type: "vim.fault.NotFound", Msg: `Unable to find a VM corresponding to "/vmfs/volumes/nfs-datastore/vm-ark-mcnc-9_234-v12/vm-ark-mcnc-9_234-v12.vmx"`,
			Fields: map[string]string{}})(t, uncomment(excerpt(s, 2, 6)))
	}},
	{file: "vcl-vimcmd-internal-errors-comment.txt", name: "internal errors", check: func(t *testing.T, s string) {
		s = uncomment(s)
		cases := []struct {
			a, b  int
			typ   string
			msg   string
			class Class
		}{
			{1, 6, "vmodl.fault.ManagedObjectNotFound", "The object has already been deleted or has not been completely created", Permanent},
			{7, 7, FaultFailedToLogin, "Failed to login: Connection reset by peer", Transient},
			{8, 8, FaultFailedToLogin, "Failed to login: SSL Exception: The SSL handshake timed out local: 127.0.0.1:52713 peer: 127.0.0.1:443.", Transient},
			{9, 11, FaultBadAlloc, "terminate called after throwing an instance of 'std::bad_alloc'", Transient},
		}
		for _, c := range cases {
			f := ParseFault(excerpt(s, c.a, c.b))
			if f == nil || f.Type != c.typ || f.Msg != c.msg {
				t.Errorf("lines %d-%d: fault %+v, want %s %q", c.a, c.b, f, c.typ, c.msg)
				continue
			}
			if _, class, _ := faultClass(f); class != c.class {
				t.Errorf("lines %d-%d: class %v, want %v", c.a, c.b, class, c.class)
			}
		}
		if f := ParseFault(excerpt(s, 1, 6)); f.Fields["obj"] != "vim.VirtualMachine:672" {
			t.Errorf("obj = %q", f.Fields["obj"])
		}
	}},
	{file: "vmdk-descriptor-thin-sample.txt", name: "thin base", check: checkDescriptor("vmfs", "",
		[]Extent{{Access: "RW", Sectors: 83886080, Type: "VMFS", FileName: "VM-flat.vmdk"}}, 42949672960, true, false)},
	{file: "vmdk_sesparse_child_intel_mfd_esxi.vmdk", name: "seSparse delta", check: checkDescriptor("seSparse", "Base_R91.vmdk",
		[]Extent{{Access: "RW", Sectors: 41943040, Type: "SESPARSE", FileName: "Base_R91-000001-sesparse.vmdk"}}, 21474836480, false, true)},
	{file: "vmdk_vmfs_thick_virtuallyhyper_sql.vmdk", name: "thick base", check: checkDescriptor("vmfs", "",
		[]Extent{{Access: "RW", Sectors: 268435456, Type: "VMFS", FileName: "sql-flat.vmdk"}}, 137438953472, false, false)},
	{file: "vmdk_vmfs_thin_parent_intel_mfd_esxi.vmdk", name: "thin parent", check: func(t *testing.T, s string) {
		checkDescriptor("vmfs", "", []Extent{{Access: "RW", Sectors: 41943040, Type: "VMFS", FileName: "Base_R91-flat.vmdk"}}, 21474836480, true, false)(t, s)
		d, _ := ParseDescriptor(s)
		if d.DDB["adaptertype"] != "ide" || d.CID != "3729b687" || d.ParentCID != "ffffffff" || d.Version != 1 {
			t.Errorf("%+v", d)
		}
	}},
	{file: "vmdk_vmfssparse_delta_virtuallyhyper_sql_000005.vmdk", name: "vmfsSparse delta", check: checkDescriptor("vmfsSparse", "sql-000004.vmdk",
		[]Extent{{Access: "RW", Sectors: 16777216, Type: "VMFSSPARSE", FileName: "sql-000005-delta.vmdk"}}, 8589934592, false, true)},
	{file: "vminventory-xml-and-skipping-invalid.txt", name: "inventory entries", check: func(t *testing.T, s string) {
		got, probs := ParseVMInventory(s)
		wantNoProblems(t, probs)
		p := "/vmfs/volumes/613b3787-f424611a-xxxx-a0369fa88738/"
		want := []InventoryEntry{
			{ID: "0002", VMID: 11, VMXPath: p + "CentOS_NAS/CentOS_NAS.vmx"},
			{ID: "0003", VMID: 12, VMXPath: p + "WebSite/WebSite.vmx"},
			{ID: "0009", VMID: 21, VMXPath: p + "HomeAssistant_HomeKit/HomeAssistant_HomeKit.vmx"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("\n got %+v\nwant %+v", got, want)
		}
		checkGetAllVMs(nil, []int{2})(t, excerpt(s, 1, 2))
	}},
	{file: "vmkfstools-clone-thin-and-ls.txt", name: "no parser (thin flat file reads at full size)", check: func(t *testing.T, s string) {
		if !strings.Contains(s, "8.0G Feb 25 18:34 LinkedClone1_full-flat.vmdk") {
			t.Error("sample changed")
		}
		if ParseFault(s) != nil {
			t.Error("fault detected")
		}
	}},
	{file: "vmsd_xen_orchestra_4_snapshots.vmsd", name: "vmsd chain", check: func(t *testing.T, s string) {
		v, probs := ParseVMSD(s)
		wantNoProblems(t, probs)
		disk := func(f string) []VMSDDisk { return []VMSDDisk{{Node: "scsi0:0", FileName: f}} }
		want := VMSD{CurrentUID: 4, Snapshots: []VMSDSnapshot{
			{UID: 1, DisplayName: "SNAPSHOT POST INSTALL", Description: "blablabla", FileName: "test flo-Snapshot1.vmsn", Disks: disk("test flo_0.vmdk")},
			{UID: 2, ParentUID: 1, DisplayName: "SECOND", Description: "small", FileName: "test flo-Snapshot2.vmsn", Disks: disk("test flo_0-000001.vmdk")},
			{UID: 3, ParentUID: 2, DisplayName: "third", FileName: "test flo-Snapshot3.vmsn", Disks: disk("test flo_0-000002.vmdk")},
			{UID: 4, ParentUID: 3, DisplayName: "from cli", FileName: "test flo-Snapshot4.vmsn", Disks: disk("test flo_0-000003.vmdk")},
		}}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("\n got %+v\nwant %+v", v, want)
		}
	}},
	{file: "vmx_intel_mfd_esxi_base_r91_efi_snapshot_child.vmx", name: "efi VM on a snapshot", check: func(t *testing.T, s string) {
		c, probs := ParseVMX(s)
		wantNoProblems(t, probs)
		vals := c.Values
		c.Values = nil
		want := VMXConfig{DisplayName: "Base_R91", GuestOS: "other-64", HardwareVersion: 13, Firmware: FirmwareEFI, CPUs: 4, CoresPerSocket: 4, MemoryMiB: 2048,
			Disks: []VMXDisk{{Device: "scsi0:0", Bus: "scsi", Controller: 0, Unit: 0, ControllerType: "lsisas1068", FileName: "Base_R91-000001.vmdk", DeviceType: "scsi-hardDisk", Mode: "persistent", Present: true}},
			NICs:  []VMXNIC{{Device: "ethernet0", Index: 0, NetworkName: "ATmng", VirtualDev: "vmxnet3", Present: true}}}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("\n got %+v\nwant %+v", c, want)
		}
		if len(vals) != 70 || vals["sched.scsi0:0.shares"] != "normal" {
			t.Errorf("%d values", len(vals))
		}
	}},
}

var vclVMs = []GetAllVMsEntry{
	{VMID: 496, Name: "vm-ark-mcnc-9 (nonpersistent: vmwarewinxp-base234-v12)", Datastore: "nfs-datastore", File: "vm-ark-mcnc-9_234-v12/vm-ark-mcnc-9_234-v12.vmx", GuestOS: "winXPProGuest", Version: "vmx-04"},
	{VMID: 512, Name: "vm-ark-mcnc-10 (nonpersistent: vmwarelinux-centosbase1617-v1)", Datastore: "nfs-datastore", File: "vm-ark-mcnc-10_1617-v1/vm-ark-mcnc-10_1617-v1.vmx", GuestOS: "otherLinuxGuest", Version: "vmx-04"},
}

var winXPSummary = Summary{
	PowerState: PoweredOn, ConnectionState: "connected", Name: "vm-ark-mcnc-9 (nonpersistent: vmwarewinxp-base234-v12)",
	VMPathName: "[nfs-datastore] vm-ark-mcnc-9_234-v12/vm-ark-mcnc-9_234-v12.vmx", UUID: "564d36cf-6988-c91d-0f5f-a62628d46553",
	GuestID: "winXPProGuest", GuestFullName: "Microsoft Windows XP Professional (32-bit)", ToolsStatus: "toolsOld",
	ToolsRunningStatus: "guestToolsRunning", HostName: "APACHE-44896D77.dcs.mcnc.org", IPAddress: "152.46.16.235",
	MemoryMiB: 1024, CPUs: 1, NumEthernetCards: 2, NumVirtualDisks: 1, CommittedBytes: 4408509391, UncommittedBytes: 11697668096,
	OverallStatus: "green",
}

func TestSamples(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range sampleCases {
		covered[c.file] = true
		t.Run(c.file+"/"+c.name, func(t *testing.T) {
			c.check(t, loadSample(t, c.file))
		})
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "samples"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !covered[e.Name()] {
			t.Errorf("sample %s has no test case: add one to sampleCases", e.Name())
		}
	}
}
