package convert

import "github.com/vmmigration/terraform-provider-vmmigration/internal/fault"

// sentinel is a sentinel error that carries its class.
type sentinel struct {
	msg   string
	class fault.Class
}

func (e *sentinel) Error() string { return e.msg }

// FaultClass is the class the sentinel was declared with.
func (e *sentinel) FaultClass() fault.Class { return e.class }
