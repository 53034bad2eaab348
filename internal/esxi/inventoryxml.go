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
}

// ParseVMInventory parses hostd's vmInventory.xml. Entries with a
// non-numeric objID or a .vmx path outside /vmfs/volumes are reported as
// Problems and left out.
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
			probs = append(probs, Problem{Message: fmt.Sprintf("XML syntax error, entries after it are missing: %v", err)})
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
			probs = append(probs, Problem{Message: fmt.Sprintf("ConfigEntry: %v", err)})
			break
		}
		vmid, err := strconv.Atoi(strings.TrimSpace(e.ObjID))
		if err != nil || vmid <= 0 {
			probs = append(probs, Problem{Message: fmt.Sprintf("ConfigEntry id=%q: objID %q is not a positive integer", e.ID, e.ObjID)})
			continue
		}
		p := strings.TrimSpace(e.VMXPath)
		if _, _, err := splitVolumePath(p); err != nil {
			probs = append(probs, Problem{Message: fmt.Sprintf("ConfigEntry id=%q (vmid %d): %v", e.ID, vmid, err)})
			continue
		}
		if seen[vmid] {
			probs = append(probs, Problem{Message: fmt.Sprintf("vmid %d appears twice; keeping the first entry", vmid)})
			continue
		}
		seen[vmid] = true
		out = append(out, InventoryEntry{ID: e.ID, VMID: vmid, VMXPath: p})
	}
	if !sawRoot && len(probs) == 0 {
		probs = append(probs, Problem{Message: "no <ConfigRoot> element: not a vmInventory.xml"})
	}
	return out, withSource(probs, InventoryXMLPath)
}
