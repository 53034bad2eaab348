//go:build linux || darwin

package transfer

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

const simPassword = "transfer-test'pw"

const mib = 1 << 20

// simEnv is a running simulated ESXi host with a client connected to it.
type simEnv struct {
	srv *esxisim.Server
	cfg esxi.HostConfig
	c   *esxi.Client
}

// readModes are the two ways a disk is read from a host: dd chunks where
// the host has no Python (ESXi 6.x), the zero-skipping reader where it has
// (ESXi 7 and 8). Every resume guarantee is tested in both.
var readModes = []struct{ name, python string }{
	{"dd", ""},
	{"python", esxisim.HostPython()},
}

func newSim(tb testing.TB) *simEnv {
	tb.Helper()
	return newSimWith(tb, "")
}

// newSimWith is newSim on a host with the given Python interpreter ("" for
// none), set before the client first connects and probes for it.
func newSimWith(tb testing.TB, python string) *simEnv {
	tb.Helper()
	srv, err := esxisim.New(esxisim.Options{Root: tb.TempDir(), Users: []esxisim.User{{Name: "root", Password: simPassword}}})
	if err != nil {
		tb.Fatal(err)
	}
	srv.SetPython(python)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	host, portS, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	port, _ := strconv.Atoi(portS)
	cfg := esxi.HostConfig{Name: "esxi-sim", Address: host, Port: port, User: "root", Password: simPassword,
		HostKeyFingerprint: srv.Fingerprint(), DialTimeout: 10 * time.Second}
	return &simEnv{srv: srv, cfg: cfg, c: newClient(tb, cfg)}
}

func newClient(tb testing.TB, cfg esxi.HostConfig) *esxi.Client {
	tb.Helper()
	c, err := esxi.NewClient(cfg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// addDisk registers a VM with one disk of the given size and content and
// returns the disk's files.
func (e *simEnv) addDisk(tb testing.TB, name string, size int64, content []esxisim.Extent) (int, esxisim.DiskFiles) {
	tb.Helper()
	id, files, err := e.srv.AddVM(esxisim.VMSpec{Name: name, Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: content}}})
	if err != nil {
		tb.Fatal(err)
	}
	return id, files.Disks[0]
}

func diskOf(f esxisim.DiskFiles) Disk { return Disk{Path: f.Flat, SizeBytes: f.CapacityBytes} }

// mixedContent is data with long zero runs between, with extent edges that
// are not aligned to 64 KiB blocks or to chunks.
func mixedContent(size int64) []esxisim.Extent {
	return []esxisim.Extent{
		{Offset: 0, Length: mib, Seed: 1},
		{Offset: 5*mib + 4096, Length: 3*mib + 512, Seed: 2},
		{Offset: size / 2, Length: 512, Data: []byte("not all zero")},
		{Offset: size - mib - 1536, Length: mib + 1024, Seed: 3},
	}
}

// ddRange is one range the host was asked to read.
type ddRange struct {
	path        string
	off, length int64
}

// ddReads lists the ranges the host read with dd.
func ddReads(srv *esxisim.Server) []ddRange {
	var out []ddRange
	for _, r := range srv.DDReads() {
		out = append(out, ddRange{path: r.Path, off: r.Offset, length: r.Length})
	}
	return out
}

// hostReads parses the reads the host was asked for, by dd or by the
// zero-skipping reader.
func hostReads(srv *esxisim.Server) []ddRange {
	out := ddReads(srv)
	for _, r := range srv.SparseReads() {
		out = append(out, ddRange{path: r.Path, off: r.Offset, length: r.Length})
	}
	return out
}

// assertReadMode fails unless the host's reads went through its Python
// where it has one (dd only for the one-sector probe), and never where it
// has none.
func assertReadMode(t *testing.T, srv *esxisim.Server, python string) {
	t.Helper()
	var dd int
	py := len(srv.SparseReads())
	for _, r := range ddReads(srv) {
		if r.length > 512 {
			dd++
		}
	}
	if python != "" && (py == 0 || dd > 0) {
		t.Errorf("the host has Python, but it read %d ranges through it and %d with dd", py, dd)
	}
	if python == "" && py > 0 {
		t.Errorf("the host has no Python, but %d reads ran it", py)
	}
}

// assertNoReadBelow fails if any dd range (other than the one-sector probe
// of the last sector) read bytes before off.
func assertNoReadBelow(t *testing.T, reads []ddRange, off int64) {
	t.Helper()
	if len(reads) == 0 {
		t.Error("no dd reads at all")
	}
	for _, r := range reads {
		if r.off < off {
			t.Errorf("re-read [%d, %d) which the journal had verified (below %d)", r.off, r.off+r.length, off)
		}
	}
}

func readJournal(tb testing.TB, dest string) *journal {
	tb.Helper()
	j, err := loadJournal(dest)
	if err != nil || j == nil {
		tb.Fatalf("journal of %s: %v, %v", dest, j, err)
	}
	return j
}

// allocated returns the bytes a file occupies on disk.
func allocated(tb testing.TB, path string) int64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func sameBytes(tb testing.TB, a, b string) bool {
	tb.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		tb.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		tb.Fatal(err)
	}
	return string(x) == string(y)
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

func destIn(tb testing.TB, name string) string {
	return filepath.Join(tb.TempDir(), name)
}
