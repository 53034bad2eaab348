//go:build linux

package clustertest

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// warmCapacity is the one disk of a VM of addWarmVM.
const warmCapacity = 24 * mib

// addWarmVM adds a running VM with one thin disk of warmCapacity.
func (e *env) addWarmVM(name, ip string) (int, *esxisim.VMFiles) {
	e.t.Helper()
	id, files, err := e.host.AddVM(esxisim.VMSpec{
		Name: name, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: warmCapacity, Thin: true}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{ip},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return id, files
}

// A running VM migrates warm in cluster execution with two precopy rounds
// while its guest keeps writing: before the first snapshot, while the
// first round's Job copies the base, between the rounds and after the
// last. Each round's Job applies into the claim what the round's snapshot
// froze; after the power-off one more Job applies only the last delta, so
// what crossed the wire with the source off is that delta, never the
// disk. The claim holds the guest's final content, the record has each
// round and the cutover as local execution records them, and afterwards
// the source runs on its base again, holding the same content, with no
// snapshot and no delta left.
//
// Into Block-mode claims the same holds, each round's delta copied into
// the disk's journal claim and applied on the device.
func TestWarmMigrationInCluster(t *testing.T) {
	for _, tc := range []struct{ volumeMode, name, ip string }{
		{"Filesystem", "cx-warm", "10.0.0.7"},
		{"Block", "cx-warmb", "10.0.0.17"},
	} {
		t.Run(tc.volumeMode, func(t *testing.T) {
			t.Parallel()
			warmInCluster(t, tc.name, tc.ip, tc.volumeMode)
		})
	}
}

func warmInCluster(t *testing.T, name, ip, volumeMode string) {
	e := newEnv(t)
	const capacity = warmCapacity
	id, files := e.addWarmVM(name, ip)
	flat, err := os.ReadFile(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	content := append(flat, make([]byte, capacity-len(flat))...)
	node := files.Disks[0].Controller
	write := func(off int64, n int, seed uint64) {
		b := make([]byte, n)
		esxisim.PatternBytes(b, seed, off)
		if err := e.host.GuestWrite(id, node, off, b); err != nil {
			t.Errorf("guest write: %v", err)
			return
		}
		mu.Lock()
		copy(content[off:], b)
		mu.Unlock()
	}
	done := map[string]bool{}
	once := func(k string, f func()) {
		mu.Lock()
		first := !done[k]
		done[k] = true
		mu.Unlock()
		if first {
			f()
		}
	}
	var offBytes int64 = -1
	hook := func(ev engine.Event) {
		switch m := ev.Message; {
		case strings.Contains(m, "precopy round 1 of 2: taking snapshot"):
			once("before", func() { write(64<<10, 8<<10, 1) }) // lands in the base
		case strings.Contains(m, "(attempt 1, UID"):
			once("during", func() { write(3<<20, 64<<10, 2) }) // the first delta, while its Job copies the base
		case strings.Contains(m, "precopy round 1 of 2: copied"):
			once("between", func() { write(64<<10+4096, 4096, 3) })
		case strings.Contains(m, "precopy round 2 of 2: copied"):
			once("after", func() { write(capacity-1000, 1000, 4); write(10<<20, 12<<10, 5) })
		case strings.HasPrefix(m, "powering off source VM"):
			once("off", func() { e.host.ResetStats() })
		case strings.Contains(m, "copy Jobs apply the last"):
			once("cutover", func() {})
		case ev.Phase == "Converting":
			once("converting", func() { offBytes = e.host.Stats().StdoutBytes })
		}
	}
	e.onEvent.Store(&hook)
	spec := e.spec(name, name)
	spec.Mode, spec.PrecopyRounds, spec.VolumeMode = engine.ModeWarm, 2, volumeMode
	rec := e.mustComplete(spec)
	e.onEvent.Store(nil)
	for _, k := range []string{"before", "during", "between", "after", "off", "cutover", "converting"} {
		if !done[k] {
			t.Errorf("the migration never reached the point %q", k)
		}
	}
	sum := diskdigest.Sum(content)
	want := hex.EncodeToString(sum[:])
	d := rec.Disks[0]
	if got, err := convert.FileSHA256(e.sim.ReceivedPath(e.ns, d.DataVolume)); err != nil || got != want {
		t.Errorf("the claim holds %s (%v), the guest's final content is %s", got, err, want)
	}
	if d.SourceSHA256 != want || d.GuestSHA256 != want {
		t.Errorf("recorded source %s, guest %s; want %s", d.SourceSHA256, d.GuestSHA256, want)
	}
	if d.CopyAttempt != 3 {
		t.Errorf("copy attempt %d: want one Job per round and one at cutover", d.CopyAttempt)
	}
	w := rec.Warm
	if w == nil || len(w.Snapshots) != 2 || w.CutoverFiles != 1 || w.CutoverBytes <= 0 || w.CutoverCopied == nil {
		t.Fatalf("warm evidence %+v", w)
	}
	for _, s := range w.Snapshots {
		if !s.Copied || !s.Removed {
			t.Errorf("snapshot %+v", s)
		}
	}
	if w.Snapshots[0].CopiedBytes != capacity || w.Snapshots[1].CopiedBytes <= 0 || w.Snapshots[1].CopiedBytes > capacity/4 {
		t.Errorf("round 1 copied %d bytes (want the base's %d), round 2 %d (want the first delta's few)", w.Snapshots[0].CopiedBytes, capacity, w.Snapshots[1].CopiedBytes)
	}
	if offBytes < 0 || offBytes > w.CutoverBytes+512<<10 {
		t.Errorf("%d bytes read from the host with the source off; the last delta is %d bytes, the disk %d", offBytes, w.CutoverBytes, capacity)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	// The source: no snapshot left, on its base again, which holds the
	// guest's content.
	c, err := e.reg.Client(hostName)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Snapshots(t.Context(), id)
	if err != nil || len(esxi.FindSnapshots(tree, func(esxi.Snapshot) bool { return true })) != 0 {
		t.Errorf("snapshots left on the source: %+v, %v", tree, err)
	}
	if ms, _ := filepath.Glob(filepath.Join(files.LocalDir, name+"-00000*")); len(ms) != 0 {
		t.Errorf("delta files left on the source: %v", ms)
	}
	base, _ := os.ReadFile(files.Disks[0].LocalFlat)
	base = append(base, make([]byte, capacity-len(base))...)
	if s := diskdigest.Sum(base); hex.EncodeToString(s[:]) != want {
		t.Error("the source's base does not hold the guest's content after the snapshots were removed")
	}
	t.Logf("precopy %d + %d bytes; cutover %d bytes; %d bytes from the host with the source off; downtime %s",
		w.Snapshots[0].CopiedBytes, w.Snapshots[1].CopiedBytes, w.CutoverBytes, offBytes, rec.Downtime())
	if n := len(e.messages("keeps the copy's journal and side files beside the claim")); n != 1 {
		t.Errorf("%d journal claims made, want one for the disk", n)
	}
	// Round 1 copied the base as a chain's, with its block hashes: round
	// 2's Job applies its delta over it, verifying the base from the
	// claim's chain state rather than copying or hashing it again.
	round2 := e.messages("applied 1 snapshot delta(s) over the base")
	if len(round2) != 1 {
		t.Fatalf("round 2's Job results: %q", round2)
	}
	if m := chunksSaid.FindStringSubmatch(round2[0]); m == nil || m[2] == "0" {
		t.Errorf("round 2's Job did not build on round 1's copy in the claim: %q", round2[0])
	}
	e.checkClaimsHoldDisks(rec)
	e.checkCleanedUp(name)
}

// chunksSaid reads a precopy Job's result event: chunks copied, and
// verified from what the claim held.
var chunksSaid = regexp.MustCompile(`\((\d+) chunks copied, (\d+) verified from the claim\)`)

// A runner killed while a warm migration's second precopy round runs its
// Job leaves the Job running; the next run adopts it (no third snapshot,
// no second Job of that round), cuts over and completes with one
// power-off, reading nothing of the base again.
func TestWarmRunnerKilledMidPrecopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const capacity = warmCapacity
	id, files := e.addWarmVM("cx-wk", "10.0.0.8")
	node := files.Disks[0].Controller
	spec := e.spec("cx-wk", "cx-wk")
	spec.Mode, spec.PrecopyRounds, spec.PrecopyStopBytes = engine.ModeWarm, 2, 0
	ctx, kill := context.WithCancel(e.runCtx())
	defer kill()
	var once, slow sync.Once
	watch := func(ev engine.Event) {
		switch {
		case strings.Contains(ev.Message, "(attempt 1, UID"):
			once.Do(func() {
				b := make([]byte, 2*mib)
				esxisim.PatternBytes(b, 7, 5*mib)
				if err := e.host.GuestWrite(id, node, 5*mib, b); err != nil {
					t.Errorf("guest write: %v", err)
				}
			})
		case strings.Contains(ev.Message, "precopy round 1 of 2: copied"):
			// Slow reads keep round 2's Job running while the runner dies.
			slow.Do(func() { e.host.SetCommandDelay(150 * time.Millisecond) })
		case ev.Kind == engine.EventProgress && strings.Contains(ev.Message, "copy-2-"):
			kill()
		}
	}
	e.onEvent.Store(&watch)
	_, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	if err == nil || ctx.Err() == nil {
		t.Fatalf("first run: %v, want it cut off while round 2's Job runs", err)
	}
	job, err := e.kube.GetJob(t.Context(), e.ns, "cx-wk-disk-0-copy-2")
	if err != nil {
		t.Fatalf("round 2's Job after the runner died: %v", err)
	}
	e.host.SetCommandDelay(0)
	creates := len(e.commands("snapshot.create"))
	e.host.ResetStats()
	var adopted, recreated bool
	seen := func(ev engine.Event) {
		// A Job made again would be reported with its new UID.
		recreated = recreated || strings.Contains(ev.Message, "(attempt 2, UID")
		adopted = adopted || strings.Contains(ev.Message, "precopy Job "+job.Name+" applied")
	}
	e.onEvent.Store(&seen)
	rec := e.mustComplete(spec)
	e.onEvent.Store(nil)
	if !adopted || recreated {
		t.Errorf("round 2's Job %s (UID %s): adopted %v, made again %v", job.Name, job.UID, adopted, recreated)
	}
	if d := rec.Disks[0]; d.CopyAttempt != 3 || d.SourceSHA256 != d.GuestSHA256 {
		t.Errorf("disk: attempt %d (want 3: two rounds and the cutover), source %s, guest %s", d.CopyAttempt, d.SourceSHA256, d.GuestSHA256)
	}
	if got, err := convert.FileSHA256(e.sim.ReceivedPath(e.ns, rec.Disks[0].DataVolume)); err != nil || got != rec.Disks[0].SourceSHA256 {
		t.Errorf("the claim holds %s (%v), the record %s", got, err, rec.Disks[0].SourceSHA256)
	}
	if n := creates + len(e.commands("snapshot.create")); n != 2 {
		t.Errorf("%d snapshots taken, want 2", n)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
	if n := e.host.Stats().StdoutBytes; n > capacity/2 {
		t.Errorf("the second run read %d bytes from the host: the base (%d bytes) was read again", n, capacity)
	}
	e.checkCleanedUp("cx-wk")
}
