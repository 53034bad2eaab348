package esxi

import "testing"

// workingDir is read from the .vmx and resolved against the .vmx's folder;
// absent, "." or that folder itself mean the deltas are beside the .vmx.
func TestWorkingDir(t *testing.T) {
	cfg, _ := ParseVMX("displayName = \"web\"\nmemSize = \"1024\"\nworkingDir = \"/vmfs/volumes/fast-ssd/web-snaps\"\n")
	if cfg.WorkingDir != "/vmfs/volumes/fast-ssd/web-snaps" {
		t.Errorf("WorkingDir = %q", cfg.WorkingDir)
	}
	if cfg, _ := ParseVMX("displayName = \"web\"\nmemSize = \"1024\"\n"); cfg.WorkingDir != "" {
		t.Errorf("WorkingDir of a .vmx without it = %q", cfg.WorkingDir)
	}
	const vmx = "/vmfs/volumes/datastore1/web/web.vmx"
	for _, tc := range []struct {
		dir, want string
		err       bool
	}{
		{"", "", false},
		{".", "", false},
		{"/vmfs/volumes/datastore1/web/", "", false},
		{"/vmfs/volumes/fast-ssd/web-snaps/", "/vmfs/volumes/fast-ssd/web-snaps", false},
		{"snaps", "/vmfs/volumes/datastore1/web/snaps", false},
		{"/tmp/snaps", "", true},
	} {
		got, err := ResolveWorkingDir(vmx, tc.dir)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ResolveWorkingDir(%q) = %q, %v; want %q (error %v)", tc.dir, got, err, tc.want, tc.err)
		}
	}
}
