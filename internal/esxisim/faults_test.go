package esxisim

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// A command matched by DropAfterRunning is applied on the host, but the
// caller only sees the connection drop: no output, no exit status.
func TestFaultDropAfterRunning(t *testing.T) {
	s := newServer(t, nil)
	id, _, err := s.AddVM(VMSpec{Name: "web", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}, Power: PoweredOn})
	if err != nil {
		t.Fatal(err)
	}
	s.DropAfterRunning("power.off", 1)
	c := dial(t, s)
	// A command that does not match runs and answers normally.
	if r := mustRun(t, c, "vim-cmd vmsvc/power.getstate "+strconv.Itoa(id)); !strings.Contains(r.out, "Powered on") {
		t.Fatalf("power.getstate before the fault: %q", r.out)
	}
	r := run(t, c, "echo before; vim-cmd vmsvc/power.off "+strconv.Itoa(id)+"; echo after")
	if r.runErr == nil {
		t.Fatalf("power.off answered (status %d, out %q): the reply should have been lost", r.code, r.out)
	}
	if strings.Contains(r.out, "Powering off") || strings.Contains(r.out, "after") {
		t.Errorf("output after the lost reply reached the caller: %q", r.out)
	}
	if st, err := s.PowerState(id); err != nil || st != PoweredOff {
		t.Errorf("power state after the lost reply = %v, %v; want powered off (the command ran)", st, err)
	}
	if n := s.LostReplies(); n != 1 {
		t.Errorf("LostReplies() = %d, want 1", n)
	}
	// It fired once: the next matching command answers.
	if err := s.SetPowerState(id, PoweredOn); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, s)
	if r := mustRun(t, c2, "vim-cmd vmsvc/power.off "+strconv.Itoa(id)); r.code != 0 {
		t.Errorf("second power.off: status %d, out %q", r.code, r.out)
	}
	if n := s.LostReplies(); n != 1 {
		t.Errorf("LostReplies() = %d after a disarmed run, want 1", n)
	}

	// Armed for two, cleared after one.
	s.DropAfterRunning("echo lost", 2)
	if r := run(t, dial(t, s), "echo lost"); r.runErr == nil {
		t.Errorf("first of two: answered %q", r.out)
	}
	s.ClearFaults()
	if r := mustRun(t, dial(t, s), "echo lost"); r.out != "lost\n" {
		t.Errorf("after ClearFaults: %q", r.out)
	}
}

// StopListening models a host going down: connections drop and new ones
// are refused until Start on the same address brings it back with its
// state.
func TestStopListeningAndRestart(t *testing.T) {
	s := newServer(t, nil)
	id, _, err := s.AddVM(VMSpec{Name: "web", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	c := dial(t, s)
	s.StopListening()
	if r := run(t, c, "echo hi"); r.runErr == nil {
		t.Errorf("a connection survived StopListening: %q", r.out)
	}
	if nc, err := net.Dial("tcp", addr); err == nil {
		nc.Close()
		t.Fatal("dial succeeded while the host is down")
	}
	if err := s.Start(addr); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, dial(t, s), "vim-cmd vmsvc/power.getstate "+strconv.Itoa(id))
	if !strings.Contains(r.out, "Powered off") {
		t.Errorf("after restart: %q", r.out)
	}
}
