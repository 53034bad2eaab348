package preflight

import (
	"fmt"
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

// The optional part of a need never blocks; the message says whether it
// fits, with its bytes, and names the folder and the required bytes.
func TestWorkDirSpaceOptional(t *testing.T) {
	dir := t.TempDir()
	fs, err := StatFree(dir)
	if err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "ns", "vm")
	cases := []struct {
		req, opt int64
		passed   bool
		want     []string
	}{
		{1 << 20, 2 << 20, true, []string{"1 MiB (1048576 bytes) in " + folder + ": the staged copy", "and for the optional 2 MiB (2097152 bytes) more for the upload copy"}},
		{1 << 20, fs.Avail, true, []string{"but not for the optional", fmt.Sprintf("(%d bytes) more for the upload copy", fs.Avail)}},
		{fs.Avail + 1<<40, 1, false, []string{"Free space on that file system", fmt.Sprintf("%d bytes) in %s", fs.Avail+1<<40, folder)}},
		{0, 1 << 20, true, []string{"and for the optional 1 MiB"}},
	}
	for _, c := range cases {
		got := WorkDirSpaceFor(dir, WorkDirNeed{Folder: folder, Required: c.req, Detail: "the staged copy", Optional: c.opt, OptionalDetail: "for the upload copy"})
		ok := got.ID == CheckWorkDirSpace && got.Severity == Blocker && got.Passed == c.passed && strings.Contains(got.Message, dir)
		for _, w := range c.want {
			ok = ok && strings.Contains(got.Message, w)
		}
		if !ok {
			t.Errorf("WorkDirSpaceFor(%d, %d) = %+v, want %q", c.req, c.opt, got, c.want)
		}
	}
}
