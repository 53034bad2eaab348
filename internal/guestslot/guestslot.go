// Package guestslot limits how many helper VMs run at once on this
// machine, across processes: QEMU guests booted to prove a migrated VM
// boots, and the libguestfs helper VMs that virt-v2v starts. Under TCG
// each is a CPU-bound process; a few more of them than there are cores
// make every one of them slower than the timeouts inside the guests
// (systemd's device jobs, virt-v2v's own) allow, where taking turns
// finishes them all.
//
// A slot is an exclusive flock on one of N files in a folder shared by
// every process of the machine's user; the kernel drops the lock when its
// holder dies, so a crashed process never keeps a slot.
//
//	release, err := guestslot.Acquire(ctx)
//	if err != nil { return err }
//	defer release()
package guestslot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Environment variables that override the defaults.
const (
	// EnvSlots is how many helper VMs may run at once on this machine.
	EnvSlots = "VMMIGRATION_GUEST_SLOTS"
	// EnvDir is the folder of the slot files.
	EnvDir = "VMMIGRATION_GUEST_SLOTS_DIR"
)

// pollInterval is how often a waiter tries the slots again.
const pollInterval = 250 * time.Millisecond

// Slots is how many helper VMs may run at once: $VMMIGRATION_GUEST_SLOTS,
// else half the CPUs and at least two (a conversion inspects and converts
// at once, with one helper VM each).
func Slots() int {
	if n, err := strconv.Atoi(os.Getenv(EnvSlots)); err == nil && n > 0 {
		return n
	}
	return max(2, runtime.NumCPU()/2)
}

// Dir is the folder holding the slot files: $VMMIGRATION_GUEST_SLOTS_DIR,
// else vmmigration-guest-slots-<uid> in the system's temporary folder.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "vmmigration-guest-slots-"+strconv.Itoa(os.Getuid()))
}

// Acquire waits for a free slot, or until ctx ends, and returns the
// function that frees it (safe to call more than once).
func Acquire(ctx context.Context) (func(), error) {
	return acquire(ctx, Dir(), Slots())
}

func acquire(ctx context.Context, dir string, n int) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("guest slots: %w", err)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		for i := range n {
			f, err := tryLock(filepath.Join(dir, "slot-"+strconv.Itoa(i)))
			if err != nil {
				return nil, fmt.Errorf("guest slots: %w", err)
			}
			if f != nil {
				var done bool
				return func() {
					if !done {
						done = true
						_ = f.Close() // closing the only descriptor drops the flock
					}
				}, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one of %d guest slots in %s (other helper VMs on this machine hold them): %w", n, dir, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// tryLock returns the open, exclusively locked file, or nil when another
// holder has it.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return f, nil
	}
	f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, nil
	}
	return nil, fmt.Errorf("locking %s: %w", path, err)
}
