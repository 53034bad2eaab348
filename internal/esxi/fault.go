package esxi

import (
	"fmt"
	"strings"
)

// Fault is a failure reported by vim-cmd in its output. vim-cmd often exits
// 0 even when the operation failed, so every vim-cmd output is checked for
// one of these.
type Fault struct {
	// Type is the fault's class, e.g. "vim.fault.NotFound" or
	// "vim.fault.InvalidPowerState"; for the non-dump failures it is one of
	// FaultPowerOnFailed, FaultFailedToLogin, FaultBadAlloc.
	Type string
	// Msg is the fault's msg field or the failure line.
	Msg string
	// Fields holds the fault's other scalar fields (existingState,
	// requestedState, obj, ...), unquoted.
	Fields map[string]string
}

// Pseudo fault types for failures vim-cmd prints as plain lines.
const (
	FaultPowerOnFailed = "PowerOnFailed"
	FaultFailedToLogin = "FailedToLogin"
	FaultBadAlloc      = "std::bad_alloc"
)

// Error implements error.
func (f *Fault) Error() string {
	if f.Msg == "" {
		return f.Type
	}
	return fmt.Sprintf("%s: %s", f.Type, f.Msg)
}

// ShortType returns the last component of Type ("NotFound").
func (f *Fault) ShortType() string {
	if i := strings.LastIndexByte(f.Type, '.'); i >= 0 && !strings.HasPrefix(f.Type, "std::") {
		return f.Type[i+1:]
	}
	return f.Type
}

// ParseFault returns the first failure found in a vim-cmd output, or nil.
// It recognises a top-level `(vim.fault.X) {` or `(vmodl.fault.X) {` block,
// a `Power on failed` line, `Failed to login:` (hostd unhealthy) and a
// std::bad_alloc crash. It does not depend on trailing commas.
func ParseFault(output string) *Fault {
	d, _ := parseDump(output)
	for _, r := range d.roots {
		if r.kind != dumpObject || !isFaultType(r.typ) {
			continue
		}
		f := &Fault{Type: r.typ, Fields: map[string]string{}}
		for _, fld := range r.fields {
			if s, ok := fld.value.str(); ok {
				if fld.key == "msg" {
					f.Msg = s
				} else {
					f.Fields[fld.key] = s
				}
			}
		}
		return f
	}
	for _, line := range strings.Split(output, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "Power on failed"):
			return &Fault{Type: FaultPowerOnFailed, Msg: t}
		case strings.HasPrefix(t, "Failed to login"):
			return &Fault{Type: FaultFailedToLogin, Msg: t}
		case strings.Contains(t, "std::bad_alloc"):
			return &Fault{Type: FaultBadAlloc, Msg: t}
		}
	}
	return nil
}

func isFaultType(t string) bool {
	return strings.HasPrefix(t, "vim.fault.") || strings.HasPrefix(t, "vmodl.fault.")
}

// faultClass classifies a vim-cmd fault and returns the sentinel and the
// advice to show.
func faultClass(f *Fault) (kind error, class Class, hint string) {
	switch f.ShortType() {
	case "NotFound", "ManagedObjectNotFound":
		return ErrVMNotFound, Permanent, "the VM is not registered on the host (any more): refresh the inventory"
	case "ToolsUnavailable":
		return ErrToolsUnavailable, NeedsHuman, "VMware Tools is not running in the guest: shut the guest down from inside, or allow a hard power off"
	case "InvalidPowerState", "InvalidState":
		return ErrInvalidState, Permanent, "the VM is not in a power state that allows this operation"
	case "TaskInProgress":
		return ErrHostdUnavailable, Transient, "another task is running on the VM: retry when it finishes"
	case "NoPermission", "NotAuthenticated", "RestrictedByAdministrator", "HostAccessRestrictedToManagementServer":
		return ErrPermissionDenied, NeedsHuman, "the host refused the operation for this user (permissions or lockdown mode): use root or an exception user"
	case FaultPowerOnFailed:
		return ErrPowerOnFailed, NeedsHuman, "the host could not power the VM on: check the VM's events in the host client"
	case FaultFailedToLogin:
		return ErrHostdUnavailable, Transient, "hostd is not answering vim-cmd (restarting or overloaded): retry later; if it persists restart hostd on the host"
	case FaultBadAlloc:
		return ErrHostdUnavailable, Transient, "vim-cmd ran out of memory on the host: retry later"
	}
	return ErrUnexpectedOutput, Permanent, "vim-cmd reported a fault this provider does not handle"
}
