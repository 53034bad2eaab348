package engine

// Unexported helpers of warm migration, for the engine_test package.

// WarmSnapshotName is the name of round k's snapshot of the migration s.
func WarmSnapshotName(s Spec, k int) string { return s.warmSnapshotName(k) }

// WarmBytes formats a size as the warm checks' messages do.
func WarmBytes(n int64) string { return warmBytes(n) }
