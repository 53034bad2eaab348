package esxi

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// One reader on the host serves a client's ranges one after the other:
// one exec for many ranges, each checked on its own; a host complaint ends
// that reader and the next range starts another.
func TestSparseReaderServesManyRanges(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	const size = 16 * mib
	disk := thinDisk(t, env, "many", size, esxisim.PoweredOff, sixteenRuns())
	busy := thinDisk(t, env, "busy", 4*mib, esxisim.PoweredOn, sixteenRuns())
	c := env.client(t)
	ctx := ctxT(t)
	if ok, err := c.HasPython(ctx); err != nil || !ok {
		t.Fatalf("HasPython = %v, %v", ok, err)
	}
	env.srv.ResetStats()
	whole := diskdigest.New()
	for off := int64(0); off < size; off += 2 * mib {
		var buf bytes.Buffer
		st, err := c.ReadRangeSparse(ctx, disk.Flat, off, 2*mib, DenseSink(&buf))
		if err != nil {
			t.Fatalf("range at %d: %v", off, err)
		}
		if diskdigest.Sum(buf.Bytes()) != st.SHA256 {
			t.Fatalf("range at %d: digest differs from the host's", off)
		}
		whole.Write(buf.Bytes())
	}
	if got := whole.Sum(nil); !bytes.Equal(got, mustHex(t, disk.SHA256())) {
		t.Fatal("the ranges together differ from the disk")
	}
	if n := env.srv.Stats().Execs; n != 1 {
		t.Errorf("%d execs for 8 ranges, want 1 reader serving them all", n)
	}

	// The host refuses a powered-on VM's disk: that reader ends with the
	// host's own complaint, and the next range starts a new one.
	if _, err := c.ReadRangeSparse(ctx, busy.Flat, 0, mib, &recordSink{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("powered-on disk: %v, want ErrBusy", err)
	}
	var buf bytes.Buffer
	if _, err := c.ReadRangeSparse(ctx, disk.Flat, 0, mib, DenseSink(&buf)); err != nil {
		t.Fatalf("range after the refusal: %v", err)
	}
	if n := env.srv.Stats().Execs; n != 2 {
		t.Errorf("%d execs, want 2 (a new reader after the refused range)", n)
	}
}

// An idle reader holds one of the client's sessions, but never keeps a
// command waiting for one: with max_sessions 1 the command closes it.
func TestIdleSparseReaderYieldsItsSession(t *testing.T) {
	defer func(d time.Duration) { serverIdle = d }(serverIdle)
	serverIdle = time.Hour // only eviction can free the session
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	disk := thinDisk(t, env, "idle", 4*mib, esxisim.PoweredOff, sixteenRuns())
	env.cfg.MaxSessions = 1
	c := env.client(t)
	ctx := ctxT(t)
	if _, err := c.ReadRangeSparse(ctx, disk.Flat, 0, mib, &recordSink{}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.family().idle); n != 1 {
		t.Fatalf("%d idle readers after a range, want 1", n)
	}
	var out bytes.Buffer
	if _, err := c.ReadRange(ctx, disk.Flat, 0, 512, &out); err != nil {
		t.Fatalf("dd with the only session held by an idle reader: %v", err)
	}
	if n := len(c.family().idle); n != 0 {
		t.Errorf("%d idle readers after the command took the session, want 0", n)
	}
	// Closing the client ends an idle reader's session on the host.
	if _, err := c.ReadRangeSparse(ctx, disk.Flat, 0, mib, &recordSink{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for env.srv.Stats().ActiveExecs != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := env.srv.Stats().ActiveExecs; n != 0 {
		t.Errorf("%d sessions still running on the host after Close", n)
	}
}

// A read cancelled while the reader streams ends that reader: the session
// goes back, and the next read works.
func TestSparseReaderCancelledMidRange(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	disk := thinDisk(t, env, "cancel", 32*mib, esxisim.PoweredOff, []esxisim.Extent{{Offset: 0, Length: 32 * mib, Seed: 9}})
	env.cfg.MaxSessions = 1
	c := env.client(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	sink := &cancelAfter{n: 4 * mib, cancel: cancel}
	_, err := c.ReadRangeSparse(ctx, disk.Flat, 0, 32*mib, sink)
	if err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled read: %v", err)
	}
	if n := len(c.family().idle); n != 0 {
		t.Errorf("a cancelled reader went back to the idle list (%d)", n)
	}
	var buf bytes.Buffer
	if _, err := c.ReadRangeSparse(ctxT(t), disk.Flat, 0, mib, DenseSink(&buf)); err != nil {
		t.Fatalf("read after the cancelled one (max_sessions 1): %v", err)
	}
}

// cancelAfter cancels once n bytes of data arrived.
type cancelAfter struct {
	n, got int64
	cancel func()
}

func (s *cancelAfter) WriteData(off int64, p []byte) error {
	s.got += int64(len(p))
	if s.got >= s.n {
		s.cancel()
	}
	return nil
}
func (s *cancelAfter) WriteZeros(off, n int64) error { return nil }

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, ch := range s[2*i : 2*i+2] {
			v <<= 4
			switch {
			case ch >= '0' && ch <= '9':
				v |= byte(ch - '0')
			case ch >= 'a' && ch <= 'f':
				v |= byte(ch - 'a' + 10)
			default:
				t.Fatalf("not hex: %q", s)
			}
		}
		b[i] = v
	}
	return b
}
