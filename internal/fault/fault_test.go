package fault

import (
	"errors"
	"fmt"
	"testing"
)

type classed struct{ c Class }

func (e classed) Error() string     { return "classed" }
func (e classed) FaultClass() Class { return e.c }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Class
		ok   bool
	}{
		{"plain", errors.New("x"), Permanent, false},
		{"direct", classed{NeedsHuman}, NeedsHuman, true},
		{"wrapped", fmt.Errorf("ctx: %w", classed{Transient}), Transient, true},
		{"nil", nil, Permanent, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Of(tc.err)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Of(%v) = %v, %v; want %v, %v", tc.err, got, ok, tc.want, tc.ok)
			}
		})
	}
	if Transient.String() != "transient" || NeedsHuman.String() != "needs-human" || Permanent.String() != "permanent" || Interrupted.String() != "interrupted" {
		t.Fatal("class names changed: records and logs spell them this way")
	}
}
