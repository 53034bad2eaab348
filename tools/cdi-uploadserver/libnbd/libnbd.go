// Package libnbd declares the few libnbd names that CDI v1.65.0's
// pkg/importer/vddk-datasource_amd64.go refers to, with the signatures of
// libnbd v1.11.5's Go bindings. Nothing can connect through it: the upload
// server built with it never reads from VMware's VDDK.
package libnbd

import "errors"

// CmdFlag is a command flag (libnbd's NBD_CMD_FLAG_*).
type CmdFlag uint32

// Flags and block states used by CDI's VDDK data source.
const (
	CMD_FLAG_REQ_ONE = CmdFlag(0x08)
	STATE_HOLE       = uint32(0x01)
	STATE_ZERO       = uint32(0x02)
)

// LibnbdError is libnbd's error type.
type LibnbdError struct {
	Op     string
	Errmsg string
	Errno  int
}

func (e *LibnbdError) Error() string { return e.Op + ": " + e.Errmsg }

// ExtentCallback receives block status extents.
type ExtentCallback func(metacontext string, offset uint64, entries []uint32, err *int) int

// PreadOptargs are the optional arguments of Pread.
type PreadOptargs struct{}

// BlockStatusOptargs are the optional arguments of BlockStatus.
type BlockStatusOptargs struct {
	FlagsSet bool
	Flags    CmdFlag
}

// Libnbd is a handle.
type Libnbd struct{}

var errUnavailable = errors.New("libnbd is not available in this build")

// Create always fails: this build has no libnbd.
func Create() (*Libnbd, error) { return nil, errUnavailable }

// AddMetaContext fails.
func (h *Libnbd) AddMetaContext(string) error { return errUnavailable }

// ConnectUri fails.
func (h *Libnbd) ConnectUri(string) error { return errUnavailable }

// GetSize fails.
func (h *Libnbd) GetSize() (uint64, error) { return 0, errUnavailable }

// Pread fails.
func (h *Libnbd) Pread([]byte, uint64, *PreadOptargs) error { return errUnavailable }

// BlockStatus fails.
func (h *Libnbd) BlockStatus(uint64, uint64, ExtentCallback, *BlockStatusOptargs) error {
	return errUnavailable
}

// Close does nothing.
func (h *Libnbd) Close() *LibnbdError { return nil }
