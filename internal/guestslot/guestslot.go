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
// Waiters are served in the order they came: each holds a flock on a
// wait file named by its arrival, and tries the slots only while fewer
// than N live waiters came before it. Without the order, a slot freed
// went to whichever waiter polled first, and a test that had waited for
// half an hour could lose every time to newer ones until its deadline.
//
//	release, err := guestslot.Acquire(ctx)
//	if err != nil { return err }
//	defer release()
package guestslot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	w, err := enqueue(dir)
	if err != nil {
		return nil, fmt.Errorf("guest slots: %w", err)
	}
	defer w.leave()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ahead, err := w.ahead()
		if err != nil {
			return nil, fmt.Errorf("guest slots: %w", err)
		}
		if ahead < n {
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
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one of %d guest slots in %s (other helper VMs on this machine hold them, %d waiters came first): %w",
				n, dir, ahead, context.Cause(ctx))
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

// waiter is a place in the queue: a wait file, locked while its owner
// waits.
type waiter struct {
	dir, name string
	f         *os.File
}

// waitPrefix starts the wait files' names; the rest sorts by arrival.
const waitPrefix = "wait-"

func enqueue(dir string) (*waiter, error) {
	var nonce [4]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s%020d-%d-%s", waitPrefix, time.Now().UnixNano(), os.Getpid(), hex.EncodeToString(nonce[:]))
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return &waiter{dir: dir, name: name, f: f}, nil
}

// ahead counts the live waiters that came before w. A wait file nobody
// holds locked is a waiter that died (the file goes before its lock when
// a waiter leaves): it is removed.
func (w *waiter) ahead() (int, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, waitPrefix) || name >= w.name {
			continue
		}
		// (A waiter that just left gets its file made again here, and
		// removed as a dead one's.)
		f, err := tryLock(filepath.Join(w.dir, name))
		switch {
		case err != nil:
			return 0, err
		case f == nil:
			n++
		default:
			_ = os.Remove(f.Name())
			f.Close()
		}
	}
	return n, nil
}

// leave takes w out of the queue: the file first, then the lock.
func (w *waiter) leave() {
	_ = os.Remove(w.f.Name())
	w.f.Close()
}
