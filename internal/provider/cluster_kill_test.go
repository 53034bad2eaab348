package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// TestAccClusterWaveSurvivesSIGKILL kills Terraform and its provider
// plugin with SIGKILL in the middle of a wave of two migrations in cluster
// execution, while their copy Jobs run, and applies again: the Jobs copied
// on without a runner and the second apply adopts them (attempt 1, the
// same UIDs), so no chunk of a source disk is read twice, each source is
// powered off once, nothing is created twice, and each claim holds its
// source disk.
func TestAccClusterWaveSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	acctest.PreCheck(t)
	worker, err := testcluster.WorkerBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, ns, sim := jobsWorld(t, "jobs-kill", worker)
	host := acctest.NewESXi(t, esxisim.Options{ShutdownDelay: 300 * time.Millisecond})
	// Without Python the workers read one dd per 64 MiB chunk, which the
	// host's command log shows.
	host.SetPython("")
	const dense = 256 * mib // four chunks
	vms := []string{"kill-a", "kill-b"}
	files := map[string]*esxisim.VMFiles{}
	for i, name := range vms {
		_, f := host.AddVM(t, esxisim.VMSpec{Name: name, GuestOS: "rhel9-64",
			Disks: []esxisim.DiskSpec{
				{CapacityBytes: dense, Content: []esxisim.Extent{{Offset: 0, Length: dense, Seed: uint64(40 + i)}}},
				{CapacityBytes: 12 * mib, Thin: true, Controller: "scsi0:1", Content: []esxisim.Extent{{Offset: 5 * mib, Length: mib, Seed: uint64(50 + i)}}},
			},
			NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
			Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.40"}})
		files[name] = f
	}

	// Room for both migrations' copy Jobs at once.
	hostBlock := strings.Replace(host.HostBlock("esxi-a"), "  esxi_host {\n", "  esxi_host {\n    max_concurrent_migrations = 4\n", 1)
	cfg := acctest.BinaryConfig(fmt.Sprintf("  work_dir = %q\n  worker_image = %q\n", t.TempDir(), testWorkerImage)+
		hostBlock+c.KubernetesBlock(t)) + fmt.Sprintf(`
resource "vmmigration_migration" "wave" {
  for_each = toset(%s)
  source = {
    host    = "esxi-a"
    vm_name = each.key
  }
  destination = {
    namespace     = %q
    name          = each.key
    storage_class = "claims"
    network_map   = { "VM Network" = "pod" }
  }
  conversion       = "none"
  execution        = "cluster"
  power_off_policy = "graceful"
  retry = {
    attempts        = 3
    initial_backoff = "200ms"
    max_backoff     = "1s"
  }
}
`, hcl(vms), ns)
	w := acctest.NewWorkdir(t, cfg)

	chunkReads := func(name string) map[int64]int {
		n := map[int64]int{}
		for _, r := range host.DDReads() {
			if r.Path == files[name].Disks[0].Flat && r.Length == 64*mib {
				n[r.Offset]++
			}
		}
		return n
	}
	cmd, out := startApply(t, w)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	slowed := false
	_ = killApplyWhen(t, cmd, exited, out, func() bool {
		for _, name := range vms {
			if !c.HasRecord(t, ns, name) {
				return false
			}
			if d := c.Record(t, ns, name).Record.Disks; len(d) == 0 || d[0].CopyJob == "" {
				return false
			} else if !slowed {
				// A copy Job is recorded before it is created: from now
				// on, slow reads keep the Jobs copying while Terraform is
				// dead (earlier, they would slow every command of the
				// discovery and the power-off).
				host.SetCommandDelay(time.Second)
				slowed = true
			}
		}
		for _, name := range vms {
			if len(chunkReads(name)) == 0 {
				return false
			}
		}
		return true
	})
	uids := map[string]string{}
	running := 0
	for _, j := range c.Jobs(t, ns) {
		uids[j.Name] = string(j.UID)
		if j.Status.Succeeded == 0 && j.Status.Failed == 0 {
			running++
		}
	}
	if running == 0 {
		t.Fatalf("every copy Job had ended at the kill; the test proves nothing:\n%s", out.String())
	}
	t.Logf("killed with %d of %d Jobs running", running, len(uids))
	host.SetCommandDelay(0)

	r := w.Run(context.Background(), nil, "apply", "-auto-approve", "-input=false")
	if r.Err != nil {
		t.Fatalf("second apply: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	for _, name := range vms {
		rec := c.Record(t, ns, name).Record
		if rec.Phase != "Completed" {
			t.Errorf("%s: phase %s", name, rec.Phase)
		}
		for i, d := range rec.Disks {
			if d.CopyAttempt != 1 {
				t.Errorf("%s disk %d: attempt %d, want the Job of the killed apply adopted", name, i, d.CopyAttempt)
			}
			if uid, ok := uids[d.CopyJob]; ok && uid != d.CopyJobUID {
				t.Errorf("%s disk %d: Job %s made again (UID %s, was %s)", name, i, d.CopyJob, d.CopyJobUID, uid)
			}
			if got := fileSHA256(t, sim.ReceivedPath(ns, d.DataVolume)); got != files[name].Disks[i].SHA256() {
				t.Errorf("%s disk %d: claim holds %s, source %s", name, i, got, files[name].Disks[i].SHA256())
			}
		}
		reads := chunkReads(name)
		if len(reads) != dense/(64*mib) {
			t.Errorf("%s: chunks read %v, want each of the %d chunks", name, reads, dense/(64*mib))
		}
		for off, n := range reads {
			if n != 1 {
				t.Errorf("%s: the chunk at %d MiB was read %d times; the adopted Jobs read each once", name, off/mib, n)
			}
		}
	}
	if n := strings.Count(strings.Join(host.Commands(), "\n"), "power.shutdown"); n != len(vms) {
		t.Errorf("power.shutdown sent %d times, want once per VM (%d)", n, len(vms))
	}
	show := w.Run(context.Background(), nil, "state", "list")
	if got := regexp.MustCompile(`(?m)^vmmigration_migration\.wave\[`).FindAllString(show.Stdout, -1); len(got) != len(vms) {
		t.Errorf("state lists %q", show.Stdout)
	}
}

// hcl is a list of strings in HCL.
func hcl(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
