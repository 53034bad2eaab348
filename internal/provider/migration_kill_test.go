package provider_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

var ddRE = regexp.MustCompile(`dd 'if=([^']*)' bs=(\d+) skip=(\d+) count=(\d+)`)

// ddReads returns the byte ranges [start, end) read from path by dd.
func ddReads(cmds []string, path string) [][2]int64 {
	var out [][2]int64
	for _, c := range cmds {
		for _, m := range ddRE.FindAllStringSubmatch(c, -1) {
			if m[1] != path {
				continue
			}
			bs, _ := strconv.ParseInt(m[2], 10, 64)
			skip, _ := strconv.ParseInt(m[3], 10, 64)
			count, _ := strconv.ParseInt(m[4], 10, 64)
			out = append(out, [2]int64{skip * bs, (skip + count) * bs})
		}
	}
	return out
}

// startApply starts `terraform apply` in w, in a process group of its own
// so that Terraform and its provider plugin can be killed together, with
// the output collected.
func startApply(t *testing.T, w *acctest.Workdir) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	tf, err := acctest.TerraformPath()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tf, "apply", "-auto-approve", "-input=false", "-no-color")
	cmd.Dir = w.Dir
	cmd.Env = append(os.Environ(), w.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// killApplyWhen polls reached until the fault point of an apply started
// with startApply (exited receives its Wait) is reached, then kills
// Terraform and its provider plugin at once, and returns the apply's exit
// error. An apply that ends first, or a point not reached within 3 minutes,
// fails the test: it would prove nothing.
func killApplyWhen(t *testing.T, cmd *exec.Cmd, exited <-chan error, out *strings.Builder, reached func() bool) error {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !reached() {
		select {
		case err := <-exited:
			t.Fatalf("the first apply ended (%v) before the fault point; the test proves nothing:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the fault point was not reached within 3 minutes:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return <-exited
}

// TestAccMigrationSurvivesSIGKILL runs the real terraform binary with the
// built provider, kills Terraform and the provider with SIGKILL in the
// middle of the disk copy, and applies again: the migration completes,
// verified chunks are not copied again, nothing is created twice, the
// source is powered off once, and the destination holds the source's bytes.
func TestAccMigrationSurvivesSIGKILL(t *testing.T) {
	e := newMigrationEnv(t)
	const size = 256 * mib // four 64 MiB chunks
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "big", GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Content: []esxisim.Extent{
			{Offset: 0, Length: 8 * mib, Seed: 7}, {Offset: 100 * mib, Length: 8 * mib, Seed: 8}, {Offset: 250 * mib, Length: 4 * mib, Seed: 9},
		}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:01:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning})
	flat := files.Disks[0].Flat

	// One stream, so that the order of the reads tells which chunks had
	// completed at the kill (with several, chunks complete out of order;
	// their resume is transfer's TestCopyParallelResumesAfterCancel).
	provider := strings.Replace(e.providerBlock(), "  esxi_host {\n", "  esxi_host {\n    streams_per_disk = 1\n", 1)
	if provider == e.providerBlock() {
		t.Fatal("no esxi_host block to set streams_per_disk in")
	}
	w := acctest.NewWorkdir(t, acctest.BinaryConfig(provider)+
		e.migration("big", "big", `{ "VM Network" = "pod" }`, `  power_off_policy = "graceful"`))

	// Slow every host command down so that the copy is still running when
	// Terraform is killed.
	e.host.SetCommandDelay(700 * time.Millisecond)
	cmd, out := startApply(t, w)
	deadline := time.Now().Add(3 * time.Minute)
	for len(ddReads(e.host.Commands(), flat)) < 3 {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the copy did not start within 3 minutes:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Terraform and its provider plugin, at once, mid-copy.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	before := ddReads(e.host.Commands(), flat)
	if len(before) >= 8 {
		t.Fatalf("the copy finished before the kill (%d reads); the test proves nothing", len(before))
	}
	e.host.SetCommandDelay(0)

	r := w.Run(context.Background(), []string{"TF_LOG=INFO"}, "apply", "-auto-approve", "-input=false")
	if r.Err != nil {
		t.Fatalf("second apply: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
	}
	// Progress people can watch: phases and per-disk bytes at INFO.
	for _, want := range []string{"starting or resuming migration", "disk 0: ", "bytes (", "Completed"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the INFO log of the second apply lacks %q", want)
		}
	}
	after := ddReads(e.host.Commands(), flat)[len(before):]

	// Nothing verified before the kill was read again: the second run reads
	// at most the chunk in flight at the kill, plus what was never read.
	var readBefore, readAgain int64
	covered := map[int64]bool{}
	for _, rg := range before {
		readBefore += rg[1] - rg[0]
		for o := rg[0]; o < rg[1]; o += mib {
			covered[o] = true
		}
	}
	for _, rg := range after {
		for o := rg[0]; o < rg[1]; o += mib {
			if covered[o] && rg[1]-rg[0] > 512 {
				readAgain += mib
			}
		}
	}
	// One stream: one chunk was in flight.
	if readAgain > 64*mib {
		t.Errorf("%d MiB read again after the restart; at most the chunk in flight (64 MiB) may be", readAgain/mib)
	}
	// Every data read that completed before the kill (all but the one in
	// flight; 512-byte reads are the readability probe) was verified and
	// journaled, so none of it may be read again.
	var completed [][2]int64
	for _, rg := range before[:len(before)-1] {
		if rg[1]-rg[0] > 512 {
			completed = append(completed, rg)
		}
	}
	if len(completed) == 0 {
		t.Fatalf("no chunk completed before the kill (reads %v); the test proves nothing", before)
	}
	for _, done := range completed {
		for _, rg := range after {
			if rg[1]-rg[0] > 512 && rg[0] < done[1] && done[0] < rg[1] {
				t.Errorf("bytes %d-%d were verified before the kill but read again after it (%d-%d)", done[0], done[1], rg[0], rg[1])
			}
		}
	}
	t.Logf("before the kill: %d reads, %d MiB; after: %d reads; re-read %d MiB", len(before), readBefore/mib, len(after), readAgain/mib)

	if n := e.count("power.shutdown"); n != 1 {
		t.Errorf("power.shutdown sent %d times, want once", n)
	}
	dvs, vms := e.ours(t, "big")
	if len(dvs) != 1 || len(vms) != 1 {
		t.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
	}
	got, ok := e.sim.ReceivedSHA256(e.namespace, "big-disk-0")
	if !ok || got != files.Disks[0].SHA256() {
		t.Errorf("destination received %q, want the source's SHA-256 %s", got, files.Disks[0].SHA256())
	}
	show := w.Run(context.Background(), nil, "state", "show", "vmmigration_migration.big")
	if !regexp.MustCompile(`(?m)^\s+phase\s+= "Completed"$`).MatchString(show.Stdout) {
		t.Errorf("state after the second apply:\n%s", show.Stdout)
	}
}
