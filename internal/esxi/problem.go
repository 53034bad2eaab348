package esxi

import "fmt"

// Problem records a piece of host output that a parser could not interpret.
// Parsers never guess: what they cannot read unambiguously is left out of
// the result and described here instead.
type Problem struct {
	// Source names the output or file, e.g. "getallvms" or a .vmx path.
	Source string
	// Line is the 1-based line number within Source, or 0 if not applicable.
	Line int
	// Message says what was wrong.
	Message string
	// VMID is the vmid of the VM the problem concerns, or 0 when it
	// concerns no VM in particular. The inventory attaches such a problem
	// to that VM's [VM.Problems] and to no other VM.
	VMID int
	// HostWide is true when the problem makes every VM's data on the host
	// uncertain: vmInventory.xml unreadable or unparseable as a whole, an
	// exec whose output framing broke. [Client.VM] attaches host-wide
	// problems to the VM it returns; problems that are not host-wide never
	// reach another VM. See the attribution rule on [Client.Inventory].
	HostWide bool
}

// String formats the problem as "source:line: message".
func (p Problem) String() string {
	switch {
	case p.Source != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.Source, p.Line, p.Message)
	case p.Source != "":
		return p.Source + ": " + p.Message
	default:
		return p.Message
	}
}

func withSource(ps []Problem, src string) []Problem {
	for i := range ps {
		if ps[i].Source == "" {
			ps[i].Source = src
		}
	}
	return ps
}

// withVMID sets VMID on every problem that has none.
func withVMID(ps []Problem, vmid int) []Problem {
	for i := range ps {
		if ps[i].VMID == 0 {
			ps[i].VMID = vmid
		}
	}
	return ps
}

// hostWide marks every problem host-wide.
func hostWide(ps []Problem) []Problem {
	for i := range ps {
		ps[i].HostWide = true
	}
	return ps
}
