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
