//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

const (
	mib         = 1 << 20
	simPassword = "worker-test'pw"
)

// host is a simulated ESXi host reached over real SSH.
type host struct {
	srv *esxisim.Server
	dir string // where this test keeps its spec, credential and result
}

// newHost starts a simulated host; python is its interpreter ("" for a
// host without one, read with dd).
func newHost(t *testing.T, python string) *host {
	t.Helper()
	srv, err := esxisim.New(esxisim.Options{Root: t.TempDir(), Users: []esxisim.User{{Name: "root", Password: simPassword}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetPython(python)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &host{srv: srv, dir: t.TempDir()}
}

// addDisk adds a VM with one thin disk and returns its files.
func (h *host) addDisk(t *testing.T, name string, size int64, content []esxisim.Extent) esxisim.DiskFiles {
	t.Helper()
	_, files, err := h.srv.AddVM(esxisim.VMSpec{Name: name, Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: content}}})
	if err != nil {
		t.Fatal(err)
	}
	return files.Disks[0]
}

// spec is a copy of disk into target with the password in a 0400 file.
func (h *host) spec(t *testing.T, disk esxisim.DiskFiles, target copyjob.Target) copyjob.Spec {
	t.Helper()
	addr, portS, err := net.SplitHostPort(h.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portS)
	pw := filepath.Join(h.dir, "password")
	if err := os.WriteFile(pw, []byte(simPassword+"\n"), 0o400); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	return copyjob.Spec{
		Host: copyjob.Host{Name: "esxi-sim", Address: addr, Port: port, User: "root",
			HostKeyFingerprint: h.srv.Fingerprint(), PasswordFile: pw},
		Disk:       copyjob.Disk{Path: disk.Flat, SizeBytes: disk.CapacityBytes},
		ChunkSize:  mib,
		Streams:    2,
		Target:     target,
		ResultPath: resultPath(filepath.Join(h.dir, "spec.json")),
	}
}

// writeSpec writes s as the worker's spec file and returns its path.
func (h *host) writeSpec(t *testing.T, s copyjob.Spec) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(h.dir, "spec.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runInProcess runs the worker's command line in this process, as a Job
// runs it (-result for a spec that cannot be read), and returns its exit
// code, its stdout lines and the result file.
func runInProcess(t *testing.T, specPath string) (int, []copyjob.Line, copyjob.Result) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run([]string{"copy", "-spec", specPath, "-result", resultPath(specPath)}, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	return code, parseLines(t, &stdout), readResult(t, specPath)
}

func parseLines(t *testing.T, r io.Reader) []copyjob.Line {
	t.Helper()
	var out []copyjob.Line
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l copyjob.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// resultPath is where the worker of the spec at specPath leaves its result.
func resultPath(specPath string) string {
	return filepath.Join(filepath.Dir(specPath), "termination-log")
}

// readResult reads the result of the worker of the spec at specPath.
func readResult(t *testing.T, specPath string) copyjob.Result {
	t.Helper()
	b, err := os.ReadFile(resultPath(specPath))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > copyjob.MaxResultBytes {
		t.Errorf("result of %d bytes does not fit a termination message", len(b))
	}
	var r copyjob.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result %s: %v", b, err)
	}
	return r
}

// sha256Of is the disk digest of the first n bytes of path.
func sha256Of(t *testing.T, path string, n int64) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := diskdigest.New()
	if got, err := io.Copy(h, io.LimitReader(f, n)); err != nil || got != n {
		t.Fatalf("read %d of %d bytes of %s: %v", got, n, path, err)
	}
	return h.Hex()
}

// allocated is how many bytes a file occupies on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// workerBinary builds this command once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vmmigration-worker-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "vmmigration-worker")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
