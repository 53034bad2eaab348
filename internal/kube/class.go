package kube

// FaultClass is the class decided where the error arose (see package
// fault).
func (e *Error) FaultClass() Class { return e.Class }

// FaultClass is NeedsHuman: a connection setting must be fixed before
// anything can succeed.
func (e *ConfigError) FaultClass() Class { return NeedsHuman }
