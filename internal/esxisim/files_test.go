package esxisim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

func TestFileCommands(t *testing.T) {
	s := newServer(t, nil)
	desc := sample(t, "vmdk-descriptor-thin-sample.txt")
	writeFile(t, s, "datastore1/vm/vm.vmdk", []byte(desc))
	data := make([]byte, 3000)
	PatternBytes(data, 7, 0)
	writeFile(t, s, "datastore1/vm/vm-flat.vmdk", data)
	writeFile(t, s, "datastore1/vm/it's a \"vm\".vmx", []byte("x\n"))
	if err := os.Symlink("/etc", filepath.Join(s.opts.Root, "datastore1", "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../..", filepath.Join(s.opts.Root, "datastore1", "vm", "up")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	c := dial(t, s)
	tests := []struct {
		name, cmd, out, err string
		code                int
	}{
		{"cat descriptor", "cat '/vmfs/volumes/datastore1/vm/vm.vmdk'", desc, "", 0},
		{"cat missing", "cat '/x'", "", "cat: can't open '/x': No such file or directory\n", 1},
		{"cat outside volumes", "cat /etc/passwd", "", "cat: can't open '/etc/passwd': No such file or directory\n", 1},
		{"cat dotdot escape", "cat '/vmfs/volumes/datastore1/../../../etc/passwd'", "", "cat: can't open '/vmfs/volumes/datastore1/../../../etc/passwd': No such file or directory\n", 1},
		{"cat symlink escape", "cat /vmfs/volumes/datastore1/evil/passwd", "", "cat: can't open '/vmfs/volumes/datastore1/evil/passwd': No such file or directory\n", 1},
		{"cat symlink dotdot escape", "cat /vmfs/volumes/datastore1/vm/up/etc/passwd", "", "cat: can't open '/vmfs/volumes/datastore1/vm/up/etc/passwd': No such file or directory\n", 1},
		{"cat directory", "cat /vmfs/volumes/datastore1", "", "cat: read error: Is a directory\n", 1},
		{"cat quoted name", `cat '/vmfs/volumes/datastore1/vm/it'\''s a "vm".vmx'`, "x\n", "", 0},
		{"stat size", "stat -c '%s' /vmfs/volumes/datastore1/vm/vm-flat.vmdk", "3000\n", "", 0},
		{"stat size name", "stat -c '%s %n' /vmfs/volumes/datastore1/vm/vm-flat.vmdk /vmfs/volumes/datastore1/vm/vm.vmdk",
			fmt.Sprintf("3000 /vmfs/volumes/datastore1/vm/vm-flat.vmdk\n%d /vmfs/volumes/datastore1/vm/vm.vmdk\n", len(desc)), "", 0},
		{"stat missing", "stat -c %s /vmfs/volumes/nope", "", "stat: can't stat '/vmfs/volumes/nope': No such file or directory\n", 1},
		{"ls dir", "ls /vmfs/volumes/datastore1/vm", "it's a \"vm\".vmx\nup\nvm-flat.vmdk\nvm.vmdk\n", "", 0},
		{"ls volumes", "ls /vmfs/volumes", "datastore1\n", "", 0},
		{"ls missing", "ls /vmfs/volumes/zz", "", "ls: /vmfs/volumes/zz: No such file or directory\n", 1},
		{"sha256sum", "sha256sum /vmfs/volumes/datastore1/vm/vm-flat.vmdk", hex.EncodeToString(sum[:]) + "  /vmfs/volumes/datastore1/vm/vm-flat.vmdk\n", "", 0},
		{"sha256sum missing", "sha256sum /q", "", "sha256sum: can't open '/q': No such file or directory\n", 1},
		{"vmware -v", "vmware -v", "VMware ESXi 8.0.2 build-22380479\n", "", 0},
		{"echo -n", "echo -n a b", "a b", "", 0},
		{"dd missing", "dd if=/nope bs=1M", "", "dd: can't open '/nope': No such file or directory\n", 1},
		{"dd bad number", "dd if=/nope bs=1Q", "", "dd: invalid number '1Q'\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, c, tt.cmd)
			if r.out != tt.out || r.err != tt.err || r.code != tt.code {
				t.Errorf("%s:\ngot  out=%q err=%q exit=%d\nwant out=%q err=%q exit=%d", tt.cmd, r.out, r.err, r.code, tt.out, tt.err, tt.code)
			}
		})
	}
}

var ddStatsRE = regexp.MustCompile(`^(\d+)\+(\d+) records in\n(\d+)\+(\d+) records out\n(\d+) bytes \(([0-9.]+[KMG]?)B\) copied, \d+\.\d{6} seconds, [0-9.]+[KMG]?B/s\n$`)

func TestDD(t *testing.T) {
	s := newServer(t, nil)
	data := make([]byte, 5*1024+100)
	PatternBytes(data, 3, 0)
	writeFile(t, s, "ds/f", data)
	c := dial(t, s)
	tests := []struct {
		args       string
		from, to   int
		full, part int
		human      string
	}{
		{"bs=1k skip=0 count=2", 0, 2048, 2, 0, "2.0K"},
		{"bs=1k skip=4 count=2", 4096, len(data), 1, 1, "1.1K"},
		{"bs=1k skip=9 count=1", 0, 0, 0, 0, "0"},
		{"bs=1024 skip=1", 1024, len(data), 4, 1, "4.1K"},
		{"bs=512 count=1", 0, 512, 1, 0, "512"},
	}
	for _, tt := range tests {
		r := mustRun(t, c, "dd if=/vmfs/volumes/ds/f "+tt.args)
		if r.code != 0 || r.out != string(data[tt.from:tt.to]) {
			t.Errorf("dd %s: exit %d, %d bytes, want %d", tt.args, r.code, len(r.out), tt.to-tt.from)
		}
		m := ddStatsRE.FindStringSubmatch(r.err)
		if m == nil {
			t.Errorf("dd %s: stderr %q not in BusyBox format", tt.args, r.err)
			continue
		}
		want := []string{fmt.Sprint(tt.full), fmt.Sprint(tt.part), fmt.Sprint(tt.full), fmt.Sprint(tt.part), fmt.Sprint(tt.to - tt.from), tt.human}
		if got := m[1:7]; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("dd %s: stats %v, want %v", tt.args, got, want)
		}
	}
	if got := humanReadable(4194304); got != "4.0M" {
		t.Errorf("humanReadable(4 MiB) = %q", got)
	}
	if got := humanReadable(1023); got != "1023" {
		t.Errorf("humanReadable(1023) = %q", got)
	}
}

func TestBusyFilesOfRunningVM(t *testing.T) {
	s := newServer(t, nil)
	id, files, err := s.AddVM(VMSpec{Name: "web", Disks: []DiskSpec{{CapacityBytes: 2 << 20}}, Power: PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	idSnap, sfiles, err := s.AddVM(VMSpec{Name: "snap", Disks: []DiskSpec{{CapacityBytes: 2 << 20}}, Snapshots: true, Power: PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	flat := files.Disks[0].Flat
	busy := []string{
		"cat '" + flat + "'",
		"dd if='" + flat + "' bs=1M count=1",
		"sha256sum '" + flat + "'",
		"cat '" + sfiles.Disks[0].Delta + "'",
	}
	for _, cmd := range busy {
		r := mustRun(t, c, cmd)
		if r.code != 1 || !strings.HasSuffix(r.err, "Device or resource busy\n") || r.out != "" {
			t.Errorf("%s on running VM: got out=%d bytes err=%q exit=%d, want busy", cmd, len(r.out), r.err, r.code)
		}
	}
	// Descriptors, the .vmx, stat and a snapshot's parent stay readable.
	for _, cmd := range []string{"cat '" + files.Disks[0].Descriptor + "'", "cat '" + files.VMXPath + "'", "stat -c %s '" + flat + "'",
		"dd if='" + sfiles.Disks[0].Flat + "' bs=1M count=1 2>/dev/null"} {
		if r := mustRun(t, c, cmd); r.code != 0 {
			t.Errorf("%s on running VM: exit %d err %q", cmd, r.code, r.err)
		}
	}
	if err := s.SetPowerState(id, PoweredOff); err != nil {
		t.Fatal(err)
	}
	_ = idSnap
	r := mustRun(t, c, "sha256sum '"+flat+"'")
	b, err := os.ReadFile(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	// BusyBox sha256sum: a plain SHA-256 of the file.
	sum := sha256.Sum256(b)
	if want := hex.EncodeToString(sum[:]) + "  " + flat + "\n"; r.out != want {
		t.Errorf("after power off: got %q want %q", r.out, want)
	}
}

func TestFixtureBuilder(t *testing.T) {
	root := t.TempDir()
	const capacity = 64 << 20
	files, err := WriteVM(root, VMSpec{
		Datastore: "ds1", Name: "efi vm", GuestOS: "rhel9-64", HardwareVersion: 20, Firmware: "efi", SecureBoot: true,
		CPUs: 2, MemoryMiB: 4096, Annotation: "line one\nline \"two\"",
		Disks: []DiskSpec{
			{CapacityBytes: capacity, Thin: true},
			{CapacityBytes: 3<<20 + 1, Controller: "sata0:1", Subdir: "data", Content: []Extent{{Offset: 1000, Data: []byte("hello")}}},
			{CapacityBytes: 1 << 20, Datastore: "ds2"},
		},
		NICs: []NICSpec{{Network: "LAN", MAC: "00:50:56:01:02:03"}, {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	vmxData, err := os.ReadFile(filepath.Join(root, "ds1", "efi vm", "efi vm.vmx"))
	if err != nil {
		t.Fatal(err)
	}
	v := parseVMX(vmxData)
	checks := map[string]string{
		"displayName": "efi vm", "guestOS": "rhel9-64", "virtualHW.version": "20", "firmware": "efi",
		"uefi.secureBoot.enabled": "TRUE", "numvcpus": "2", "memSize": "4096", "annotation": "line one\nline \"two\"",
		"scsi0:0.fileName": "efi vm.vmdk", "sata0:1.fileName": "data/efi vm_1.vmdk", "scsi0:2.fileName": "/vmfs/volumes/ds2/efi vm/efi vm_2.vmdk",
		"ethernet0.networkName": "LAN", "ethernet0.address": "00:50:56:01:02:03", "ethernet1.addressType": "generated",
	}
	for k, want := range checks {
		if got := v.get(k); got != want {
			t.Errorf(".vmx %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(string(vmxData), `annotation = "line one|0Aline |22two|22"`) {
		t.Errorf(".vmx annotation not escaped like ESXi:\n%s", vmxData)
	}
	desc, err := os.ReadFile(filepath.Join(root, "ds1", "efi vm", "efi vm.vmdk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"createType=\"vmfs\"\n", fmt.Sprintf("RW %d VMFS \"efi vm-flat.vmdk\"\n", capacity/512), "ddb.thinProvisioned = \"1\"\n"} {
		if !strings.Contains(string(desc), want) {
			t.Errorf("descriptor lacks %q:\n%s", want, desc)
		}
	}
	// Sparse: 64 MiB logical, about 4 MiB allocated.
	fi, err := os.Stat(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != capacity {
		t.Errorf("flat size %d, want %d", fi.Size(), capacity)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 > 8<<20 {
		t.Errorf("flat file allocates %d bytes, want sparse (< 8 MiB)", st.Blocks*512)
	}
	for i, d := range files.Disks {
		b, err := os.ReadFile(d.LocalFlat)
		if err != nil {
			t.Fatal(err)
		}
		if got := diskdigest.Bytes(b); got != d.SHA256() {
			t.Errorf("disk %d: file sha256 %s, expected %s", i, got, d.SHA256())
		}
		if int64(len(b)) != d.CapacityBytes || d.CapacityBytes%512 != 0 {
			t.Errorf("disk %d: %d bytes, capacity %d", i, len(b), d.CapacityBytes)
		}
	}
	if b, _ := os.ReadFile(files.Disks[1].LocalFlat); string(b[1000:1005]) != "hello" || b[999] != 0 || b[1005] != 0 {
		t.Errorf("explicit content not placed")
	}
	if vmsd, err := os.ReadFile(filepath.Join(root, "ds1", "efi vm", "efi vm.vmsd")); err != nil || len(vmsd) != 0 {
		t.Errorf("want an empty .vmsd, got %q, %v", vmsd, err)
	}
}
