package copyjob

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// maxCredentialBytes bounds a credential file (a private key is a few KiB).
const maxCredentialBytes = 64 << 10

// ReadCredential reads a password or private key from the file at p, a
// Secret mounted read-only with mode 0400. The file (after following the
// symbolic links a Secret volume is made of) must be a regular file that
// neither group nor others may read or write: anything else is refused,
// as needing a person to fix the mount, before a byte of it is read.
// A password loses one trailing line break (files written by editors and
// `kubectl create secret --from-file` often end with one).
func ReadCredential(p string, password bool) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", classed(fault.NeedsHuman, fmt.Errorf("open credential file: %w", err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", classed(fault.NeedsHuman, fmt.Errorf("stat credential file %s: %w", p, err))
	}
	if !fi.Mode().IsRegular() {
		return "", classed(fault.NeedsHuman, fmt.Errorf("credential file %s is not a regular file (%s)", p, fi.Mode().Type()))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", classed(fault.NeedsHuman, fmt.Errorf(
			"credential file %s has mode %04o: group or others may access it; it must be readable by its owner only (mount the Secret with defaultMode 0400 and no fsGroup)", p, perm))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredentialBytes+1))
	if err != nil {
		return "", classed(fault.NeedsHuman, fmt.Errorf("read credential file %s: %w", p, err))
	}
	if len(b) > maxCredentialBytes {
		return "", classed(fault.NeedsHuman, fmt.Errorf("credential file %s is larger than %d bytes", p, maxCredentialBytes))
	}
	s := string(b)
	if password {
		s = strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")
	}
	if s == "" {
		return "", classed(fault.NeedsHuman, fmt.Errorf("credential file %s is empty", p))
	}
	return s, nil
}

// classedError carries the class decided where the error arose.
type classedError struct {
	err   error
	class fault.Class
}

func classed(c fault.Class, err error) error { return &classedError{err: err, class: c} }

func (e *classedError) Error() string           { return e.err.Error() }
func (e *classedError) Unwrap() error           { return e.err }
func (e *classedError) FaultClass() fault.Class { return e.class }
