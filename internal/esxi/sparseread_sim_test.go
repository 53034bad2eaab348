package esxi

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// thinDisk adds a VM with one thin disk of size bytes holding data only in
// the given extents, and returns the disk's files.
func thinDisk(t *testing.T, env *simEnv, name string, size int64, power esxisim.PowerState, exts []esxisim.Extent) esxisim.DiskFiles {
	t.Helper()
	_, files, err := env.srv.AddVM(esxisim.VMSpec{Name: name, Power: power,
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: exts}}})
	if err != nil {
		t.Fatal(err)
	}
	return files.Disks[0]
}

// sixteenRuns is 16 runs of 256 KiB (4 MiB of data) spread over 64 MiB.
func sixteenRuns() []esxisim.Extent {
	var e []esxisim.Extent
	for i := int64(0); i < 16; i++ {
		e = append(e, esxisim.Extent{Offset: i * 4 * mib, Length: 256 * kib, Seed: uint64(i + 1)})
	}
	return e
}

func TestReadRangeSparseSim(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	const size = 64 * mib
	disk := thinDisk(t, env, "thin", size, esxisim.PoweredOff, sixteenRuns())
	c := env.client(t)
	ctx := context.Background()

	ok, err := c.HasPython(ctx)
	if err != nil || !ok {
		t.Fatalf("HasPython = %v, %v; want true", ok, err)
	}
	execs := env.srv.Stats().Execs
	if ok, err := c.HasPython(ctx); err != nil || !ok || env.srv.Stats().Execs != execs {
		t.Errorf("second HasPython: %v %v, %d execs since the first; want a cached true", ok, err, env.srv.Stats().Execs-execs)
	}

	// Read the disk in three ranges, the boundaries unaligned, and check the
	// whole against the disk's known digest.
	env.srv.ResetStats()
	whole := diskdigest.New()
	var wire, data int64
	for _, r := range [][2]int64{{0, 20*mib + 3}, {20*mib + 3, 30 * mib}, {50*mib + 3, size - 50*mib - 3}} {
		var buf bytes.Buffer
		st, err := c.ReadRangeSparse(ctx, disk.Flat, r[0], r[1], DenseSink(&buf))
		if err != nil {
			t.Fatalf("ReadRangeSparse %v: %v", r, err)
		}
		if int64(buf.Len()) != r[1] || diskdigest.Sum(buf.Bytes()) != st.SHA256 {
			t.Fatalf("range %v: %d bytes, digest mismatch with stats", r, buf.Len())
		}
		whole.Write(buf.Bytes())
		wire += st.WireBytes
		data += st.DataBytes
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != disk.SHA256() {
		t.Fatalf("disk digest %s, want %s", got, disk.SHA256())
	}
	if data != 4*mib {
		t.Errorf("DataBytes %d, want exactly the 4 MiB of data", data)
	}
	// What the host sent is what the decoder counted, and it is the data
	// plus a little framing: not the 64 MiB of the disk.
	if sent := env.srv.Stats().StdoutBytes; sent != wire || sent > 4*mib+4096 {
		t.Errorf("host sent %d stdout bytes, decoder counted %d; want equal and <= %d", sent, wire, 4*mib+4096)
	}

	// The dense-writer variant gives the same bytes as dd, with few on the wire.
	env.srv.ResetStats()
	var viaPython, viaDD bytes.Buffer
	if n, err := c.ReadRangeSkippingZeros(ctx, disk.Flat, 8*mib, 8*mib, &viaPython); err != nil || n != 8*mib {
		t.Fatalf("ReadRangeSkippingZeros: %d, %v", n, err)
	}
	if sent := env.srv.Stats().StdoutBytes; sent > 2*256*kib+4096 {
		t.Errorf("ReadRangeSkippingZeros sent %d bytes for 512 KiB of data", sent)
	}
	if _, err := c.ReadRange(ctx, disk.Flat, 8*mib, 8*mib, &viaDD); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaPython.Bytes(), viaDD.Bytes()) {
		t.Error("the sparse reader and dd disagree on the content")
	}
}

func TestReadRangeSkippingZerosFallsBackToDD(t *testing.T) {
	env := newSim(t, esxisim.Options{Version: "VMware ESXi 6.7.0 build-8169922"}) // no Python
	const size = 16 * mib
	disk := thinDisk(t, env, "old", size, esxisim.PoweredOff, sixteenRuns())
	c := env.client(t)
	ctx := context.Background()
	if ok, err := c.HasPython(ctx); err != nil || ok {
		t.Fatalf("HasPython = %v, %v; want false", ok, err)
	}
	env.srv.ResetStats()
	var out bytes.Buffer
	n, err := c.ReadRangeSkippingZeros(ctx, disk.Flat, 0, size, &out)
	if err != nil || n != size {
		t.Fatalf("ReadRangeSkippingZeros: %d, %v", n, err)
	}
	if got := diskdigest.Bytes(out.Bytes()); got != disk.SHA256() {
		t.Errorf("digest %s, want %s", got, disk.SHA256())
	}
	if sent := env.srv.Stats().StdoutBytes; sent != size {
		t.Errorf("dd sent %d bytes, want the full %d (zeros included)", sent, size)
	}
	log := env.srv.Commands()
	if last := log[len(log)-1]; !strings.HasPrefix(last, "dd ") {
		t.Errorf("last command %q, want dd", last)
	}
	for _, cmd := range log {
		if strings.Contains(cmd, "python") && !strings.Contains(cmd, "--probe") {
			t.Errorf("ran %q on a host without Python", truncate(cmd, 80))
		}
	}
	// ReadRangeSparse itself reports the missing interpreter.
	if _, err := c.ReadRangeSparse(ctx, disk.Flat, 0, 512, DenseSink(&out)); err == nil {
		t.Error("ReadRangeSparse succeeded on a host without Python")
	}
}

func TestReadRangeSparseSimErrors(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	off := thinDisk(t, env, "off", 4*mib, esxisim.PoweredOff, sixteenRuns())
	on := thinDisk(t, env, "on", 4*mib, esxisim.PoweredOn, sixteenRuns())
	c := env.client(t)
	ctx := context.Background()
	var sink recordSink

	_, err := c.ReadRangeSparse(ctx, on.Flat, 0, mib, &sink)
	if !errors.Is(err, ErrBusy) {
		t.Errorf("powered-on disk: %v, want ErrBusy", err)
	}
	_, err = c.ReadRangeSparse(ctx, strings.Replace(off.Flat, "off-flat", "gone-flat", 1), 0, mib, &sink)
	if !errors.Is(err, ErrFileNotFound) {
		t.Errorf("missing disk: %v, want ErrFileNotFound", err)
	}
	_, err = c.ReadRangeSparse(ctx, off.Flat, 4*mib-512, 1024, &recordSink{base: 4*mib - 512})
	if err == nil || !strings.Contains(err.Error(), "shorter than the range end") {
		t.Errorf("range past the end: %v", err)
	}
	_, err = c.ReadRangeSparse(ctx, "/etc/shadow", 0, 1, &sink)
	if err == nil || Classify(err) != Permanent {
		t.Errorf("path outside the datastores: %v, want a permanent error", err)
	}
	if n := len(env.srv.Commands()); n > 0 && strings.Contains(env.srv.Commands()[n-1], "shadow") {
		t.Error("a path outside /vmfs/volumes reached the host")
	}

	// A connection dropped mid-stream is a transient error, never success.
	env.srv.DropAfterBytes(100 * kib)
	_, err = c.ReadRangeSparse(ctx, off.Flat, 0, 4*mib, &recordSink{})
	if err == nil || Classify(err) != Transient {
		t.Errorf("dropped connection: %v, want a transient error", err)
	}
	env.srv.ClearFaults()

	// A cancelled context stops the read.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ReadRangeSparse(cctx, off.Flat, 0, 4*mib, &recordSink{}); err == nil {
		t.Error("cancelled read succeeded")
	}
}

// The decoder's view of the stream must stop the host when a sink fails.
func TestReadRangeSparseSinkFailure(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetPython(esxisim.HostPython())
	disk := thinDisk(t, env, "d", 16*mib, esxisim.PoweredOff, []esxisim.Extent{{Offset: 0, Length: 16 * mib, Seed: 3}})
	c := env.client(t)
	boom := errors.New("staging disk full")
	_, err := c.ReadRangeSparse(context.Background(), disk.Flat, 0, 16*mib, failSink{boom})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the sink's error", err)
	}
	if sent := env.srv.Stats().StdoutBytes; sent >= 16*mib {
		t.Errorf("host sent all %d bytes after the sink failed", sent)
	}
}
