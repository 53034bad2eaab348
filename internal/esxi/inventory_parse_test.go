package esxi

import (
	"reflect"
	"testing"
)

// vmInventory.xml of an ESXi 8 host in a vCenter cluster: the sample's
// entries plus a vCLS VM kept under /var/run/crx/infra/, then entries a
// damaged file can hold.
func TestParseVMInventorySystemAndPerVMProblems(t *testing.T) {
	sample := loadSample(t, "vminventory-xml-and-skipping-invalid.txt")
	xml := excerpt(sample, 3, 18) + `  <ConfigEntry id="0010">
    <objID>6</objID>
    <secDomain>23</secDomain>
    <vmxCfgPath>/var/run/crx/infra/vCLS-1/vCLS-1.vmx</vmxCfgPath>
  </ConfigEntry>
  <ConfigEntry id="0011">
    <objID>7</objID>
    <vmxCfgPath>relative/x.vmx</vmxCfgPath>
  </ConfigEntry>
  <ConfigEntry id="0012">
    <objID>seven</objID>
    <vmxCfgPath>/vmfs/volumes/ds/y/y.vmx</vmxCfgPath>
  </ConfigEntry>
  <ConfigEntry id="0013">
    <objID>12</objID>
    <vmxCfgPath>/vmfs/volumes/ds/z/z.vmx</vmxCfgPath>
  </ConfigEntry>
  <ConfigEntry id="0014">
    <objID>8</objID>
    <vmxCfgPath>/vmfs/volumes/ds/../../etc/passwd</vmxCfgPath>
  </ConfigEntry>
</ConfigRoot>
`
	got, probs := ParseVMInventory(xml)
	p := "/vmfs/volumes/613b3787-f424611a-xxxx-a0369fa88738/"
	want := []InventoryEntry{
		{ID: "0002", VMID: 11, VMXPath: p + "CentOS_NAS/CentOS_NAS.vmx"},
		{ID: "0003", VMID: 12, VMXPath: p + "WebSite/WebSite.vmx"},
		{ID: "0009", VMID: 21, VMXPath: p + "HomeAssistant_HomeKit/HomeAssistant_HomeKit.vmx"},
		{ID: "0010", VMID: 6, VMXPath: "/var/run/crx/infra/vCLS-1/vCLS-1.vmx", System: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries\n got %+v\nwant %+v", got, want)
	}
	wantProbs := []Problem{
		{Source: InventoryXMLPath, VMID: 7, Message: `ConfigEntry id="0011" (vmid 7): path "relative/x.vmx" is not absolute`},
		{Source: InventoryXMLPath, Message: `ConfigEntry id="0012": objID "seven" is not a positive integer`},
		{Source: InventoryXMLPath, VMID: 12, Message: "vmid 12 appears twice; keeping the first entry"},
		{Source: InventoryXMLPath, VMID: 8, Message: `ConfigEntry id="0014" (vmid 8): path "/vmfs/volumes/ds/../../etc/passwd" uses ".." to leave its datastore: refusing it`},
	}
	if !reflect.DeepEqual(probs, wantProbs) {
		t.Errorf("problems\n got %+v\nwant %+v", probs, wantProbs)
	}
}

func TestParseVMInventoryHostWide(t *testing.T) {
	for _, tc := range []struct{ name, xml, msg string }{
		{"truncated", "<ConfigRoot>\n  <ConfigEntry id=\"0000\">\n    <objID>1</objID>\n", "ConfigEntry: XML syntax error on line 4: unexpected EOF, entries after it are missing"},
		{"not inventory", "<html></html>\n", "no <ConfigRoot> element: not a vmInventory.xml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := ParseVMInventory(tc.xml)
			want := []Problem{{Source: InventoryXMLPath, HostWide: true, Message: tc.msg}}
			if !reflect.DeepEqual(probs, want) {
				t.Errorf("\n got %+v\nwant %+v", probs, want)
			}
		})
	}
}

// getallvms on hosts with system and invalid VMs: the rows, the skipped
// vmids, and problems that name their vmid.
func TestParseGetAllVMsSystemAndInvalid(t *testing.T) {
	out := "Skipping invalid VM '3'\n" +
		"Vmid    Name                     File                            Guest OS       Version                 Annotation\n" +
		"1      web      [datastore1] web/web.vmx                      rhel9_64Guest         vmx-19                                                                     \n" +
		"2      vCLS-1   [] /var/run/crx/infra/vCLS-1/vCLS-1.vmx   other5xLinux64Guest   vmx-19    vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services.\n" +
		"1      web2     [datastore1] web2/web2.vmx                    rhel9_64Guest         vmx-19\n"
	got, probs := ParseGetAllVMs(out)
	wantVMs := []GetAllVMsEntry{
		{VMID: 1, Name: "web", Datastore: "datastore1", File: "web/web.vmx", GuestOS: "rhel9_64Guest", Version: "vmx-19", Line: 3},
		{VMID: 2, Name: "vCLS-1", File: "/var/run/crx/infra/vCLS-1/vCLS-1.vmx", GuestOS: "other5xLinux64Guest", Version: "vmx-19",
			Annotation: "vSphere Cluster Service VM is required to maintain the health of vSphere Cluster Services.", Line: 4},
	}
	if !reflect.DeepEqual(got.VMs, wantVMs) || !reflect.DeepEqual(got.Skipped, []int{3}) {
		t.Errorf("\n got %+v skipped %v\nwant %+v", got.VMs, got.Skipped, wantVMs)
	}
	wantProbs := []Problem{{Source: "getallvms", Line: 5, VMID: 1, Message: "vmid 1 listed twice; keeping the first row"}}
	if !reflect.DeepEqual(probs, wantProbs) {
		t.Errorf("\n got %+v\nwant %+v", probs, wantProbs)
	}
}
