package testcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// StartT starts a cluster for one test and stops it when the test and its
// subtests have finished (also when the test fails or panics). It fails the
// test when the cluster cannot start, saying what is missing; it never skips.
func StartT(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c, err := Start(tb.Context(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("stopping test cluster: %v", err)
		}
	})
	return c
}

// Shared is one cluster shared by the tests of a package, started on first
// use (tests that need no cluster cost nothing) and stopped by Main:
//
//	var cluster testcluster.Shared
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		c := cluster.Get(t)
//		...
//	}
//
// Tests that share a cluster must not assume it is empty: use their own
// namespace or unique names. Tests that restart or break the API server
// should start their own with StartT.
type Shared struct {
	// Options for the cluster; set before the first Get.
	Options Options

	once sync.Once
	c    *Cluster
	err  error
}

// Get returns the shared cluster, starting it on first use. It fails tb
// when the cluster cannot start (every later Get fails with the same error).
func (s *Shared) Get(tb testing.TB) *Cluster {
	tb.Helper()
	s.once.Do(func() {
		// Not the test's context: the cluster outlives the first test.
		s.c, s.err = Start(context.Background(), s.Options)
	})
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.c
}

// Stop stops the shared cluster if it was started.
func (s *Shared) Stop() error {
	s.once.Do(func() { s.err = fmt.Errorf("testcluster: shared cluster already stopped") })
	if s.c == nil {
		return nil
	}
	return s.c.Stop()
}

// Main runs the tests and then stops the shared cluster, returning the exit
// code for os.Exit.
func (s *Shared) Main(m *testing.M) int {
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping shared test cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
