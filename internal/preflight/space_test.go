package preflight

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestWorkDirSpace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "made", "yet")
	fs, err := StatFree(dir)
	if err != nil || fs.Existing != filepath.Dir(filepath.Dir(filepath.Dir(dir))) || fs.Avail <= 0 {
		t.Fatalf("StatFree = %+v, %v", fs, err)
	}
	cases := []struct {
		need   int64
		passed bool
		want   string
	}{
		{0, true, "Nothing more needs to be written"},
		{1 << 20, true, "has room for the 1 MiB"},
		{fs.Avail + 1<<40, false, "Free space on that file system or set work_dir to a larger one."},
	}
	for _, c := range cases {
		got := WorkDirSpace(dir, c.need)
		if got.ID != CheckWorkDirSpace || got.Severity != Blocker || got.Passed != c.passed || !strings.Contains(got.Message, c.want) || !strings.Contains(got.Message, dir) {
			t.Errorf("WorkDirSpace(%d) = %+v", c.need, got)
		}
	}
	if got := WorkDirSpace("relative", 1); got.Passed {
		t.Errorf("a relative work_dir passed: %+v", got)
	}
}
