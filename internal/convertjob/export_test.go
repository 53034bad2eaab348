package convertjob

import (
	"context"
	"testing"
)

// HashImage is hashImage of the image file p, for the tests.
func HashImage(ctx context.Context, p string) (Checked, error) { return hashImage(ctx, Disk{Path: p}) }

// SetAfterCommit sets the hook called after each image's commit, for the
// rest of the test (nil removes it).
func SetAfterCommit(t *testing.T, hook func(disk int) error) {
	old := afterCommit
	afterCommit = hook
	t.Cleanup(func() { afterCommit = old })
}

// Failure is failure, for the tests.
var Failure = failure
