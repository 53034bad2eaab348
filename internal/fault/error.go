package fault

// Error is an error whose source decided what it means: its class, a short
// reason and, when someone must act before a retry can succeed, what to
// do. The engine's checkpoints and the coordination of runs (records,
// leases, source claims) return it; the engine turns it into the record's
// stop.
type Error struct {
	Class Class
	// Reason is a short CamelCase cause, e.g. "RecordConflict".
	Reason string
	// Message says what happened.
	Message string
	// Action says what to do next ("" when it is not up to a person).
	Action string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// FaultClass is the class the source decided.
func (e *Error) FaultClass() Class { return e.Class }
