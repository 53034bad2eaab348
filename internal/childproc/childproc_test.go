package childproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child runs, writes where it is told, and Kill takes its whole process
// group with it, grandchildren included.
func TestStartAndKill(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The shell starts a grandchild in the same group, prints its pid, and
	// waits.
	p, err := Start("/bin/sh", []string{"-c", "sleep 300 & echo $!; wait"}, nil, out, out)
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	deadline := time.Now().Add(10 * time.Second)
	for grandchild == 0 {
		b, _ := os.ReadFile(out.Name())
		grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if time.Now().After(deadline) {
			t.Fatalf("the child never wrote its output: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.Exited() {
		t.Fatal("the child exited early")
	}
	p.Kill()
	if !p.Exited() || p.Err() == nil {
		t.Fatalf("after Kill: exited %v, err %v", p.Exited(), p.Err())
	}
	// The grandchild is gone too (or a zombie awaiting its new parent).
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/stat")
		if err != nil {
			break
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d survived Kill: %s", grandchild, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartMissingBinary(t *testing.T) {
	if _, err := Start("/nonexistent/binary", nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "/nonexistent/binary") {
		t.Fatalf("Start = %v, want an error naming the binary", err)
	}
}

// A process another part of the program started with Pdeathsig, from any
// thread (as terraform-exec starts terraform), survives children started
// and reaped here: the kernel signals such a process when the thread that
// forked it exits, so a reaped child's thread must go back to the
// scheduler, not be retired.
func TestOtherPdeathsigChildSurvivesReapedChildren(t *testing.T) {
	sleeper := exec.Command("/bin/sleep", "300")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	// Children started and reaped one after another and side by side,
	// on whatever threads the scheduler gives them.
	for range 20 {
		var ps []*Process
		for range 3 {
			p, err := Start("/bin/true", nil, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			<-p.Done()
		}
		runtime.Gosched()
	}
	select {
	case err := <-exited:
		t.Fatalf("the process started elsewhere with Pdeathsig died while children here were reaped: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}
