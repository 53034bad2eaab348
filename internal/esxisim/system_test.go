package esxisim

import (
	"regexp"
	"strings"
	"testing"
)

func TestSystemAndInvalidVMs(t *testing.T) {
	s := newServer(t, nil)
	web, _, err := s.AddVM(VMSpec{Name: "web", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	vcls, vf, err := s.AddVM(VMSpec{System: true, Name: "vCLS-1", Power: PoweredOn,
		Annotation: "vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services."})
	if err != nil {
		t.Fatal(err)
	}
	gone, gf, err := s.AddVM(VMSpec{Invalid: true, Name: "deleted-vm"})
	if err != nil {
		t.Fatal(err)
	}
	if vf.VMXPath != "/var/run/crx/infra/vCLS-1/vCLS-1.vmx" || gf.VMXPath != "/vmfs/volumes/datastore1/deleted-vm/deleted-vm.vmx" {
		t.Fatalf("paths %q %q", vf.VMXPath, gf.VMXPath)
	}
	if web != 1 || vcls != 2 || gone != 3 {
		t.Fatalf("vmids %d %d %d", web, vcls, gone)
	}
	if _, _, err := s.AddVM(VMSpec{System: true, Invalid: true, Name: "x"}); err == nil {
		t.Error("System and Invalid together accepted")
	}
	c := dial(t, s)

	r := mustRun(t, c, "vim-cmd vmsvc/getallvms")
	if r.err != "Skipping invalid VM '3'\n" || r.code != 0 {
		t.Errorf("stderr %q exit %d, want the Skipping line and 0", r.err, r.code)
	}
	// ESXi 7/8 print a vCLS VM with the empty datastore and its absolute path.
	row := regexp.MustCompile(`(?m)^2 +vCLS-1 +\[\] /var/run/crx/infra/vCLS-1/vCLS-1\.vmx +other5xLinux64Guest +vmx-19 +vSphere Cluster Service VM is required`)
	if !row.MatchString(r.out) {
		t.Errorf("no vCLS row in:\n%s", r.out)
	}
	if strings.Contains(r.out, "deleted-vm") || strings.Count(r.out, "\n") != 3 {
		t.Errorf("want header, web and vCLS rows only:\n%s", r.out)
	}

	r = mustRun(t, c, "cat /etc/vmware/hostd/vmInventory.xml")
	for _, w := range []string{
		"<objID>2</objID>\n    <secDomain>19</secDomain>\n    <vmxCfgPath>/var/run/crx/infra/vCLS-1/vCLS-1.vmx</vmxCfgPath>",
		"<objID>3</objID>\n    <secDomain>21</secDomain>\n    <vmxCfgPath>/vmfs/volumes/datastore1/deleted-vm/deleted-vm.vmx</vmxCfgPath>",
	} {
		if !strings.Contains(r.out, w) {
			t.Errorf("vmInventory.xml lacks %q:\n%s", w, r.out)
		}
	}

	// The system VM's .vmx is readable over SSH, as on a real host; its disk
	// is not a file here.
	r = mustRun(t, c, "cat '/var/run/crx/infra/vCLS-1/vCLS-1.vmx'")
	if r.code != 0 || !strings.Contains(r.out, "displayName = \"vCLS-1\"\n") || !strings.Contains(r.out, "scsi0:0.fileName = \"vCLS-1.vmdk\"\n") {
		t.Errorf("cat vCLS .vmx: %+v", r)
	}
	r = mustRun(t, c, "ls /var/run/crx/infra")
	if r.code != 0 || r.out != "vCLS-1\n" {
		t.Errorf("ls: %+v", r)
	}
	r = mustRun(t, c, "cat '/var/run/crx/infra/vCLS-1/vCLS-1.vmdk'")
	if r.code == 0 || !strings.Contains(r.err, "No such file or directory") {
		t.Errorf("cat vCLS disk: %+v", r)
	}
	r = mustRun(t, c, "vim-cmd vmsvc/power.getstate 2")
	if r.out != "Retrieved runtime info\nPowered on\n" {
		t.Errorf("vCLS power.getstate: %+v", r)
	}

	// hostd does not know an invalid VM: every per-VM command says NotFound.
	for _, cmd := range []string{"power.getstate", "power.on", "power.off", "get.guest", "snapshot.get"} {
		r = mustRun(t, c, "vim-cmd vmsvc/"+cmd+" 3")
		if r.code != 1 || !strings.Contains(r.out, "(vim.fault.NotFound) {") || !strings.Contains(r.out, `msg = "Unable to find a VM corresponding to "3""`) {
			t.Errorf("%s on an invalid VM: %+v", cmd, r)
		}
	}
	if st, _ := s.PowerState(3); st != PoweredOff {
		t.Errorf("power.on changed an invalid VM to %v", st)
	}
}

func TestSetInventoryXML(t *testing.T) {
	s := newServer(t, nil)
	if _, _, err := s.AddVM(VMSpec{Name: "web", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}}); err != nil {
		t.Fatal(err)
	}
	generated := s.InventoryXML()
	c := dial(t, s)
	s.SetInventoryXML("<ConfigRoot>\n")
	if r := mustRun(t, c, "cat /etc/vmware/hostd/vmInventory.xml"); r.out != "<ConfigRoot>\n" {
		t.Errorf("overridden file reads %q", r.out)
	}
	s.ClearInventoryXML()
	if r := mustRun(t, c, "cat /etc/vmware/hostd/vmInventory.xml"); r.out != generated || !strings.Contains(r.out, "/vmfs/volumes/datastore1/web/web.vmx") {
		t.Errorf("after ClearInventoryXML: %q", r.out)
	}
}
