//go:build linux

package clustertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
)

const mib = 1 << 20

// addVM adds a powered-on VM with a dense disk full of data and a thin
// disk with two extents of data among zeros.
func (e *env) addVM(name string, denseMiB int64) *esxisim.VMFiles {
	e.t.Helper()
	_, files, err := e.host.AddVM(esxisim.VMSpec{
		Name: name,
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: denseMiB * mib, Content: []esxisim.Extent{{Offset: 0, Length: denseMiB * mib, Seed: 21}}},
			{CapacityBytes: 24 * mib, Thin: true, Content: []esxisim.Extent{
				{Offset: 1 * mib, Length: 2 * mib, Seed: 22}, {Offset: 17 * mib, Length: 1 * mib, Seed: 23}}},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.9"},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return files
}

// mustComplete runs the migration to Completed with a new engine.
func (e *env) mustComplete(spec engine.Spec) record.Record {
	e.t.Helper()
	rec, err := e.engine().Run(e.runCtx(), spec)
	if err != nil {
		e.t.Fatalf("Run: %v\nsim: %v", err, e.sim.LastError())
	}
	if rec.Phase != record.PhaseCompleted {
		e.t.Fatalf("phase = %s, want Completed", rec.Phase)
	}
	return rec
}

// checkClaimsHoldSources checks that each disk's claim holds exactly its
// source disk, as the record says.
func (e *env) checkClaimsHoldSources(rec record.Record, files *esxisim.VMFiles) {
	e.t.Helper()
	for i, d := range rec.Disks {
		want := files.Disks[i].SHA256()
		if d.SourceSHA256 != want || d.ArtifactSHA256 != want {
			e.t.Errorf("disk %d: recorded copy %s, image %s; source %s", i, d.SourceSHA256, d.ArtifactSHA256, want)
		}
		// The claim's disk.img is the disk, as long as the disk.
		if got, err := convert.FileSHA256(e.sim.ReceivedPath(e.ns, d.DataVolume)); err != nil || got != want {
			e.t.Errorf("disk %d: claim of DataVolume %s holds %s (%v), source %s", i, d.DataVolume, got, err, want)
		}
		if !d.Acquired || !d.Imported {
			e.t.Errorf("disk %d: acquired %v, imported %v", i, d.Acquired, d.Imported)
		}
	}
}

// checkCleanedUp checks that nothing of cluster execution outlives the
// migration but its DataVolumes and VM: no Job of it runs, and its Secret
// with the ESXi credential is gone.
func (e *env) checkCleanedUp(name string) {
	e.t.Helper()
	ctx := e.t.Context()
	jobs, err := e.kube.ListJobs(ctx, e.ns, map[string]string{kube.LabelMigration: name})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, j := range jobs {
		if j.DeletionTimestamp == nil {
			e.t.Errorf("Job %s still exists after Completed", j.Name)
		}
	}
	if _, err := shared.cs.CoreV1().Secrets(e.ns).Get(ctx, clusterjob.SecretName("vmmigration-"+name), metav1.GetOptions{}); !kube.IsNotFound(err) {
		e.t.Errorf("the migration's Secret after Completed: %v, want not found", err)
	}
	claims, err := e.kube.ListPersistentVolumeClaims(ctx, e.ns, map[string]string{kube.LabelMigration: name, clusterjob.LabelComponent: clusterjob.ComponentJournal})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range claims {
		if c.DeletionTimestamp == nil {
			e.t.Errorf("journal claim %s still exists after Completed", c.Name)
		}
	}
}

// checkClaimsHoldDisks checks that each disk's DataVolume asks for
// exactly the disk (no room beside it, which KubeVirt's ExpandDisks would
// show the guest) and, for a Filesystem-mode claim, that the claim holds
// disk.img alone: the journal and the chain's side files were kept in the
// disk's journal claim.
func (e *env) checkClaimsHoldDisks(rec record.Record) {
	e.t.Helper()
	for i, d := range rec.Disks {
		dv, err := e.kube.GetDataVolume(e.t.Context(), e.ns, d.DataVolume)
		if err != nil {
			e.t.Fatal(err)
		}
		q := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
		if q.Value() != (d.SizeBytes+mib-1)/mib*mib || dv.Annotations[engine.AnnotationScratchBytes] != "" {
			e.t.Errorf("disk %d: DataVolume asks for %s with scratch %q; want exactly the disk", i, q.String(), dv.Annotations[engine.AnnotationScratchBytes])
		}
		if m := dv.Spec.Storage.VolumeMode; m != nil && *m == corev1.PersistentVolumeBlock {
			continue
		}
		entries, err := os.ReadDir(filepath.Dir(e.sim.ReceivedPath(e.ns, d.DataVolume)))
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
		}
		if err != nil || len(names) != 1 || names[0] != filepath.Base(e.sim.ReceivedPath(e.ns, d.DataVolume)) {
			e.t.Errorf("disk %d: the claim of DataVolume %s holds %q (%v), want its disk alone", i, d.DataVolume, names, err)
		}
	}
}

// copyInterrupter interrupts the first copy Job of a disk that has copied
// 4 MiB, and notes how many reads the host had logged when the engine gave
// that Job up (its pod ended: every read it made is logged).
type copyInterrupter struct {
	e         *env
	disk      int
	interrupt func(pod string, pid int) error
	pod       atomic.Pointer[string]
	first     atomic.Int64
}

// interruptCopy is a copyInterrupter of disk's copy; its watch goes to
// completeWatching.
func (e *env) interruptCopy(disk int, interrupt func(pod string, pid int) error) *copyInterrupter {
	c := &copyInterrupter{e: e, disk: disk, interrupt: interrupt}
	c.first.Store(-1)
	return c
}

func (c *copyInterrupter) watch(ev engine.Event) {
	if strings.Contains(ev.Message, "is not used again") {
		c.first.CompareAndSwap(-1, int64(len(c.e.host.DDReads())))
	}
	if ev.Kind != engine.EventProgress || ev.Disk != c.disk || !strings.Contains(ev.Message, "copy Job pod") || ev.BytesDone < 4*mib {
		return
	}
	pod := strings.Fields(strings.SplitN(ev.Message, "copy Job pod ", 2)[1])[0]
	pid, ok := shared.runner.Pid(c.e.ns, pod, clusterjob.CopyContainer)
	if !ok || !c.pod.CompareAndSwap(nil, &pod) {
		return
	}
	if err := c.interrupt(pod, pid); err != nil {
		c.e.t.Errorf("interrupting pod %s: %v", pod, err)
	}
}

// check fails the test unless a copy was interrupted and given up, and
// returns how many reads the host had logged by then.
func (c *copyInterrupter) check() int {
	c.e.t.Helper()
	pod := c.pod.Load()
	if pod == nil {
		c.e.t.Fatal("no copy was interrupted")
	}
	c.e.t.Logf("interrupted the copy of pod %s", *pod)
	first := int(c.first.Load())
	if first < 0 {
		c.e.t.Fatal("the engine never said the interrupted Job is not used again")
	}
	return first
}

// completeWatching runs the migration with watch seeing every event, and
// once more if that run stopped short of Completed (a transient stop may
// take one more run, as one more apply).
func (e *env) completeWatching(spec engine.Spec, watch func(engine.Event)) record.Record {
	e.t.Helper()
	e.onEvent.Store(&watch)
	rec, err := e.engine().Run(e.runCtx(), spec)
	e.onEvent.Store(nil)
	if err != nil || rec.Phase != record.PhaseCompleted {
		e.t.Logf("first run: %v", err)
		rec = e.mustComplete(spec)
	}
	return rec
}

// chunksReadAgain counts the chunks of the extent file flat that the host
// served among its first reads (first: how many reads the host had logged
// when the first Job was done with), and returns those of them read again
// since, in MiB. Chunk reads only: a copy also reads the disk's last
// sector to check its size.
func (e *env) chunksReadAgain(first int, flat string, chunk int64) (before int, again []int64) {
	reads := e.host.DDReads()
	read := map[int64]bool{}
	for _, r := range reads[:first] {
		if r.Path == flat && r.Length == chunk {
			read[r.Offset] = true
		}
	}
	for _, r := range reads[first:] {
		if r.Path == flat && r.Length == chunk && read[r.Offset] {
			again = append(again, r.Offset/mib)
		}
	}
	return len(read), again
}

// A cold migration in cluster execution runs every checkpoint with copy
// Jobs that write straight into the DataVolumes' claims: the claims hold
// the source disks, the record has each disk's Job, attempt and checked
// SHA-256, nothing crossed the machine running the engine (no upload, an
// empty work_dir), the source was powered off once, and at Completed the
// Jobs and the credential's Secret are gone.
func TestColdMigrationInCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	files := e.addVM("cx-web", 6)
	spec := e.spec("cx-web", "cx-web")
	rec := e.mustComplete(spec)

	if rec.Execution != engine.ExecutionCluster {
		t.Errorf("execution recorded %q, want %q", rec.Execution, engine.ExecutionCluster)
	}
	e.checkClaimsHoldSources(rec, files)
	for i, d := range rec.Disks {
		if d.CopyAttempt != 1 || d.CopyJob == "" || d.CopyJobUID == "" {
			t.Errorf("disk %d: copy attempt %d, Job %q (UID %q); want attempt 1 with its Job", i, d.CopyAttempt, d.CopyJob, d.CopyJobUID)
		}
		if d.ArtifactFormat != "raw" {
			t.Errorf("disk %d: image format %q, want raw", i, d.ArtifactFormat)
		}
	}
	if rec.Disks[1].ZeroBytes < 20*mib {
		t.Errorf("thin disk: %d zero bytes recorded, want at least 20 MiB", rec.Disks[1].ZeroBytes)
	}
	if n := e.sim.UploadProxyBytes(); n != 0 {
		t.Errorf("%d bytes reached CDI's upload proxy; cluster execution uploads nothing", n)
	}
	if left, _ := os.ReadDir(spec.WorkDir); len(left) != 0 {
		t.Errorf("work_dir holds %d entries; cluster execution stages nothing locally", len(left))
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	if len(e.messages("copies the disk into the claim of DataVolume")) != 2 {
		t.Errorf("events do not name one copy Job per disk: %q", e.messages("copy Job"))
	}
	e.checkClaimsHoldDisks(rec)
	e.checkCleanedUp("cx-web")
}

// A runner killed while the copy Jobs run leaves them running; the next
// run adopts each Job (same name and UID, still attempt 1) and completes,
// without powering the source off again.
func TestRunnerKilledWhileJobsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	files := e.addVM("cx-db", 24)
	// Slow reads keep the Jobs running while the runner dies.
	e.host.SetCommandDelay(150 * time.Millisecond)
	spec := e.spec("cx-db", "cx-db")

	ctx, kill := context.WithCancel(e.runCtx())
	defer kill()
	watch := func(ev engine.Event) {
		// Progress read from a running worker's log: its Job runs.
		if ev.Kind == engine.EventProgress && strings.Contains(ev.Message, "copy Job pod") {
			kill()
		}
	}
	e.onEvent.Store(&watch)
	_, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	if err == nil || !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		t.Fatalf("first run: %v, want it cut off while the Jobs run", err)
	}
	jobs, err := e.kube.ListJobs(t.Context(), e.ns, map[string]string{kube.LabelMigration: "cx-db"})
	if err != nil || len(jobs) == 0 {
		t.Fatalf("Jobs after the runner died: %d, %v; want them running", len(jobs), err)
	}
	uids := map[string]string{}
	for _, j := range jobs {
		uids[j.Name] = string(j.UID)
	}

	e.host.SetCommandDelay(0)
	rec := e.mustComplete(spec)
	e.checkClaimsHoldSources(rec, files)
	for i, d := range rec.Disks {
		if uid, ok := uids[d.CopyJob]; ok && uid != d.CopyJobUID {
			t.Errorf("disk %d: Job %s was made again (UID %s, was %s)", i, d.CopyJob, d.CopyJobUID, uid)
		}
		if d.CopyAttempt != 1 {
			t.Errorf("disk %d: attempt %d, want the first attempt adopted", i, d.CopyAttempt)
		}
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	e.checkCleanedUp("cx-db")
}

// A copy interrupted mid-copy, by its worker SIGKILLed (exit 137) or by
// its pod deleted (as a drain or a person does: the worker gets SIGTERM),
// fails its Job; the engine never runs that Job again but records attempt
// 2, whose Job resumes from the journal in the claim: at most two chunks
// per stream are read again, and the claim ends holding the source.
func TestCopyInterruptedMidCopy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interrupt func(e *env, pod string, pid int) error
	}{
		{"worker killed", func(_ *env, _ string, pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }},
		{"pod deleted", func(e *env, pod string, _ int) error {
			return shared.cs.CoreV1().Pods(e.ns).Delete(context.Background(), pod, metav1.DeleteOptions{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			copyInterrupted(t, tc.interrupt)
		})
	}
}

func copyInterrupted(t *testing.T, interrupt func(e *env, pod string, pid int) error) {
	e := newEnv(t)
	files := e.addVM("cx-app", 24)
	// A host without Python reads one dd per chunk, which the host's
	// command log shows; slow reads keep the Job running until the kill.
	e.host.SetPython("")
	e.host.SetCommandDelay(100 * time.Millisecond)
	spec := e.spec("cx-app", "cx-app")

	ci := e.interruptCopy(0, func(pod string, pid int) error { return interrupt(e, pod, pid) })
	rec := e.completeWatching(spec, ci.watch)
	first := ci.check()
	e.checkClaimsHoldSources(rec, files)
	if got := rec.Disks[0].CopyAttempt; got != 2 {
		t.Errorf("disk 0: attempt %d, want 2 (the interrupted Job is never run again)", got)
	}
	before, again := e.chunksReadAgain(first, files.Disks[0].Flat, spec.CopyChunkSize)
	t.Logf("%d chunks of disk 0 read by the first Job; read again by the second: %v", before, again)
	// Per stream, the chunk being read or the one being recorded, never
	// both (transfer's runStreams): two streams here.
	if len(again) > 2 {
		t.Errorf("chunks %v of disk 0 read again by the second Job, want at most one per stream (2)", again)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
}

// A node lost while its copy Job runs (the machine gone: its containers
// dead, nothing more said to the API server, its Node deleted as a cloud's
// node controller deletes it) fails the Job once the pod garbage collector
// has failed and deleted its pod; the next attempt runs on another node
// and resumes from the journal in the claim. The migration ends Completed
// with the claims equal to the sources and one power-off. The test is not
// parallel: it loses the node the package's other tests share, and
// starts the next one.
func TestNodeLost(t *testing.T) {
	e := newEnv(t)
	files := e.addVM("cx-lost", 24)
	e.host.SetPython("")
	e.host.SetCommandDelay(100 * time.Millisecond)
	spec := e.spec("cx-lost", "cx-lost")

	var lost atomic.Bool
	replaced := make(chan error, 1)
	watch := func(ev engine.Event) {
		if ev.Kind != engine.EventProgress || ev.Disk != 0 || !strings.Contains(ev.Message, "copy Job pod") || ev.BytesDone < 4*mib || !lost.CompareAndSwap(false, true) {
			return
		}
		go func() {
			old := shared.runner
			node := old.NodeName()
			if err := old.Crash(); err != nil {
				replaced <- err
				return
			}
			if err := shared.cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}); err != nil {
				replaced <- err
				return
			}
			r, err := podrun.Start(context.Background(), podrun.Options{Config: e.c.RESTConfig(), Images: shared.images, NodeName: "podrun-node-2"})
			if err == nil {
				shared.runner = r
			}
			replaced <- err
		}()
	}
	e.onEvent.Store(&watch)
	rec, err := e.engine().Run(e.runCtx(), spec)
	e.onEvent.Store(nil)
	if !lost.Load() {
		t.Fatal("no node was lost")
	}
	if err := <-replaced; err != nil {
		t.Fatalf("losing the node: %v", err)
	}
	if err != nil || rec.Phase != record.PhaseCompleted {
		t.Logf("first run: %v", err)
		rec = e.mustComplete(spec)
	}
	e.checkClaimsHoldSources(rec, files)
	if got := rec.Disks[0].CopyAttempt; got != 2 {
		t.Errorf("disk 0: attempt %d, want 2 (the lost node's Job is never run again)", got)
	}
	if len(e.messages("no worker exit to read: its pod was deleted or lost")) == 0 {
		t.Errorf("the lost Job's failure was not read as a lost pod: %q", e.messages("copy Job"))
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
}

// The API server restarted while the copy Jobs run (an upgrade, a crash:
// every client sees connection errors, watches break, the workers keep
// copying) costs at most one more run: the Jobs made before the restart
// are adopted (same names and UIDs, attempt 1), none is made twice, the
// claims hold the sources and the source is powered off once. The test is
// not parallel: the package's other tests share the API server.
func TestAPIServerRestartedWhileJobsRun(t *testing.T) {
	e := newEnv(t)
	files := e.addVM("cx-restart", 24)
	e.host.SetCommandDelay(60 * time.Millisecond)
	spec := e.spec("cx-restart", "cx-restart")

	var restarting atomic.Bool
	restarted := make(chan error, 1)
	uids := map[string]string{}
	watch := func(ev engine.Event) {
		if ev.Kind != engine.EventProgress || !strings.Contains(ev.Message, "copy Job pod") || ev.BytesDone < 4*mib || !restarting.CompareAndSwap(false, true) {
			return
		}
		jobs, err := e.kube.ListJobs(context.Background(), e.ns, map[string]string{kube.LabelMigration: "cx-restart"})
		if err != nil {
			restarted <- err
			return
		}
		for _, j := range jobs {
			uids[j.Name] = string(j.UID)
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadlineOf(t)))
			defer cancel()
			restarted <- e.c.RestartAPIServer(ctx)
		}()
	}
	e.onEvent.Store(&watch)
	rec, err := e.engine().Run(e.runCtx(), spec)
	e.onEvent.Store(nil)
	if !restarting.Load() {
		t.Fatal("the API server was not restarted while the Jobs ran")
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	if err != nil || rec.Phase != record.PhaseCompleted {
		t.Logf("first run: %v", err)
		rec = e.mustComplete(spec)
	}
	e.checkClaimsHoldSources(rec, files)
	if len(uids) == 0 {
		t.Fatal("no copy Job was listed before the restart")
	}
	for i, d := range rec.Disks {
		if d.CopyAttempt != 1 {
			t.Errorf("disk %d: attempt %d, want the Job made before the restart adopted", i, d.CopyAttempt)
		}
		if uid, ok := uids[d.CopyJob]; ok && uid != d.CopyJobUID {
			t.Errorf("disk %d: Job %s was made again (UID %s, was %s)", i, d.CopyJob, d.CopyJobUID, uid)
		}
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	e.checkCleanedUp("cx-restart")
}
