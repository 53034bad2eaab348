package testguest

import (
	"context"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
)

// BootCPU is the CPU time QEMU gets to bring a test guest to its agent.
// Under TCG a boot takes about a minute of QEMU's CPU on an idle or a busy
// machine alike (a busy one only spreads it over more wall time); ten
// times that catches a guest that spins without booting, while one that
// hangs idle is caught by its console (guestboot's boot failures) and by
// the test's own deadline.
const BootCPU = 10 * time.Minute

// deadlineMargin is kept between a test context's end and the test
// binary's -timeout, so that a wait that runs out fails with the test's
// own evidence (console, tool output) instead of the binary's panic.
const deadlineMargin = 90 * time.Second

// Context returns a context that ends deadlineMargin before the test
// binary's -timeout (and with the test). Tests that wait on guests use it
// instead of a fixed timeout: how long a guest takes in wall time depends
// on how busy the machine is, so a fixed number only holds on an idle one.
func Context(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-deadlineMargin))
		t.Cleanup(cancel)
	}
	return ctx
}

// BootContext is Context bounded also by g's CPU budget BootCPU.
func BootContext(t *testing.T, g *guestboot.Guest) context.Context {
	ctx, cancel := g.WithCPUBudget(Context(t), BootCPU)
	t.Cleanup(cancel)
	return ctx
}
