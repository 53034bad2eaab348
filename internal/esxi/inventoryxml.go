package esxi

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// InventoryEntry is one <ConfigEntry> of /etc/vmware/hostd/vmInventory.xml.
type InventoryEntry struct {
	// ID is the entry's id attribute ("0002").
	ID string
	// VMID is <objID>, the vmid vim-cmd uses.
	VMID int
	// VMXPath is <vmxCfgPath>, the absolute path of the .vmx.
	VMXPath string
	// System is true when VMXPath is outside /vmfs/volumes: a system VM
	// the host or vCenter manages, such as a vCLS VM under
	// /var/run/crx/infra/ (see [VM.System]).
	System bool
}

// ParseVMInventory parses hostd's vmInventory.xml. A path outside
// /vmfs/volumes marks a system VM and is not a problem. Entries with a
// non-numeric objID, a .vmx path that is not absolute or would escape its
// datastore, or a repeated vmid are reported as Problems (with VMID set
// when the vmid is known) and left out. Problems that leave the rest of the
// file unread (XML syntax errors, no <ConfigRoot>) are HostWide.
func ParseVMInventory(s string) ([]InventoryEntry, []Problem) {
	var (
		out   []InventoryEntry
		probs []Problem
		seen  = map[int]bool{}
	)
	dec := xml.NewDecoder(strings.NewReader(s))
	dec.Strict = true
	type entry struct {
		ID      string `xml:"id,attr"`
		ObjID   string `xml:"objID"`
		VMXPath string `xml:"vmxCfgPath"`
	}
	sawRoot := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			probs = append(probs, Problem{HostWide: true, Message: fmt.Sprintf("XML syntax error, entries after it are missing: %v", err)})
			break
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "ConfigRoot":
			sawRoot = true
			continue
		case "ConfigEntry":
		default:
			continue
		}
		var e entry
		if err := dec.DecodeElement(&e, &se); err != nil {
			probs = append(probs, Problem{HostWide: true, Message: fmt.Sprintf("ConfigEntry: %v, entries after it are missing", err)})
			break
		}
		vmid, err := strconv.Atoi(strings.TrimSpace(e.ObjID))
		if err != nil || vmid <= 0 {
			probs = append(probs, Problem{Message: fmt.Sprintf("ConfigEntry id=%q: objID %q is not a positive integer", e.ID, e.ObjID)})
			continue
		}
		p := strings.TrimSpace(e.VMXPath)
		system, err := checkVMXPath(p)
		if err != nil {
			probs = append(probs, Problem{VMID: vmid, Message: fmt.Sprintf("ConfigEntry id=%q (vmid %d): %v", e.ID, vmid, err)})
			continue
		}
		if seen[vmid] {
			probs = append(probs, Problem{VMID: vmid, Message: fmt.Sprintf("vmid %d appears twice; keeping the first entry", vmid)})
			continue
		}
		seen[vmid] = true
		out = append(out, InventoryEntry{ID: e.ID, VMID: vmid, VMXPath: p, System: system})
	}
	if !sawRoot && len(probs) == 0 {
		probs = append(probs, Problem{HostWide: true, Message: "no <ConfigRoot> element: not a vmInventory.xml"})
	}
	return out, withSource(probs, InventoryXMLPath)
}

// checkVMXPath accepts a .vmx path below /vmfs/volumes (system false) or
// an absolute path elsewhere, which only system VMs have (system true: a
// vCLS VM's /var/run/crx/infra/vCLS-1/vCLS-1.vmx). Such a path is never
// read or resolved, so it only needs to be absolute and printable.
func checkVMXPath(p string) (system bool, err error) {
	if strings.HasPrefix(p, VolumesRoot+"/") {
		_, _, err := splitVolumePath(p)
		return false, err
	}
	if !strings.HasPrefix(p, "/") {
		return false, fmt.Errorf("path %q is not absolute", p)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return false, fmt.Errorf("path %q contains a NUL byte or a line break", p)
	}
	return true, nil
}
