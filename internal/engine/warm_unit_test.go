package engine

import (
	"strings"
	"testing"

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
