package esxi

import (
	"strings"
	"testing"
)

func TestParseGetAllVMsTraps(t *testing.T) {
	out := "Skipping invalid VM '7'\n" +
		"Vmid        Name                    File                                   Guest OS          Version   Annotation\n" +
		"1      web (prod): v2   [ds:one] web [prod]/web.vmx   centos7_64Guest   vmx-19    first line\n" +
		"2 cups of flour\n" +
		"and sugar\n" +
		"3      vCLS-abc   [] /vmfs/volumes/5f1-2a/vCLS-abc/vCLS-abc.vmx   otherLinux64Guest   vmx-14    vSphere Cluster Service VM\n" +
		"4      x [a] y.vmx g vmx-1   [ds] z.vmx   g   vmx-2\n" +
		"3      dup   [ds] dup/dup.vmx   otherGuest   vmx-10\n"
	got, probs := ParseGetAllVMs(out)
	wantProblems(t, probs,
		"getallvms:4: line starts with a number but is not a complete VM row; read as part of vmid 1's annotation",
		"getallvms:7: row for vmid 4 splits into columns in 3 ways",
		"getallvms:8: vmid 3 listed twice")
	if len(got.VMs) != 3 || got.Skipped[0] != 7 {
		t.Fatalf("%+v", got)
	}
	v1 := got.VMs[0]
	if v1.Name != "web (prod): v2" || v1.Datastore != "ds:one" || v1.File != "web [prod]/web.vmx" || v1.Annotation != "first line\n2 cups of flour\nand sugar" {
		t.Errorf("vm1 %+v", v1)
	}
	v3 := got.VMs[1]
	if v3.VMID != 3 || v3.Datastore != "" || v3.File != "/vmfs/volumes/5f1-2a/vCLS-abc/vCLS-abc.vmx" || v3.Annotation != "vSphere Cluster Service VM" {
		t.Errorf("vm3 %+v", v3)
	}
	if v4 := got.VMs[2]; !v4.Ambiguous || v4.Name != "" || v4.VMID != 4 {
		t.Errorf("vm4 %+v", v4)
	}
}

func TestParseVMXDetails(t *testing.T) {
	vmx := `.encoding = "UTF-8"
DisplayName = "db|22main|22 |7C x"
annotation = "line1|0Aline2"
FIRMWARE = "EFI"
uefi.secureBoot.enabled = "TRUE"
numVCPUs = "8"
memsize = "16384"
virtualHW.version = "19"
scsi0.present = "TRUE"
scsi0.virtualDev = "pvscsi"
scsi0:0.present = "TRUE"
scsi0:0.fileName = "db.vmdk"
scsi0:1.present = "TRUE"
scsi0:1.fileName = "/vmfs/volumes/ds2/db/db_1.vmdk"
scsi0:1.mode = "independent-persistent"
scsi0:2.present = "FALSE"
scsi0:2.fileName = "old.vmdk"
sata0.present = "TRUE"
sata0:0.present = "TRUE"
sata0:0.deviceType = "cdrom-image"
sata0:0.fileName = "/vmfs/volumes/iso/x.iso"
nvme0.present = "TRUE"
nvme0:0.present = "TRUE"
nvme0:0.fileName = "fast/db_2.vmdk"
ide0:0.present = "TRUE"
ide0:0.fileName = "legacy.vmdk"
ethernet1.present = "TRUE"
ethernet1.virtualDev = "e1000e"
ethernet1.networkName = "VM Network"
ethernet1.addressType = "static"
ethernet1.address = "00:50:56:AA:BB:CC"
ethernet0.present = "TRUE"
ethernet0.virtualDev = "vmxnet3"
ethernet0.networkName = "LAN"
ethernet0.addressType = "generated"
ethernet0.generatedAddress = "00:0c:29:11:22:33"
`
	c, probs := ParseVMX(vmx)
	wantNoProblems(t, probs)
	if c.DisplayName != `db"main" | x` || c.Annotation != "line1\nline2" || c.Firmware != FirmwareEFI || !c.SecureBoot || c.CPUs != 8 || c.MemoryMiB != 16384 || c.HardwareVersion != 19 {
		t.Errorf("%+v", c)
	}
	var devs []string
	for _, d := range c.Disks {
		devs = append(devs, d.Device+"="+d.FileName+"/"+map[bool]string{true: "P", false: "-"}[d.Present]+"/"+map[bool]string{true: "I", false: "-"}[d.Independent()])
	}
	if got := strings.Join(devs, " "); got != "scsi0:0=db.vmdk/P/- scsi0:1=/vmfs/volumes/ds2/db/db_1.vmdk/P/I scsi0:2=old.vmdk/-/- nvme0:0=fast/db_2.vmdk/P/- ide0:0=legacy.vmdk/P/-" {
		t.Errorf("disks %s", got)
	}
	if len(c.NICs) != 2 || c.NICs[0].MAC != "00:0c:29:11:22:33" || c.NICs[1].MAC != "00:50:56:aa:bb:cc" || c.NICs[1].NetworkName != "VM Network" {
		t.Errorf("nics %+v", c.NICs)
	}
	_, probs = ParseVMX("numvcpus = \"x\"\nbroken\nfirmware = \"uefi2\"\nk = \"unterminated\n")
	if len(probs) != 5 {
		t.Errorf("problems %v", probs)
	}
}

func TestParseDescriptorRDMAndBinary(t *testing.T) {
	d, probs := ParseDescriptor("# Disk DescriptorFile\nversion=1\ncreateType=\"vmfsPassthroughRawDeviceMap\"\nRW 2097152 VMFSRDM \"db-rdmp.vmdk\"\n")
	wantNoProblems(t, probs)
	if rdm, pt := d.RDM(); !rdm || !pt || d.CapacityBytes() != 1<<30 {
		t.Errorf("%+v", d)
	}
	_, probs = ParseDescriptor("KDMV\x01\x00\x00")
	wantProblems(t, probs, "binary data")
	_, probs = ParseDescriptor("RW 99999999999999999999 VMFS \"x\"\n")
	if len(probs) != 3 {
		t.Errorf("%v", probs)
	}
}

func TestParsePowerStateAndFaults(t *testing.T) {
	if st, probs := ParsePowerState("(vim.fault.NotFound) {\n   msg = \"gone\"\n}\n"); st != "" || len(probs) == 0 {
		t.Errorf("%q %v", st, probs)
	}
	// No trailing commas (newer builds), indented by tabs.
	f := ParseFault("Powering off VM:\n(vim.fault.InvalidPowerState) {\n\tmsg = \"x\"\n\texistingState = \"poweredOff\"\n}\n")
	if f == nil || f.ShortType() != "InvalidPowerState" || f.Fields["existingState"] != "poweredOff" {
		t.Errorf("%+v", f)
	}
	// A nested fault-typed value is not a top-level fault.
	if f := ParseFault("(vim.vm.Summary) {\n   fault = (vim.fault.NotFound) {\n      msg = \"x\"\n   }\n}\n"); f != nil {
		t.Errorf("nested fault reported: %+v", f)
	}
	if f := ParseFault("(vim.fault.ToolsUnavailable) {\n   msg = \"Cannot complete operation because VMware Tools is not running in this virtual machine.\",\n}"); f == nil {
		t.Error("no fault")
	} else if kind, class, _ := faultClass(f); kind != ErrToolsUnavailable || class != NeedsHuman {
		t.Errorf("%v %v", kind, class)
	}
}

func TestParseSnapshotGetOddities(t *testing.T) {
	out := "Get Snapshot:\n|-ROOT\n--Snapshot Name        : a:b\n--Snapshot Desciption  : two\nlines\n--|-CHILD\n----Snapshot Name : c1\n--|-CHILD\n----Snapshot Name : c2\n|-ROOT\n--Snapshot Name : r2\n------|-CHILD\n"
	got, probs := ParseSnapshotGet(out)
	wantProblems(t, probs, "impossible depth")
	if len(got) != 2 || got[0].Name != "a:b" || got[0].Description != "two\nlines" || len(got[0].Children) != 2 || got[0].Children[1].Name != "c2" || got[1].Name != "r2" {
		t.Errorf("%+v", got)
	}
	if _, probs := ParseSnapshotGet(""); len(probs) != 1 {
		t.Errorf("%v", probs)
	}
}

func TestParseVersion(t *testing.T) {
	v, probs := ParseVersion("VMware ESXi 8.0.2 build-22380479\n")
	wantNoProblems(t, probs)
	if v != (HostVersion{Product: "VMware ESXi", Version: "8.0.2", Build: "22380479"}) {
		t.Errorf("%+v", v)
	}
	if _, probs := ParseVersion("Linux 6.1"); len(probs) != 1 {
		t.Error(probs)
	}
}

func TestClassify(t *testing.T) {
	if Classify(&Error{Class: NeedsHuman}) != NeedsHuman || Classify(errWrap(&Error{Class: Transient})) != Transient {
		t.Error("wrapped class lost")
	}
	if Classify(strings.NewReader("").UnreadByte()) != Permanent {
		t.Error("plain error should be permanent")
	}
	e := &Error{Class: Permanent, Kind: ErrVMNotFound, Host: "esxi-a", Op: "reading VM", VMID: 12, Msg: "refresh"}
	if e.Error() != "esxi host esxi-a: reading VM vmid 12: refresh" {
		t.Errorf("%q", e.Error())
	}
}

func errWrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "ctx: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func TestParseVMSDHugeNumDisks(t *testing.T) {
	v, probs := ParseVMSD("snapshot0.uid = \"1\"\nsnapshot0.numDisks = \"999999999\"\n")
	if len(v.Snapshots) != 1 || len(v.Snapshots[0].Disks) != 0 || len(probs) != 1 {
		t.Errorf("%+v %v", v, probs)
	}
}

func TestParseVMXBootDiskFirst(t *testing.T) {
	vmx := `memSize = "1024"
numvcpus = "1"
scsi0.present = "TRUE"
scsi0:0.present = "TRUE"
scsi0:0.fileName = "data.vmdk"
sata0.present = "TRUE"
sata0:0.present = "TRUE"
sata0:0.fileName = "os.vmdk"
bios.hddOrder = "sata0:0"
`
	c, probs := ParseVMX(vmx)
	wantNoProblems(t, probs)
	if len(c.Disks) != 2 || c.Disks[0].Device != "sata0:0" || c.Disks[1].Device != "scsi0:0" {
		t.Errorf("disks %+v, want the bios.hddOrder disk sata0:0 first", c.Disks)
	}
	if c.Disks[0].Mode != "persistent" {
		t.Errorf("mode %q, want the VMware default persistent", c.Disks[0].Mode)
	}
}
