package engine

import (
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"slices"
	"strings"
	"testing"
)

func TestStagingFoldersOnlyUnderRoots(t *testing.T) {
	cases := []struct {
		ns, name string
		roots    []string
		want     []string
	}{
		{"ns1", "web", []string{"/work", "/srv/stage"}, []string{"/work/ns1/web", "/srv/stage/ns1/web"}},
		{"ns1", "web", []string{"", "relative/dir"}, nil},
		{"..", "web", []string{"/work"}, nil},
		{"ns1", "../../etc", []string{"/work"}, nil},
		{"ns1", "a/b", []string{"/work"}, nil},
		{"ns1", "Web", []string{"/work"}, nil},
		{"ns1", "web", []string{"/work", "/work/"}, []string{"/work/ns1/web"}},
	}
	for _, c := range cases {
		if got := stagingFolders(c.ns, c.name, c.roots...); !slices.Equal(got, c.want) {
			t.Errorf("stagingFolders(%q, %q, %q) = %q, want %q", c.ns, c.name, c.roots, got, c.want)
		}
	}
}

func TestCheckRecordPaths(t *testing.T) {
	spec := Spec{Namespace: "ns1", Name: "web", WorkDir: "/work", TargetFormat: "qcow2", Transport: Transport{Kind: TransportCDIUpload}}
	ok := &record.Record{Disks: []record.DiskEvidence{{Index: 0, StagedPath: "/work/ns1/web/disk-0.raw", ArtifactPath: "/work/ns1/web/disk-0.qcow2"}, {Index: 1}}}
	if err := checkRecordPaths(spec, ok); err != nil {
		t.Errorf("derived paths refused: %v", err)
	}
	for _, bad := range []record.DiskEvidence{
		{Index: 0, StagedPath: "/etc/passwd"},
		{Index: 0, ArtifactPath: "/work/ns1/web/../../../etc/shadow"},
		{Index: 3},
	} {
		if err := checkRecordPaths(spec, &record.Record{Disks: []record.DiskEvidence{bad}}); err == nil {
			t.Errorf("%+v accepted", bad)
		} else if c, r := classify(err); c.String() != record.ClassNeedsHuman || r != "RecordPathMismatch" {
			t.Errorf("%+v: class %v reason %s", bad, c, r)
		}
	}
}

func TestStagingTokenFromRecordValidated(t *testing.T) {
	spec := Spec{Namespace: "ns1", Name: "web", WorkDir: "/work", TargetFormat: "raw",
		Transport: Transport{Kind: TransportHTTP, StagingDir: "/srv/stage", StagingURL: "http://h/"}}
	tok, err := newStagingToken()
	if err != nil || !validStagingToken(tok) {
		t.Fatalf("token %q, %v", tok, err)
	}
	good := &record.Record{StagingToken: tok, Disks: []record.DiskEvidence{{Index: 0, ArtifactPath: "/srv/stage/ns1/web/" + tok + "/disk-0.raw"}}}
	if err := checkRecordPaths(spec, good); err != nil {
		t.Errorf("derived path refused: %v", err)
	}
	for _, bad := range []string{"../../../../etc", strings.Repeat("A", 32), tok[:31], tok + "/x"} {
		if err := checkRecordPaths(spec, &record.Record{StagingToken: bad}); err == nil || !strings.Contains(err.Error(), "stagingToken") {
			t.Errorf("token %q: %v", bad, err)
		}
	}
}
