package kube

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// A kube.Error carries the class decided where it arose and a ConfigError
// always needs a human; both are read through fault.Of, wrapped or not.
func TestErrorsCarryTheirClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want fault.Class
	}{
		{"transient", &Error{Op: "get", Kind: "ConfigMap", Class: Transient, Err: errors.New("x")}, fault.Transient},
		{"needs a human", &Error{Op: "create", Kind: "DataVolume", Class: NeedsHuman, Err: errors.New("x")}, fault.NeedsHuman},
		{"permanent, wrapped", fmt.Errorf("disk 0: %w", &Error{Op: "get", Class: Permanent, Err: errors.New("x")}), fault.Permanent},
		{"config", fmt.Errorf("connect: %w", &ConfigError{Attribute: AttrHost, Detail: "invalid"}), fault.NeedsHuman},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := fault.Of(tc.err)
			if !ok || got != tc.want {
				t.Fatalf("fault.Of(%v) = %v, %v; want %v, true", tc.err, got, ok, tc.want)
			}
			if c := Classify(tc.err); c != got {
				t.Fatalf("Classify = %v, FaultClass = %v: they must agree", c, got)
			}
		})
	}
}
