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

// Demand grows while the group's children work, counts a grandchild, and
// stands still while they only sleep.
func TestDemand(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// A grandchild spins until the file "stop" exists; then the group sleeps.
	stop := filepath.Join(t.TempDir(), "stop")
	p, err := Start("/bin/sh", []string{"-c", `(while [ ! -e "$1" ]; do :; done) & wait; sleep 300`, "sh", stop}, nil, out, out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	// Spinning: demand grows by a good share of the wall time that passes,
	// however busy the machine is (a runnable thread that does not run
	// waits on a run queue, which counts too).
	start, d0 := time.Now(), p.Demand()
	for p.Demand()-d0 < 200*time.Millisecond {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("a spinning group's demand grew by %s in %s", p.Demand()-d0, time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.CPUTime() <= 0 {
		t.Errorf("CPUTime %s while spinning", p.CPUTime())
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Sleeping: after the spinner ends, demand stops growing.
	var prev time.Duration
	for i := 0; ; i++ {
		time.Sleep(300 * time.Millisecond)
		d := p.Demand()
		if i > 0 && d-prev < 30*time.Millisecond {
			break
		}
		if i > 100 {
			t.Fatalf("a sleeping group's demand still grows: %s then %s", prev, d)
		}
		prev = d
	}
	p.Kill()
	if p.Demand() != 0 || p.CPUTime() != 0 {
		t.Errorf("after exit: demand %s, cpu %s", p.Demand(), p.CPUTime())
	}
}

func TestParseSchedstat(t *testing.T) {
	for in, want := range map[string][2]time.Duration{
		"4846387 2738294 17\n": {4846387, 2738294},
		"1 2":                  {1, 2},
	} {
		run, wait, ok := parseSchedstat([]byte(in))
		if !ok || run != want[0] || wait != want[1] {
			t.Errorf("%q: %s %s %v", in, run, wait, ok)
		}
	}
	for _, in := range []string{"", "1", "x 2 3", "-1 2 3"} {
		if _, _, ok := parseSchedstat([]byte(in)); ok {
			t.Errorf("%q parsed", in)
		}
	}
}
