//go:build !unix

package transfer

import "os"

// lockFile is a no-op where flock is unavailable: concurrent copies to one
// destination are then the caller's responsibility.
func lockFile(f *os.File) (func(), error) { return func() {}, nil }
