// Package fault defines what a caller should do about an error: the one
// classification the ESXi client, the Kubernetes client and the migration
// engine share. Each package decides an error's class once, where the error
// arises, and every caller reads the same type.
package fault

import "errors"

// Class says what the caller should do about an error.
type Class int

const (
	// Permanent errors will not go away by retrying: a VM or object that
	// does not exist, invalid input, anything not recognised.
	Permanent Class = iota
	// Transient errors may succeed on retry with backoff: dropped
	// connections, timeouts, a host or API server restarting or busy.
	Transient
	// NeedsHuman errors need someone to act before a retry can succeed:
	// refused credentials, a full disk, a guest that will not shut down.
	NeedsHuman
	// Interrupted means the work was stopped from outside (cancelled, out
	// of time, its lease lost) rather than failing: it resumes where it
	// stopped on the next run.
	Interrupted
)

// String is the class as the record and the logs spell it.
func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case NeedsHuman:
		return "needs-human"
	case Interrupted:
		return "interrupted"
	default:
		return "permanent"
	}
}

// Classed is implemented by errors that carry their class.
type Classed interface {
	error
	FaultClass() Class
}

// Of returns the class carried by err or any error it wraps, and whether
// one was found.
func Of(err error) (Class, bool) {
	var c Classed
	if errors.As(err, &c) {
		return c.FaultClass(), true
	}
	return Permanent, false
}
