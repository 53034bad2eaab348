package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
)

func TestValidateWarm(t *testing.T) {
	base := Spec{Host: "h", VMName: "v", Namespace: "ns", Name: "n", StorageClass: "sc", WorkDir: "/w",
		Transport: Transport{Kind: TransportCDIUpload, UploadProxyURL: "https://proxy"}}
	if s := base.WithDefaults(); s.Mode != ModeCold || s.PrecopyRounds != DefaultPrecopyRounds || s.Validate() != nil {
		t.Fatalf("defaults: mode %q rounds %d: %v", s.Mode, s.PrecopyRounds, s.Validate())
	}
	for _, tc := range []struct {
		mode   string
		rounds int
		field  string
	}{
		{ModeWarm, 0, ""}, // defaulted to 1
		{ModeWarm, 3, ""},
		{ModeWarm, MaxPrecopyRounds, ""},
		{ModeWarm, MaxPrecopyRounds + 1, FieldPrecopyRounds},
		{ModeWarm, -1, FieldPrecopyRounds},
		{ModeCold, 2, FieldPrecopyRounds},
		{"hot", 0, FieldMode},
	} {
		s := base
		s.Mode, s.PrecopyRounds = tc.mode, tc.rounds
		s = s.WithDefaults()
		var fields []string
		for _, p := range FieldProblems(s.Validate()) {
			fields = append(fields, p.Field)
		}
		if got := strings.Join(fields, ","); got != tc.field {
			t.Errorf("mode %q rounds %d: problems on %q, want %q", tc.mode, tc.rounds, got, tc.field)
		}
	}
}

// Snapshot names are unique per migration and round and always within
// what the host accepts.
func TestWarmSnapshotName(t *testing.T) {
	short := Spec{Namespace: "ns", Name: "web"}
	long := Spec{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("w", 63)}
	other := Spec{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("w", 62) + "x"}
	seen := map[string]bool{}
	for _, s := range []Spec{short, long, other} {
		for k := 1; k <= MaxPrecopyRounds; k++ {
			n := s.warmSnapshotName(k)
			if err := esxi.ValidateSnapshotText("name", n, false); err != nil {
				t.Errorf("%q: %v", n, err)
			}
			if seen[n] {
				t.Errorf("%q made twice", n)
			}
			seen[n] = true
		}
	}
	if got := short.warmSnapshotName(2); got != "vmmigration ns/web round 2" {
		t.Errorf("name %q", got)
	}
	if err := esxi.ValidateSnapshotText("description", long.warmSnapshotDescription(), true); err != nil {
		t.Error(err)
	}
}

func TestWarmChecks(t *testing.T) {
	s := Spec{Namespace: "ns", Name: "web", Mode: ModeWarm, PrecopyRounds: 2}
	chain := func(n int, names ...string) []esxi.Snapshot {
		var root []esxi.Snapshot
		for i := n - 1; i >= 0; i-- {
			name := "backup"
			if i < len(names) {
				name = names[i]
			}
			root = []esxi.Snapshot{{Name: name, ID: i + 1, Children: root}}
		}
		return root
	}
	for _, tc := range []struct {
		name         string
		vm           esxi.VM
		snaps, disks bool
	}{
		{"plain", esxi.VM{Name: "v", Disks: []esxi.Disk{{Device: "scsi0:0"}}}, true, true},
		{"30 snapshots fit", esxi.VM{Name: "v", Snapshots: chain(30)}, true, true},
		{"31 do not", esxi.VM{Name: "v", Snapshots: chain(31)}, false, true},
		{"32 do not", esxi.VM{Name: "v", Snapshots: chain(32)}, false, true},
		{"own snapshots from an earlier attempt", esxi.VM{Name: "v", Snapshots: chain(32, append(make([]string, 0), s.warmSnapshotName(1), s.warmSnapshotName(2))...)}, true, true},
		{"independent", esxi.VM{Name: "v", Disks: []esxi.Disk{{Device: "scsi0:1", Independent: true, Mode: "independent-persistent"}}}, true, false},
		{"physical RDM", esxi.VM{Name: "v", Disks: []esxi.Disk{{Device: "scsi0:2", RDM: true, RDMPassthrough: true}}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := s.warmChecks(&tc.vm)
			if len(cs) != 2 || cs[0].ID != CheckWarmSnapshots || cs[1].ID != CheckWarmDisks {
				t.Fatalf("checks %+v", cs)
			}
			if cs[0].Passed != tc.snaps || cs[1].Passed != tc.disks {
				t.Errorf("snapshots passed %v (%s), disks passed %v (%s); want %v, %v", cs[0].Passed, cs[0].Message, cs[1].Passed, cs[1].Message, tc.snaps, tc.disks)
			}
			if CheckField(cs[0].ID) != FieldMode || CheckField(cs[1].ID) != FieldMode {
				t.Error("the checks do not point at mode")
			}
		})
	}
	cold := s
	cold.Mode = ModeCold
	if cs := cold.warmChecks(&esxi.VM{Snapshots: chain(32)}); len(cs) != 0 {
		t.Errorf("a cold migration gets warm checks: %+v", cs)
	}
}

// precopy_stop_bytes is refused when negative, and with mode cold unless
// it is 0 or the default the provider plans for every migration.
func TestValidatePrecopyStopBytes(t *testing.T) {
	base := Spec{Host: "h", VMName: "v", Namespace: "ns", Name: "n", StorageClass: "sc", WorkDir: "/w",
		Transport: Transport{Kind: TransportCDIUpload, UploadProxyURL: "https://proxy"}}
	for _, tc := range []struct {
		mode  string
		stop  int64
		field string
	}{
		{ModeWarm, 0, ""},
		{ModeWarm, 1, ""},
		{ModeWarm, DefaultPrecopyStopBytes, ""},
		{ModeWarm, -1, FieldPrecopyStopBytes},
		{ModeCold, 0, ""},
		{ModeCold, DefaultPrecopyStopBytes, ""},
		{ModeCold, 4096, FieldPrecopyStopBytes},
		{ModeCold, -5, FieldPrecopyStopBytes},
	} {
		s := base
		s.Mode, s.PrecopyStopBytes = tc.mode, tc.stop
		var fields []string
		for _, p := range FieldProblems(s.WithDefaults().Validate()) {
			fields = append(fields, p.Field)
		}
		if got := strings.Join(fields, ","); got != tc.field {
			t.Errorf("mode %q stop %d: problems on %q, want %q", tc.mode, tc.stop, got, tc.field)
		}
	}
}

// The stop decision comes from the second round on, only when rounds
// remain and the round copied at most the limit, and is never taken again.
func TestWarmStopAfter(t *testing.T) {
	vm := &esxi.VM{Disks: []esxi.Disk{
		{Chain: &esxi.DiskChain{Links: make([]esxi.ChainLink, 3)}},
		{Chain: &esxi.DiskChain{Links: make([]esxi.ChainLink, 4)}}, // a snapshot of its own before
		{}, // not in the record
	}}
	for _, tc := range []struct {
		rounds, k int
		limit     int64
		bytes     int64
		stop      bool
	}{
		{4, 1, 100, 10, false}, // the first round copies the disks
		{4, 2, 100, 10, true},
		{4, 2, 100, 100, true},
		{4, 2, 100, 101, false},
		{4, 2, 0, 0, false},    // 0: every round
		{2, 2, 100, 10, false}, // the last round: nothing to stop
	} {
		w := &record.WarmEvidence{Rounds: tc.rounds, StopBytes: &tc.limit}
		st := warmStopAfter(w, tc.k, tc.bytes, vm, 2)
		if (st != nil) != tc.stop {
			t.Errorf("%+v: stop %+v", tc, st)
		}
	}
	if st := warmStopAfter((&record.WarmEvidence{Rounds: 4}), 2, 10, vm, 2); st != nil {
		t.Errorf("a record without the limit (a precopy begun before it existed) stops: %+v", st)
	}
	limit := int64(100)
	w := &record.WarmEvidence{Rounds: 5, StopBytes: &limit}
	st := warmStopAfter(w, 2, 50, vm, 2)
	want := []record.WarmRename{{Disk: 0, From: 4, To: 1}, {Disk: 0, From: 5, To: 2}, {Disk: 1, From: 4, To: 1}, {Disk: 1, From: 5, To: 2}, {Disk: 1, From: 6, To: 3}}
	if st == nil || st.Round != 2 || st.Bytes != 50 || st.Limit != 100 || !slices.Equal(st.Renames, want) {
		t.Fatalf("stop %+v, want renames %+v", st, want)
	}
	w.Stopped = st
	if again := warmStopAfter(w, 3, 500, vm, 2); again != st {
		t.Errorf("a second decision replaced the first: %+v", again)
	}
}

// Moving the copied links down survives a crash after any file was
// renamed: running the recorded moves again from the first not counted
// done leaves every file under its final link, none lost or overwritten.
func TestMoveChainLinkResumes(t *testing.T) {
	moves := []record.WarmRename{{Disk: 0, From: 3, To: 1}, {Disk: 0, From: 4, To: 2}, {Disk: 0, From: 5, To: 3}}
	content := func(link int) map[string]string {
		return map[string]string{
			fmt.Sprintf("disk-0-link-%d-extent-0", link):         fmt.Sprintf("data %d", link),
			fmt.Sprintf("disk-0-link-%d-extent-0.journal", link): fmt.Sprintf("journal %d", link),
			fmt.Sprintf("disk-0-link-%d.source.vmdk", link):      fmt.Sprintf("descriptor %d", link),
		}
	}
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		for _, l := range []int{3, 4, 5} {
			for n, c := range content(l) {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dir
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(names) != 9 {
			t.Errorf("%d files after the moves, want 9: %v", len(names), names)
		}
		for i, m := range moves {
			for n, c := range content(m.From) {
				to := strings.Replace(n, fmt.Sprintf("link-%d", m.From), fmt.Sprintf("link-%d", m.To), 1)
				if b, err := os.ReadFile(filepath.Join(dir, to)); err != nil || string(b) != c {
					t.Errorf("move %d: %s holds %q (%v), want %q", i, to, b, err, c)
				}
			}
		}
	}
	// A crash after move `done` ran but before it was counted: the next
	// run starts again at that move.
	for done := range moves {
		t.Run(fmt.Sprint(done), func(t *testing.T) {
			dir := setup(t)
			for _, m := range moves[:done+1] {
				if err := moveChainLink(dir, m); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range moves[done:] {
				if err := moveChainLink(dir, m); err != nil {
					t.Fatal(err)
				}
			}
			check(t, dir)
		})
	}
}

// The rounds still to take come from the record when there is one (taken:
// an id seen or copied, not removed; none after a stop), else from the
// migration's snapshots in the VM's tree.
func TestWarmRoundsLeft(t *testing.T) {
	s := Spec{Namespace: "ns", Name: "web", Mode: ModeWarm, PrecopyRounds: 4}
	tree := &esxi.VM{Snapshots: []esxi.Snapshot{{Name: "theirs", Children: []esxi.Snapshot{{Name: s.warmSnapshotName(1)}}}}}
	for _, tc := range []struct {
		name        string
		w           *record.WarmEvidence
		left, taken int
	}{
		{"no record, own snapshot in the tree", nil, 3, 1},
		{"record, nothing taken", &record.WarmEvidence{Rounds: 4}, 4, 0},
		{"intent only", &record.WarmEvidence{Rounds: 4, Snapshots: []record.WarmSnapshot{{Round: 1}}}, 4, 0},
		{"two taken", &record.WarmEvidence{Rounds: 4, Snapshots: []record.WarmSnapshot{{Round: 1, ID: 5, Copied: true}, {Round: 2, ID: 6}}}, 2, 2},
		{"stopped after two", &record.WarmEvidence{Rounds: 4, Stopped: &record.WarmStop{Round: 2}, Snapshots: []record.WarmSnapshot{{Round: 1, ID: 5, Copied: true}, {Round: 2, ID: 6, Copied: true}}}, 0, 2},
		{"removed", &record.WarmEvidence{Rounds: 4, Snapshots: []record.WarmSnapshot{{Round: 1, ID: 5, Copied: true, Removed: true}}}, 4, 0},
	} {
		if left, taken := s.warmRoundsLeft(tree, tc.w); left != tc.left || taken != tc.taken {
			t.Errorf("%s: left %d taken %d, want %d %d", tc.name, left, taken, tc.left, tc.taken)
		}
	}
}
