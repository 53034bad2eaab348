package provider_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// The tests of this file run the configurations under examples/ unchanged:
// the example's .tf files are copied into a Terraform working directory, a
// test.auto.tfvars.json points its variables at the simulators, and the real
// terraform CLI runs them with the built provider, as a user would.

// exampleVars are the variables every example takes, for this environment.
func (e *migrationEnv) exampleVars(t *testing.T) map[string]any {
	t.Helper()
	kc := e.cluster.WriteKubeconfig(t)
	host, portStr, _ := strings.Cut(e.host.Addr(), ":")
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{
		"esxi_address":                host,
		"esxi_port":                   port,
		"esxi_fingerprint":            e.host.Fingerprint(),
		"esxi_password":               acctest.ESXiPassword,
		"kubeconfig":                  kc,
		"kube_context":                acctest.KubeContext,
		"upload_proxy_url":            e.sim.UploadProxyURL(),
		"upload_proxy_ca_certificate": string(e.sim.UploadProxyCACertPEM()),
		"upload_proxy_server_name":    e.sim.UploadProxyServerName(),
		"work_dir":                    e.workDir,
		"namespace":                   e.namespace,
		"storage_class":               "standard",
		// The simulated disks hold test data, not an OS to convert.
		"conversion": "none",
	}
}

// exampleWorkdir copies examples/<name>/*.tf into a fresh working directory
// and writes vars (merged over the environment's) as test.auto.tfvars.json.
func (e *migrationEnv) exampleWorkdir(t *testing.T, name string, vars map[string]any) *acctest.Workdir {
	t.Helper()
	root, err := acctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", name, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples/%s has no .tf files (%v)", name, err)
	}
	w := acctest.NewWorkdir(t, "")
	if err := os.Remove(filepath.Join(w.Dir, "main.tf")); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.Dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := e.exampleVars(t)
	for k, v := range vars {
		all[k] = v
	}
	writeTFVars(t, w, all)
	return w
}

func writeTFVars(t *testing.T, w *acctest.Workdir, vars map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.Dir, "test.auto.tfvars.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tf runs terraform in w and fails the test unless it exits with wantExit.
func tf(t *testing.T, w *acctest.Workdir, wantExit int, args ...string) acctest.Result {
	t.Helper()
	start := time.Now()
	res := w.Run(t.Context(), nil, args...)
	code := 0
	if res.Err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(res.Err, &ee) {
			code = ee.ExitCode()
		}
	}
	t.Logf("terraform %s: exit %d in %s", strings.Join(args, " "), code, time.Since(start).Round(100*time.Millisecond))
	if code != wantExit {
		t.Fatalf("terraform %v: exit %d, want %d\n--- stdout\n%s\n--- stderr\n%s", args, code, wantExit, res.Stdout, res.Stderr)
	}
	return res
}

// tfOutputs returns `terraform output -json`, as raw JSON per output.
func tfOutputs(t *testing.T, w *acctest.Workdir) map[string]json.RawMessage {
	t.Helper()
	res := tf(t, w, 0, "output", "-json")
	var outs map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &outs); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, res.Stdout)
	}
	m := map[string]json.RawMessage{}
	for k, v := range outs {
		m[k] = v.Value
	}
	return m
}

// records returns the migration records of the environment's namespace,
// by destination name.
func (e *migrationEnv) records(t *testing.T) map[string]record.Record {
	t.Helper()
	return e.cluster.Records(t, e.namespace)
}

// addGuestVM adds a running VM with VMware Tools, an IP and one small disk,
// as a migration's graceful shutdown and guest checks expect.
func (e *migrationEnv) addGuestVM(t *testing.T, name, mac string, diskBytes int64) (int, *esxisim.VMFiles) {
	t.Helper()
	return e.host.AddVM(t, esxisim.VMSpec{Name: name, GuestOS: "rhel9-64", CPUs: 2, MemoryMiB: 2048,
		Disks: []esxisim.DiskSpec{{CapacityBytes: diskBytes, Thin: true,
			Content: []esxisim.Extent{{Offset: 0, Length: 128 << 10, Seed: uint64(len(name))}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: mac}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.10"}})
}

// completed fails the test unless every named migration's record is
// Completed with the source's checksums.
func (e *migrationEnv) completed(t *testing.T, recs map[string]record.Record, files map[string]*esxisim.VMFiles) {
	t.Helper()
	for name, f := range files {
		rec, ok := recs[name]
		if !ok {
			t.Errorf("%s: no migration record", name)
			continue
		}
		if rec.Phase != record.PhaseCompleted {
			t.Errorf("%s: phase %s, want Completed", name, rec.Phase)
			continue
		}
		if len(rec.Disks) != len(f.Disks) {
			t.Errorf("%s: %d disks recorded, want %d", name, len(rec.Disks), len(f.Disks))
			continue
		}
		for i, d := range f.Disks {
			if got, want := rec.Disks[i].SourceSHA256, d.SHA256(); got != want {
				t.Errorf("%s disk %d: source_sha256 %s, want %s", name, i, got, want)
			}
		}
	}
}

// span is when one migration was observed in the host-reading phases.
type span struct {
	name       string
	start, end time.Time
}

// hostSpans returns, per migration, an interval that lies inside the time
// it held a slot of the host's limiter: from its Discovered checkpoint to its
// Acquired checkpoint (both recorded while the slot is held: the engine takes
// it before Discovering and gives it back after recording Acquired), widened
// to cover every dd read of its disks that the simulated host logged (the
// copy runs inside that window too). Two sources, the provider's record and
// the host's own log, so that neither alone decides the answer.
func hostSpans(t *testing.T, recs map[string]record.Record, log []esxisim.LoggedCommand, flats map[string]string) []span {
	t.Helper()
	var out []span
	for name, rec := range recs {
		ts := rec.Timestamps
		if ts.Discovered == nil || ts.Acquired == nil {
			t.Fatalf("%s: record lacks the discovered or acquired timestamp: %+v", name, ts)
		}
		sp := span{name: name, start: *ts.Discovered, end: *ts.Acquired}
		reads := 0
		for _, c := range log {
			if !strings.Contains(c.Command, "'if="+flats[name]+"'") {
				continue
			}
			reads++
			if c.Time.Before(sp.start) {
				sp.start = c.Time
			}
			if c.Time.After(sp.end) {
				sp.end = c.Time
			}
		}
		if reads == 0 {
			t.Fatalf("%s: the host logged no read of %s", name, flats[name])
		}
		out = append(out, sp)
	}
	return out
}

// maxOverlap is the largest number of spans that contain one instant, with
// the instants at which that many overlapped.
func maxOverlap(spans []span) (int, []string) {
	type ev struct {
		at    time.Time
		delta int
		name  string
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s.start, +1, s.name}, ev{s.end, -1, s.name})
	}
	// Ends before starts at the same instant: a slot is given back before
	// the next migration can take it.
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta
	})
	cur, best := 0, 0
	in := map[string]bool{}
	var at []string
	for _, e := range evs {
		cur += e.delta
		in[e.name] = e.delta > 0
		if cur > best {
			best, at = cur, nil
		}
		if cur == best && e.delta > 0 {
			var names []string
			for n, ok := range in {
				if ok {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			at = append(at, e.at.Format("15:04:05.000000")+" "+strings.Join(names, ","))
		}
	}
	return best, at
}
