package esxi

import (
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// vclsHost is a vCenter-managed host as a real user had it: ordinary VMs
// next to a vCLS system VM (its .vmx under /var/run/crx/infra/) and a VM
// hostd skips as invalid (files deleted).
type vclsHost struct {
	env                *simEnv
	web, vcls, invalid int
	db                 int
	webFiles           *esxisim.VMFiles
}

func newVCLSHost(t *testing.T) *vclsHost {
	t.Helper()
	h := &vclsHost{env: newSim(t, esxisim.Options{})}
	var err error
	if h.web, h.webFiles, err = h.env.srv.AddVM(esxisim.VMSpec{Name: "web", Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}},
		NICs: []esxisim.NICSpec{{Network: "VM Network"}}}); err != nil {
		t.Fatal(err)
	}
	if h.vcls, _, err = h.env.srv.AddVM(esxisim.VMSpec{System: true, Name: "vCLS-1", Power: esxisim.PoweredOn,
		Annotation: "vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services."}); err != nil {
		t.Fatal(err)
	}
	if h.invalid, _, err = h.env.srv.AddVM(esxisim.VMSpec{Invalid: true, Name: "deleted-vm"}); err != nil {
		t.Fatal(err)
	}
	if h.db, _, err = h.env.srv.AddVM(esxisim.VMSpec{Name: "db", Datastore: "datastore2", Disks: []esxisim.DiskSpec{{CapacityBytes: 2 << 20}}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// wantOnlyInvalidProblem checks the invalid VM's problems, which concern
// it alone: hostd skipping it, and its .vmx being gone (when
// vmInventory.xml gave its path; getallvms does not).
func wantOnlyInvalidProblem(t *testing.T, vm VM, vmid int) {
	t.Helper()
	if vm.VMXPath == "" {
		want := Problem{Source: "getallvms", VMID: vmid, Message: "hostd skips this VM as invalid (its datastore may be missing or its .vmx unreadable)"}
		if len(vm.Problems) != 1 || vm.Problems[0] != want {
			t.Errorf("invalid VM problems %+v, want only %+v", vm.Problems, want)
		}
		return
	}
	want := []Problem{
		{Source: "getallvms", VMID: vmid, Message: "hostd skips this VM as invalid (its datastore may be missing or its .vmx unreadable)"},
		{Source: vm.VMXPath, VMID: vmid},
	}
	if len(vm.Problems) != 2 {
		t.Fatalf("invalid VM problems %v, want %v", vm.Problems, want)
	}
	if vm.Problems[0] != want[0] {
		t.Errorf("invalid VM problem %+v, want %+v", vm.Problems[0], want[0])
	}
	p := vm.Problems[1]
	if p.Source != want[1].Source || p.VMID != vmid || p.HostWide || !strings.Contains(p.Message, "No such file or directory") {
		t.Errorf("invalid VM problem %+v, want the .vmx missing", p)
	}
}

func TestSimInventorySystemAndInvalidVMs(t *testing.T) {
	h := newVCLSHost(t)
	c := h.env.client(t)
	h.env.srv.ResetStats()
	vms, host, err := c.Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	wantNoProblems(t, host)
	if len(vms) != 4 {
		t.Fatalf("%d VMs: %+v", len(vms), vms)
	}
	byID := map[int]VM{}
	for _, vm := range vms {
		byID[vm.VMID] = vm
	}

	for _, id := range []int{h.web, h.db} {
		vm := byID[id]
		wantNoProblems(t, vm.Problems)
		if vm.System || len(vm.Disks) != 1 || vm.Disks[0].CapacityBytes == 0 {
			t.Errorf("ordinary VM %d: %+v", id, vm)
		}
	}
	if vm := byID[h.web]; vm.Name != "web" || vm.VMXPath != h.webFiles.VMXPath || vm.Datastore != "datastore1" {
		t.Errorf("web %+v", vm)
	}

	vcls := byID[h.vcls]
	wantNoProblems(t, vcls.Problems)
	if !vcls.System || vcls.Name != "vCLS-1" || vcls.VMXPath != "/var/run/crx/infra/vCLS-1/vCLS-1.vmx" || vcls.Datastore != "" ||
		vcls.GuestOS != "other5xLinux64Guest" || vcls.HardwareVersion != 19 || vcls.PowerState != PoweredOn ||
		vcls.Annotation != "vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services." ||
		len(vcls.Disks) != 0 || len(vcls.NICs) != 0 {
		t.Errorf("vCLS %+v", vcls)
	}

	inv := byID[h.invalid]
	wantOnlyInvalidProblem(t, inv, h.invalid)
	if inv.System || inv.VMXPath != "/vmfs/volumes/datastore1/deleted-vm/deleted-vm.vmx" || inv.Datastore != "datastore1" ||
		inv.Name != "" || inv.PowerState != PowerStateUnknown {
		t.Errorf("invalid VM %+v", inv)
	}

	// Still three round trips; a system VM's files are never read and an
	// invalid VM gets no vim-cmd (hostd does not know it).
	if n := h.env.srv.Stats().Execs; n > int64(3*c.cfg.MaxSessions) || n < 3 {
		t.Errorf("%d execs", n)
	}
	for _, l := range h.env.srv.CommandLog() {
		if strings.Contains(l.Command, "/var/run/crx") {
			t.Errorf("read a system VM's files: %s", l.Command)
		}
		if strings.Contains(l.Command, "vmsvc/power.getstate "+itoa(h.invalid)) {
			t.Errorf("asked hostd about the invalid VM: %s", l.Command)
		}
	}

	// One VM at a time: the other VMs' state never leaks in.
	for _, id := range []int{h.web, h.db, h.vcls} {
		vm, err := c.VM(ctxT(t), id)
		if err != nil {
			t.Fatalf("VM(%d): %v", id, err)
		}
		wantNoProblems(t, vm.Problems)
		if vm.VMID != id || vm.System != (id == h.vcls) {
			t.Errorf("VM(%d) = %+v", id, vm)
		}
	}
	vm, err := c.VM(ctxT(t), h.invalid)
	if err != nil {
		t.Fatal(err)
	}
	wantOnlyInvalidProblem(t, vm, h.invalid)
}

// A vmInventory.xml entry that names no usable vmid concerns no VM: it is
// returned as a host note, and no VM, asked for alone or not, carries it.
func TestSimInventoryProblemsStayWithTheirVM(t *testing.T) {
	h := newVCLSHost(t)
	c := h.env.client(t)
	xml := h.env.srv.InventoryXML()
	xml = strings.Replace(xml, "</ConfigRoot>", `  <ConfigEntry id="0098">
    <objID>x1</objID>
    <vmxCfgPath>/vmfs/volumes/datastore1/old/old.vmx</vmxCfgPath>
  </ConfigEntry>
  <ConfigEntry id="0099">
    <objID>`+itoa(h.db)+`</objID>
    <vmxCfgPath>/vmfs/volumes/datastore2/copy/copy.vmx</vmxCfgPath>
  </ConfigEntry>
</ConfigRoot>`, 1)
	h.env.srv.SetInventoryXML(xml)
	vms, host, err := c.Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(host) != 1 || host[0].HostWide || host[0].VMID != 0 || !strings.Contains(host[0].Message, `objID "x1"`) {
		t.Errorf("host problems %+v, want the one note about objID x1", host)
	}
	for _, vm := range vms {
		switch vm.VMID {
		case h.db:
			if len(vm.Problems) != 1 || vm.Problems[0].VMID != h.db || !strings.Contains(vm.Problems[0].Message, "appears twice") {
				t.Errorf("db problems %+v, want its duplicate entry", vm.Problems)
			}
		case h.invalid:
			wantOnlyInvalidProblem(t, vm, h.invalid)
		default:
			wantNoProblems(t, vm.Problems)
		}
	}
	web, err := c.VM(ctxT(t), h.web)
	if err != nil {
		t.Fatal(err)
	}
	wantNoProblems(t, web.Problems)
	db, err := c.VM(ctxT(t), h.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(db.Problems) != 1 || !strings.Contains(db.Problems[0].Message, "appears twice") {
		t.Errorf("VM(db) problems %+v", db.Problems)
	}
}

// A vmInventory.xml that cannot be parsed makes every VM's list and paths
// uncertain: the problem is host-wide, returned once by Inventory and
// attached by VM to the VM it returns.
func TestSimInventoryHostWideProblem(t *testing.T) {
	h := newVCLSHost(t)
	c := h.env.client(t)
	h.env.srv.SetInventoryXML("<ConfigRoot>\n  <ConfigEntry id=\"0000\">\n    <objID>1</objID>\n")
	vms, host, err := c.Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(host) != 1 || !host[0].HostWide || host[0].Source != InventoryXMLPath || !strings.Contains(host[0].Message, "XML syntax error") {
		t.Fatalf("host problems %+v", host)
	}
	if len(vms) != 4 {
		t.Fatalf("%d VMs, want the 4 getallvms and hostd know", len(vms))
	}
	for _, vm := range vms {
		if vm.VMID == h.invalid {
			if vm.VMXPath != "" {
				t.Errorf("invalid VM path %q: only vmInventory.xml knows it", vm.VMXPath)
			}
			wantOnlyInvalidProblem(t, vm, h.invalid)
			continue
		}
		wantNoProblems(t, vm.Problems)
		if vm.VMID == h.vcls && (!vm.System || vm.VMXPath != "/var/run/crx/infra/vCLS-1/vCLS-1.vmx") {
			t.Errorf("vCLS from getallvms: %+v", vm)
		}
	}
	web, err := c.VM(ctxT(t), h.web)
	if err != nil {
		t.Fatal(err)
	}
	if len(web.Problems) != 1 || !web.Problems[0].HostWide || len(web.Disks) != 1 {
		t.Errorf("VM(web) = %+v, want its data plus the host-wide problem", web)
	}
}
