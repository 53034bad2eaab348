package convertjob

import "testing"

// HashImage is hashImage, for the tests.
var HashImage = hashImage

// SetAfterCommit sets the hook called after each image's commit, for the
// rest of the test (nil removes it).
func SetAfterCommit(t *testing.T, hook func(disk int) error) {
	old := afterCommit
	afterCommit = hook
	t.Cleanup(func() { afterCommit = old })
}

// Failure is failure, for the tests.
var Failure = failure
