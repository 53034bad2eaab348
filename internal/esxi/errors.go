package esxi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// Class is the shared error classification (see package fault).
type Class = fault.Class

// The classes, as this package's callers have always named them.
const (
	Permanent  = fault.Permanent
	Transient  = fault.Transient
	NeedsHuman = fault.NeedsHuman
)

// Sentinel errors, matched with errors.Is on any error this package returns.
var (
	ErrAuthFailed       = errors.New("authentication refused")
	ErrHostKeyMismatch  = errors.New("host key mismatch")
	ErrUnknownHostKey   = errors.New("host key not known")
	ErrSSHUnavailable   = errors.New("SSH service unavailable")
	ErrVMNotFound       = errors.New("VM not found")
	ErrFileNotFound     = errors.New("file not found")
	ErrPermissionDenied = errors.New("permission denied")
	ErrBusy             = errors.New("device or resource busy")
	ErrToolsUnavailable = errors.New("VMware Tools not running")
	ErrHostdUnavailable = errors.New("hostd unavailable")
	ErrInvalidState     = errors.New("VM in the wrong power state")
	ErrPowerOnFailed    = errors.New("power on failed")
	ErrUnexpectedOutput = errors.New("unexpected output")
	ErrNotESXi          = errors.New("not an ESXi shell")
	ErrConnection       = errors.New("connection failed")
)

// Error is the error type returned by [Client] operations. It carries the
// classification decided where the error arose, the context (host, vmid,
// path, operation) and a message that says what to do.
type Error struct {
	Class Class
	// Kind is one of the Err* sentinels (matched by errors.Is), or nil.
	Kind error
	Host string
	VMID int
	Path string
	Op   string
	// Msg describes what happened and what the user should do.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	var sb strings.Builder
	if e.Host != "" {
		sb.WriteString("esxi host ")
		sb.WriteString(e.Host)
	}
	if e.Op != "" {
		if sb.Len() > 0 {
			sb.WriteString(": ")
		}
		sb.WriteString(e.Op)
	}
	if e.VMID > 0 {
		sb.WriteString(" vmid ")
		sb.WriteString(strconv.Itoa(e.VMID))
	}
	if e.Path != "" {
		sb.WriteString(" ")
		sb.WriteString(e.Path)
	}
	if sb.Len() > 0 {
		sb.WriteString(": ")
	}
	sb.WriteString(e.Msg)
	if e.Err != nil {
		sb.WriteString(": ")
		sb.WriteString(e.Err.Error())
	}
	return sb.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Kind sentinel.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// Classify reports the class of err: the one an error of this package
// carries (decided where it arose), else [fault.Classify]'s: an
// operating-system error by its errno ([fault.OfErrno]: a full disk needs a
// human, a reset connection is Transient), context cancellation, deadlines
// and other network errors Transient, anything else Permanent (so it is not
// retried blindly).
func Classify(err error) Class { return fault.Classify(err) }

// FaultClass is the class decided where the error arose (see package
// fault).
func (e *Error) FaultClass() Class { return e.Class }

// isNetworkError reports errors that mean "the transport broke", the only
// ones after which a reconnect is attempted.
func isNetworkError(err error) bool { return fault.Disconnected(err) }

// classifyText maps error text printed by BusyBox tools and vim-cmd to a
// sentinel and class. ok is false when the text is not recognised.
func classifyText(s string) (kind error, class Class, hint string, ok bool) {
	switch {
	case strings.Contains(s, "Device or resource busy"):
		return ErrBusy, NeedsHuman, "the file is locked by a running VM: power the VM off (or wait for it to stop) before copying", true
	case strings.Contains(s, "No such file or directory"):
		return ErrFileNotFound, Permanent, "the file does not exist on the host: refresh the inventory; the VM may have been moved or its disks renamed", true
	case strings.Contains(s, "Permission denied"):
		return ErrPermissionDenied, NeedsHuman, "the SSH user may not read this file: use root or grant the user the Administrator role on the host", true
	case strings.Contains(s, "Failed to login"):
		return ErrHostdUnavailable, Transient, "hostd on the host is not answering vim-cmd (restarting or overloaded): retry later; if it persists run /etc/init.d/hostd restart on the host", true
	case strings.Contains(s, "std::bad_alloc"):
		return ErrHostdUnavailable, Transient, "vim-cmd ran out of memory on the host: retry later", true
	case strings.Contains(s, "vim-cmd: not found"), strings.Contains(s, "vmware: not found"):
		return ErrNotESXi, NeedsHuman, "vim-cmd is missing: the address does not point at an ESXi host shell", true
	}
	return nil, Permanent, "", false
}

// errorf is a shorthand for a Permanent *Error with a formatted message.
func errorf(kind error, format string, args ...any) *Error {
	return &Error{Class: Permanent, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
