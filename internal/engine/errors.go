package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// StateInterrupted is StopError.State when a Run ended before a stop state
// was reached: its context was cancelled or timed out, or it lost its
// lease. The record stays in the checkpoint it was working on.
const StateInterrupted record.Phase = "Interrupted"

// StopError is the error Run returns whenever a migration is not
// Completed. Its message says what happened and what to do next.
type StopError struct {
	// Phase is the checkpoint the migration stopped in.
	Phase record.Phase
	// State is PhaseManualInterventionRequired, PhaseFailed or
	// StateInterrupted.
	State record.Phase
	// Reason is a short CamelCase cause, e.g. "SourceVMNotFound".
	Reason string
	// Message says what happened; Action what to do next.
	Message string
	Action  string
	// Field is the configuration attribute to fix (one of the Field
	// constants), or "" when the stop concerns none in particular.
	Field string
	// Err is the underlying error, if any.
	Err error
}

func (e *StopError) Error() string {
	var b strings.Builder
	switch e.State {
	case record.PhaseManualInterventionRequired:
		fmt.Fprintf(&b, "migration needs manual intervention in phase %s: %s", e.Phase, e.Message)
	case record.PhaseFailed:
		fmt.Fprintf(&b, "migration failed in phase %s: %s", e.Phase, e.Message)
	default:
		fmt.Fprintf(&b, "migration interrupted in phase %s: %s", e.Phase, e.Message)
	}
	out := b.String()
	if a := e.Action; a != "" {
		out = strings.TrimSuffix(out, ".") + ". " + strings.ToUpper(a[:1]) + a[1:]
	}
	return out
}

// Unwrap returns the underlying error.
func (e *StopError) Unwrap() error { return e.Err }

func transient(reason, msg string, err error) error {
	return &fault.Error{Class: fault.Transient, Reason: reason, Message: msg, Err: err}
}

func needsHuman(reason, msg, action string, err error) error {
	return &fault.Error{Class: fault.NeedsHuman, Reason: reason, Message: msg, Action: action, Err: err}
}

func permanent(reason, msg, action string, err error) error {
	return &fault.Error{Class: fault.Permanent, Reason: reason, Message: msg, Action: action, Err: err}
}

// classify decides, once, what err means. Errors that carry their class
// (fault.Classed: a step's fault.Error, the esxi, kube and convert packages'
// errors) are read as they say; the first found (the outermost, or the
// first of a join) decides, and a step's own decision wins over the errors
// it wraps. The reason says where a classed error arose.
func classify(err error) (fault.Class, string) {
	var fe *fault.Error
	var c fault.Classed
	switch {
	case errors.As(err, &fe):
		return fe.Class, fe.Reason
	case errors.As(err, &c):
		return c.FaultClass(), classedReason(c)
	case errors.Is(err, context.Canceled):
		return fault.Interrupted, "Interrupted"
	case errors.Is(err, context.DeadlineExceeded):
		return fault.Transient, "Timeout"
	}
	if c, ok := fault.OfErrno(err); ok {
		// A local file system or device error, by what it is.
		return c, "LocalError"
	}
	if esxi.Classify(err) == fault.Transient {
		return fault.Transient, "Error"
	}
	return kube.Classify(err), "Error"
}

// classedReason names the stop reason of an error that carries its class:
// the system it came from, or the convert sentinel it is.
func classedReason(c fault.Classed) string {
	switch c.(type) {
	case *esxi.Error:
		return "SourceError"
	case *kube.Error, *kube.ConfigError:
		return "ClusterError"
	}
	switch {
	case errors.Is(c, convert.ErrQemuImgMissing):
		return "QemuImgMissing"
	case errors.Is(c, convert.ErrInvalidImage):
		return "InvalidImage"
	}
	return "Error"
}

// actionOf returns the action a fault.Error names, else the advice for a
// local file system error, if any.
func actionOf(err error) string {
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Action != "" {
		return fe.Action
	}
	return fault.ErrnoAdvice(err)
}

// backTo sends the migration back to an earlier checkpoint because what
// that checkpoint made is gone.
type backTo struct {
	phase  record.Phase
	reason string
}

func (b *backTo) Error() string { return b.reason }
