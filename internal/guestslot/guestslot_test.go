package guestslot

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two slots: two holders get one each, a third waits until one frees its
// slot, and a waiter whose context ends gets an error naming the folder.
func TestAcquire(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r1, err := acquire(ctx, dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := acquire(ctx, dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	if _, err := acquire(short, dir, 2); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a third holder: %v, want a deadline error naming %s", err, dir)
	}
	got := make(chan error, 1)
	go func() {
		r3, err := acquire(ctx, dir, 2)
		if err == nil {
			r3()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a third holder got a slot while two were held: %v", err)
	case <-time.After(2 * pollInterval):
	}
	r1()
	r1() // a second release is harmless
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	r2()
}

// A slot held by another process is not free, and a process that dies
// frees it.
func TestAcquireAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock (util-linux) is needed: %v", err)
	}
	// flock(1) takes the same kind of lock on the shell's descriptor 9 of
	// slot-0, which the shell, become sleep, then holds.
	holder := exec.Command("sh", "-c", `exec 9>"$1" && flock -x 9 && exec sleep 300`, "sh", filepath.Join(dir, "slot-0"))
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "slot-0")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flock never created the slot file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Give flock(1) the lock before trying (it creates the file first).
	var held bool
	for !held && time.Now().Before(deadline) {
		f, err := tryLock(filepath.Join(dir, "slot-0"))
		if err != nil {
			t.Fatal(err)
		}
		if f == nil {
			held = true
		} else {
			f.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !held {
		t.Fatal("the other process never held slot-0")
	}
	short, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := acquire(short, dir, 1); err == nil {
		t.Fatal("got the slot another process holds")
	}
	holder.Process.Kill()
	_ = holder.Wait()
	release, err := acquire(context.Background(), dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	release()
}

func TestSlots(t *testing.T) {
	t.Setenv(EnvSlots, "3")
	if Slots() != 3 {
		t.Errorf("Slots with $%s=3: %d", EnvSlots, Slots())
	}
	t.Setenv(EnvSlots, "zero")
	if Slots() < 2 {
		t.Errorf("default Slots %d, want at least 2", Slots())
	}
	t.Setenv(EnvDir, "/x/y")
	if Dir() != "/x/y" {
		t.Errorf("Dir %q", Dir())
	}
}

// Waiters get a freed slot in the order they came: with the one slot
// held, four waiters queue one after another, and each freed slot goes to
// the longest waiting (taken at random, the four would come in this order
// about once in 24 runs); a waiter that died (its wait file left, locked
// by nobody) is not waited for, and its file is removed.
func TestWaitersServedInOrder(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	holder, err := acquire(ctx, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that died before everyone else came.
	dead := filepath.Join(dir, waitPrefix+"00000000000000000001-1-dead")
	if err := os.WriteFile(dead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 4
	order := make(chan int, n)
	deadline := time.Now().Add(20 * time.Second)
	for w := range n {
		go func() {
			r, err := acquire(ctx, dir, 1)
			if err != nil {
				t.Error(err)
				return
			}
			order <- w
			// Held across a few polls of the others.
			time.Sleep(2 * pollInterval)
			r()
		}()
		// The next comes once this one waits.
		for waiters(t, dir) < w+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// All poll several times while the slot is held.
	time.Sleep(4 * pollInterval)
	holder()
	for want := range n {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("slot %d went to waiter %d, want %d (the one waiting longest)", want, got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d never got the slot", want)
		}
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead waiter's file: %v, want removed", err)
	}
	if n := waiters(t, dir); n != 0 {
		t.Errorf("%d wait files left", n)
	}
}

// waiters counts the live wait files in dir.
func waiters(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), waitPrefix) && !strings.HasSuffix(e.Name(), "-dead") {
			n++
		}
	}
	return n
}
