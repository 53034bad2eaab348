package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
)

// script writes an executable shell script standing in for a virt-v2v
// tool.
//
// The stand-ins start no helper VM: they take guest slots of their own, not
// the machine's, which other test packages' real guests hold.
func script(t *testing.T, body string) string {
	t.Helper()
	t.Setenv(guestslot.EnvDir, t.TempDir())
	p := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A tool that stops printing is taken for hung after StallTimeout: it is
// killed with everything it started (the helper VM is its grandchild), and
// the error says so with the end of its output.
func TestRunKillsAStalledTool(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild")
	tool := script(t, `echo "libguestfs: launch: backend=direct" >&2
echo '{ "message": "Opening the source", "type": "message" }'
sleep 300 &
echo $! > `+pidFile+`
wait
`)
	v := &V2V{StallTimeout: 1500 * time.Millisecond}
	start := time.Now()
	_, _, err := v.run2(context.Background(), tool, nil, "")
	if !errors.Is(err, ErrV2VStalled) {
		t.Fatalf("err %v: want ErrV2VStalled", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the stalled tool ran %s", took)
	}
	for _, want := range []string{"printed nothing and wanted less than 25% of a CPU for", "libguestfs: launch: backend=direct", "helper VM"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 {
		t.Fatal("the tool's child never started")
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the tool's child %d outlived it", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A tool that keeps printing is never taken for hung, however long it
// runs; its JSON messages are kept even when a line arrives in pieces and
// the rest of its standard error is far larger than what is kept.
func TestRunKeepsAToolThatPrints(t *testing.T) {
	tool := script(t, `case "$1 $2" in "-v -x") ;; *) echo "want -v -x first, got $*" >&2; exit 3;; esac
i=0
while [ $i -lt 12 ]; do
  printf '{ "message": "step %d' $i >&2
  sleep 0.1
  printf '", "type": "message" }\n' >&2
  head -c 20000 /dev/zero | tr '\0' 'x' >&2; echo >&2
  i=$((i+1))
done
echo report
`)
	v := &V2V{StallTimeout: 1 * time.Second}
	stdout, messages, err := v.run2(context.Background(), tool, []string{"--machine-readable"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if string(stdout) != "report\n" {
		t.Errorf("stdout %q", stdout)
	}
	var ev V2VEvidence
	ev.readMessages(messages)
	if len(ev.Messages) != 12 || ev.Messages[0] != "step 0" || ev.Messages[11] != "step 11" {
		t.Errorf("messages %q: want step 0 to step 11", ev.Messages)
	}
}

// A tool that prints nothing for longer than StallTimeout but keeps
// working (a helper VM rebuilding an initramfs under TCG) is slow, not
// hung: it is left to finish.
func TestRunKeepsASilentToolThatWorks(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "stop")
	tool := script(t, `(while [ ! -e '`+stop+`' ]; do :; done) &
wait
echo done
`)
	// Two seconds: on a machine with dozens of runnable threads per core,
	// a busy thread's run-queue wait shows in schedstat only once it runs
	// again, so a shorter window can see no demand for a whole tick.
	v := &V2V{StallTimeout: 2 * time.Second}
	time.AfterFunc(3*v.StallTimeout, func() { _ = os.WriteFile(stop, nil, 0o600) })
	stdout, _, err := v.run2(context.Background(), tool, nil, "")
	if err != nil || string(stdout) != "done\n" {
		t.Fatalf("a silent tool that works: %q, %v", stdout, err)
	}
}

// A tool starts only once one of the machine's guest slots is free.
func TestRunWaitsForAGuestSlot(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	tool := script(t, "touch "+ran+"\n")
	t.Setenv(guestslot.EnvDir, t.TempDir())
	t.Setenv(guestslot.EnvSlots, "1")
	release, err := guestslot.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := (&V2V{}).run2(context.Background(), tool, nil, "")
		done <- err
	}()
	time.Sleep(time.Second)
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the tool ran while the only guest slot was held")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("the tool never ran once the slot was free")
	}
}

// A tool that fails says why with the end of its standard error, not its
// beginning.
func TestRunFailureShowsTheEndOfItsOutput(t *testing.T) {
	tool := script(t, `head -c 200000 /dev/zero | tr '\0' 'y' >&2; echo >&2
echo "virt-v2v-in-place: error: inspection could not detect the source guest" >&2
exit 1
`)
	v := &V2V{}
	_, _, err := v.run2(context.Background(), tool, nil, "")
	if !errors.Is(err, ErrV2VFailed) || !strings.Contains(err.Error(), "inspection could not detect the source guest") {
		t.Fatalf("err %v", err)
	}
	if len(err.Error()) > 2*toolTailBytes {
		t.Errorf("the error holds %d bytes", len(err.Error()))
	}
}

// Cancelling the context stops the tool at once.
func TestRunStopsWithItsContext(t *testing.T) {
	tool := script(t, "while :; do echo tick >&2; sleep 0.1; done\n")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _, err := (&V2V{}).run2(ctx, tool, nil, "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
}
