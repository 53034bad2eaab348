package provider_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// warmKillCase is a warm migration killed with SIGKILL (Terraform and the
// provider together) once the record shows the point reached.
type warmKillCase struct {
	name string
	// reached reports the kill point from the record's warm evidence (and
	// the snapshots the host took).
	reached func(e *migrationEnv, rec record.Record) bool
	// writeWhen, if set, has the guest write while the first apply runs,
	// once the record satisfies it (into the delta of a later round).
	writeWhen func(rec record.Record) bool
	// writeAfterKill has the guest write after the kill, the VM still
	// running.
	writeAfterKill bool
}

// TestAccMigrationWarmSurvivesSIGKILL kills a warm migration through the
// real Terraform CLI during the precopy (round 1's snapshot taken on the
// host but its id not recorded yet; round 1's snapshot recorded, its files
// not all copied) and during the cutover (the source found off for the
// cutover copy), then applies again. Each run completes with exactly
// one snapshot taken per recorded round (no second snapshot of a round),
// all of them removed and the source back on its base disk, one power-off
// command run on the host, one DataVolume and one VM, and the DataVolume
// holding the guest's content as it was at power-off (writes made into
// the snapshot deltas included).
func TestAccMigrationWarmSurvivesSIGKILL(t *testing.T) {
	acctest.PreCheck(t)
	cases := []warmKillCase{
		{
			name: "snapshot",
			reached: func(e *migrationEnv, rec record.Record) bool {
				w := rec.Warm
				return w != nil && len(w.Snapshots) == 1 && w.Snapshots[0].ID == 0 && len(e.host.SnapshotEvents()) == 1
			},
			writeAfterKill: true,
		},
		{
			name: "precopy",
			reached: func(_ *migrationEnv, rec record.Record) bool {
				w := rec.Warm
				return w != nil && len(w.Snapshots) > 0 && w.Snapshots[0].ID != 0 && !w.Snapshots[0].Copied
			},
			writeAfterKill: true,
		},
		{
			name: "cutover",
			writeWhen: func(rec record.Record) bool {
				w := rec.Warm
				return w != nil && len(w.Snapshots) > 1 && w.Snapshots[1].ID != 0
			},
			reached: func(_ *migrationEnv, rec record.Record) bool {
				return rec.Warm != nil && rec.Warm.CutoverStarted != nil
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runWarmKill(t, c) })
	}
}

func runWarmKill(t *testing.T, c warmKillCase) {
	e := newMigrationEnv(t)
	const size = 64 * mib
	name := "warmkill" + c.name
	vmid, files := e.host.AddVM(t, esxisim.VMSpec{Name: name, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: []esxisim.Extent{
			{Offset: 0, Length: 4 * mib, Seed: 21}, {Offset: 40 * mib, Length: 2 * mib, Seed: 22}, {Offset: size - mib, Length: mib, Seed: 23},
		}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:00:41:01"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"192.0.2.41"}})
	flat, err := os.ReadFile(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	guest := append(flat, make([]byte, size-int64(len(flat)))...)
	write := func(off int64, n int, seed uint64) {
		b := make([]byte, n)
		esxisim.PatternBytes(b, seed, off)
		if err := e.host.GuestWrite(vmid, "scsi0:0", off, b); err != nil {
			t.Fatalf("guest write: %v", err)
		}
		copy(guest[off:], b)
	}

	w := acctest.NewWorkdir(t, acctest.BinaryConfig(e.providerBlock())+
		e.migrationWithRetries(name, name, `{ "VM Network" = "pod" }`, 5, `
  mode             = "warm"
  precopy_rounds   = 2
  power_off_policy = "graceful"
  shutdown_timeout = "10s"`))
	readRecord := func() (record.Record, bool) {
		if !e.cluster.HasRecord(t, e.namespace, name) {
			return record.Record{}, false
		}
		return e.cluster.Record(t, e.namespace, name).Record, true
	}

	// Slow host commands, so that the kill lands inside the phase.
	e.host.SetCommandDelay(250 * time.Millisecond)
	start := time.Now()
	cmd, out := startApply(t, w)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wrote := c.writeWhen == nil
	killApplyWhen(t, cmd, exited, out, func() bool {
		rec, ok := readRecord()
		if ok && !wrote && c.writeWhen(rec) {
			// The guest changes a block of the base and a new one, into
			// the delta that is copied at cutover.
			write(1*mib+4096, 64<<10, 31)
			write(20*mib, 128<<10, 32)
			wrote = true
			if r, _ := readRecord(); r.PowerOff != nil {
				t.Logf("the guest wrote after the power-off was decided (the host still took the writes)")
			}
		}
		return ok && wrote && c.reached(e, rec)
	})
	killedAt := time.Since(start)
	atKill, _ := readRecord()
	if atKill.Phase == record.PhaseCompleted {
		t.Fatalf("the migration completed before the kill; the test proves nothing")
	}
	if !c.reached(e, atKill) {
		t.Fatalf("the record at the kill no longer shows the kill point: %+v", atKill.Warm)
	}
	e.host.SetCommandDelay(0)
	e.cluster.ExpireLease(t, e.namespace, name)
	if c.writeAfterKill {
		// The source still runs: it writes into round 1's delta.
		write(2*mib, 96<<10, 33)
		write(30*mib, 64<<10, 34)
	}

	again := time.Now()
	r := w.Run(context.Background(), nil, "apply", "-auto-approve", "-input=false")
	if r.Err != nil {
		t.Fatalf("the apply after the kill: %v\n%s\n%s\nfirst apply:\n%s", r.Err, r.Stdout, r.Stderr, out.String())
	}
	t.Logf("killed after %s in phase %s (warm %s); the second apply took %s", killedAt.Round(time.Millisecond), atKill.Phase, warmSummary(atKill.Warm), time.Since(again).Round(time.Millisecond))

	rec, _ := readRecord()
	if rec.Phase != record.PhaseCompleted {
		t.Errorf("phase %s, want Completed", rec.Phase)
	}
	if rec.Warm == nil || len(rec.Warm.Snapshots) != 2 {
		t.Fatalf("warm evidence %+v, want two rounds' snapshots", rec.Warm)
	}
	// Exactly one snapshot per recorded round, each removed by its id.
	var created, removed []string
	for _, ev := range e.host.SnapshotEvents() {
		if ev.VMID != vmid {
			continue
		}
		if ev.Op == "create" {
			created = append(created, ev.Name)
		} else {
			removed = append(removed, ev.ID)
		}
	}
	var wantNames, wantIDs []string
	for _, s := range rec.Warm.Snapshots {
		wantNames = append(wantNames, s.Name)
		wantIDs = append(wantIDs, strconv.Itoa(s.ID))
		if !s.Removed || !s.Copied {
			t.Errorf("round %d: copied %v, removed %v; want both", s.Round, s.Copied, s.Removed)
		}
	}
	if !slices.Equal(created, wantNames) {
		t.Errorf("snapshots taken on the host %q, want the recorded rounds' %q, once each", created, wantNames)
	}
	if !slices.Equal(removed, wantIDs) {
		t.Errorf("snapshots removed on the host (ids) %q, want the recorded %q, once each", removed, wantIDs)
	}
	vmx, err := os.ReadFile(filepath.Join(files.LocalDir, name+".vmx"))
	if err != nil || !strings.Contains(string(vmx), fmt.Sprintf(`fileName = "%s.vmdk"`, name)) {
		t.Errorf("the source does not run on its base again (%v):\n%s", err, vmx)
	}
	if ms, _ := filepath.Glob(filepath.Join(files.LocalDir, name+"-00000*")); len(ms) != 0 {
		t.Errorf("delta files left on the source: %v", ms)
	}
	if n := e.host.Stats().PowerCommands; n != 1 {
		t.Errorf("%d power-off commands ran on the host, want exactly one", n)
	}
	dvs, vms := e.ours(t, name)
	if len(dvs) != 1 || len(vms) != 1 {
		t.Errorf("DataVolumes %v, VMs %v: want exactly one of each", dvs, vms)
	}
	sum := diskdigest.Sum(guest)
	want := hex.EncodeToString(sum[:])
	if want == files.Disks[0].SHA256() {
		t.Fatalf("the guest's writes did not change the disk; the test proves nothing")
	}
	if got, ok := e.sim.ReceivedSHA256(e.namespace, name+"-disk-0"); !ok || got != want {
		t.Errorf("the DataVolume received %q (%v), want the guest's final content %s", got, ok, want)
	}
	if rec.Disks[0].GuestSHA256 != want {
		t.Errorf("recorded guest-visible SHA-256 %s, want %s", rec.Disks[0].GuestSHA256, want)
	}
}

func warmSummary(w *record.WarmEvidence) string {
	if w == nil {
		return "none"
	}
	var parts []string
	for _, s := range w.Snapshots {
		parts = append(parts, fmt.Sprintf("round %d id %d copied %v", s.Round, s.ID, s.Copied))
	}
	if w.CutoverStarted != nil {
		parts = append(parts, "cutover started")
	}
	return strings.Join(parts, ", ")
}
