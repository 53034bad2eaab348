package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The benchmark's smoke run, on loopback without the shaped link, the
// `ssh cat` baseline or a real sshd (the simulator's SSH server is the
// host; scripts/bench.sh runs the real one): the three roles start, a cold, a warm and a wave of
// two migrations complete (each DataVolume checked against its source by
// the driver, the warm guest's writes made during its precopy), and the
// report prints its rows. It keeps `make bench` from rotting; its timings
// are not asserted.
func TestSmokeRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "migrate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The node that runs cluster execution's Jobs runs their pods as this
	// machine's processes, which takes root (podrun).
	jobs := os.Geteuid() == 0
	var worker string
	if jobs {
		worker = filepath.Join(dir, "vmmigration-worker")
		if out, err := exec.Command("go", "build", "-o", worker, "github.com/vmmigration/terraform-provider-vmmigration/cmd/vmmigration-worker").CombinedOutput(); err != nil {
			t.Fatalf("go build the worker: %v\n%s", err, out)
		}
	} else {
		t.Log("not root: cluster execution's part is left out")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	root, work := filepath.Join(dir, "volumes"), filepath.Join(dir, "work")
	for _, d := range []string{filepath.Join(root, datastore), work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	args := []string{"run", "-smoke", "-wave", "2", "-root", root, "-work", work, "-listen", addr}
	if jobs {
		args = append(args, "-worker", worker, "-mode-wave", "2")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("migrate run: %v\n%s", err, out)
	}
	t.Logf("the report:\n%s", out)
	wants := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^downtime\s+\d+\.\ds\s+\d+\.\ds$`),
		regexp.MustCompile(`(?m)^copied after power-off\s+20\.0 MiB\s+[\d.]+ (MiB|GiB)$`),
		regexp.MustCompile(`(?m)^precopy \(VM running\)\s+-\s+[\d.]+s \(272\.0 MiB copied while the VM ran\)$`),
		regexp.MustCompile(`(?m)^wave: 2 VMs, `),
		regexp.MustCompile(`(?m)^   wave-1\s+downtime`),
		regexp.MustCompile(`(?m)^provider peak RSS: \d+ MiB`),
		regexp.MustCompile(`(?m)^host: the Go simulator's own SSH server \(no real sshd given\)$`),
	}
	if jobs {
		// Each claim was checked against its source by the driver.
		wants = append(wants,
			regexp.MustCompile(`(?m)^cluster execution, VM "cluster-cold" \([\d.]+ GiB of data\): downtime [\d.]+ s`),
			regexp.MustCompile(`(?m)^   runner: CPU [\d.]+ s, read `),
			regexp.MustCompile(`(?m)^cluster execution, VM "cluster-warm": downtime [\d.]+ s .* warm downtime = \d+% of cluster-cold`),
			regexp.MustCompile(`(?m)^local\s+[\d.]+s\s+[\d.]+s .* migrations: bench [12]$`),
			regexp.MustCompile(`(?m)^cluster\s+[\d.]+s\s+[\d.]+s .* copy pods running: bench [0-2]$`),
			regexp.MustCompile(`(?m)^cluster execution's runner CPU = [\d.]+% of local's`))
	}
	for _, want := range wants {
		if !want.Match(out) {
			t.Errorf("the report has no line matching %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "sim-cold") {
		t.Errorf("a sim-cold line without a real sshd, when every migration is the simulator's:\n%s", out)
	}
	if strings.Contains(string(out), "ssh cat` of the dense disk") {
		t.Errorf("a baseline was reported without -ssh-cat:\n%s", out)
	}
}
