package esxi

import (
	"fmt"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// An esxi.Error carries the class decided where it arose, through the
// errors that wrap it.
func TestErrorFaultClass(t *testing.T) {
	for _, want := range []Class{Permanent, Transient, NeedsHuman} {
		err := fmt.Errorf("disk 0: %w", &Error{Class: want, Kind: ErrBusy, Msg: "locked"})
		if got, ok := fault.Of(err); !ok || got != want {
			t.Errorf("fault.Of(%v) = %v, %v; want %v, true", err, got, ok, want)
		}
		if got := Classify(err); got != want {
			t.Errorf("Classify(%v) = %v, want %v", err, got, want)
		}
	}
}
