//go:build linux

package convertjob_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob/convertjobtest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/loopdev"
)

const (
	mib      = 1 << 20
	diskSize = 4 * mib
)

// claims are a VM's disks in their claims, with their content before the
// conversion.
type claims struct {
	spec   convertjob.Spec
	before [][]byte
}

func newClaims(t *testing.T, n int) *claims {
	t.Helper()
	c := &claims{spec: convertjob.Spec{Disks: convertjobtest.Claims(t, n, diskSize, 7), StallSeconds: 60}}
	for _, d := range c.spec.Disks {
		c.before = append(c.before, readFile(t, d.Path))
	}
	return c
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sha256Hex is the disk digest of b, as results and records hold it.
func sha256Hex(b []byte) string { return diskdigest.Bytes(b) }

// run runs the conversion and returns its result and its stdout lines.
func run(t *testing.T, ctx context.Context, s convertjob.Spec) (convertjob.Result, []convertjob.Line) {
	t.Helper()
	var out bytes.Buffer
	res := convertjob.Run(ctx, s, &out)
	var lines []convertjob.Line
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l convertjob.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if n := len(lines); n == 0 || lines[n-1].Event != convertjob.EventResult || lines[n-1].Result == nil {
		t.Fatalf("stdout does not end with the result: %+v", lines)
	}
	if got, _ := json.Marshal(*lines[len(lines)-1].Result); !bytes.Equal(got, mustJSON(t, res)) {
		t.Errorf("result line %s, Run returned %s", got, mustJSON(t, res))
	}
	return res, lines
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func stages(lines []convertjob.Line) []string {
	var out []string
	for _, l := range lines {
		if l.Event == convertjob.EventStage {
			out = append(out, l.Stage)
		}
	}
	return out
}

func readState(t *testing.T, s convertjob.Spec) convertjob.State {
	t.Helper()
	var st convertjob.State
	if err := json.Unmarshal(readFile(t, s.StatePath()), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// folder lists a claim's files.
func folder(t *testing.T, d convertjob.Disk) []string {
	t.Helper()
	return dirNames(t, filepath.Dir(d.Path))
}

// assertConverted checks that each image holds exactly the stand-in's
// conversion of its content before, that res reports the images' own
// hashes, and that each claim holds its image alone, the first also the
// state (done).
func (c *claims) assertConverted(t *testing.T, res convertjob.Result) {
	t.Helper()
	if !res.OK || len(res.Disks) != len(c.spec.Disks) {
		t.Fatalf("result %+v, want OK with %d images", res, len(c.spec.Disks))
	}
	for i, d := range c.spec.Disks {
		got := readFile(t, d.Path)
		want := convertjobtest.Apply(c.before[i], i)
		if !bytes.Equal(got, want) {
			off, _ := convertjobtest.Written(i)
			t.Errorf("disk %d: the image is not its content before with the conversion's write at %d (first difference at %d)", i, off, firstDiff(got, want))
		}
		if res.Disks[i] != (convertjob.Checked{SHA256: sha256Hex(got), Bytes: diskSize}) {
			t.Errorf("disk %d: result %+v, the image hashes to %s", i, res.Disks[i], sha256Hex(got))
		}
		want1 := []string{convertjob.ImageName}
		if i == 0 {
			want1 = []string{convertjob.StateFile, convertjob.ImageName}
		}
		if got := folder(t, d); !slices.Equal(got, want1) {
			t.Errorf("claim %d holds %q, want %q", i, got, want1)
		}
	}
	if st := readState(t, c.spec); st.Phase != convertjob.PhaseDone || !slices.Equal(st.Disks, res.Disks) {
		t.Errorf("state %+v, want done with the result's images", st)
	}
}

// assertUntouched checks that the images are as they were and that
// nothing else is left in the claims.
func (c *claims) assertUntouched(t *testing.T) {
	t.Helper()
	for i, d := range c.spec.Disks {
		if !bytes.Equal(readFile(t, d.Path), c.before[i]) {
			t.Errorf("disk %d: the image changed", i)
		}
		if got := folder(t, d); !slices.Equal(got, []string{convertjob.ImageName}) {
			t.Errorf("claim %d holds %q, want only its image", i, got)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The guest on one disk, or two, is converted on overlays whose backing
// file is named relative to them, and only the conversion's writes reach
// the images; a second run answers from the state without converting
// again, and removes overlays a run stopped before removing them.
func TestConvert(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d disks", n), func(t *testing.T) {
			fake := convertjobtest.Install(t, convertjobtest.Options{})
			c := newClaims(t, n)
			res, lines := run(t, t.Context(), c.spec)
			c.assertConverted(t, res)
			if res.Reused {
				t.Error("a first conversion says it reused an earlier one")
			}
			want := []string{convertjob.StageOverlays, convertjob.StageConverting, convertjob.StageCommitting, convertjob.StageHashing}
			if got := stages(lines); !slices.Equal(got, want) {
				t.Errorf("stages %q, want %q", got, want)
			}
			ev := res.Evidence
			if ev == nil || ev.Tool != "virt-v2v-in-place" || ev.Version != "2.2.0" || ev.Converted != convertjobtest.Converted ||
				ev.OS.Distro != "debian" || ev.OS.Firmware != "bios" || ev.Accelerator == "" ||
				!slices.Equal(ev.Drivers, []string{"This guest has virtio drivers installed."}) || len(ev.Warnings) != 1 {
				t.Errorf("evidence %+v", ev)
			}
			if got := fake.Backings(t); !slices.Equal(got, slices.Repeat([]string{convertjob.ImageName}, n)) {
				t.Errorf("the overlays' backing files %q, want %q each", got, convertjob.ImageName)
			}

			// A run stopped after recording done, before removing an overlay.
			stray := convertjob.Overlay(c.spec.Disks[n-1].Path)
			if err := os.WriteFile(stray, []byte("left over"), 0o600); err != nil {
				t.Fatal(err)
			}
			again, lines := run(t, t.Context(), c.spec)
			if !again.Reused || !slices.Equal(again.Disks, res.Disks) || !reflect.DeepEqual(again.Evidence, res.Evidence) {
				t.Errorf("second run: %+v, want the first's result, reused", again)
			}
			if len(lines) != 1 {
				t.Errorf("second run printed %+v, want only its result", lines)
			}
			if runs := fake.Runs(t); runs != 1 {
				t.Errorf("virt-v2v-in-place ran %d times, want 1", runs)
			}
			c.assertConverted(t, again)
		})
	}
}

// A conversion that fails leaves the images as they were and no overlay,
// and says why in local execution's terms.
func TestConversionFailureLeavesImages(t *testing.T) {
	tests := []struct {
		name        string
		opts        convertjobtest.Options
		stall       int
		class       string
		reason      string
		errContains string
	}{
		{"virt-v2v refuses the guest", convertjobtest.Options{Then: `echo "virt-v2v-in-place: error: inspection could not detect the source guest" >&2; exit 1`},
			0, "needs-human", convertjob.ReasonFailed, "could not detect the source guest"},
		{"virt-v2v converts nothing", convertjobtest.Options{Then: `exit 0`},
			0, "needs-human", convertjob.ReasonFailed, "without converting"},
		{"virt-v2v stalls", convertjobtest.Options{Then: `sleep 60`},
			1, "transient", convertjob.ReasonStalled, "printed nothing"},
		{"Windows without virtio-win", convertjobtest.Options{Windows: true},
			0, "needs-human", convertjob.ReasonNoVirtioWin, "virtio-win"},
		{"nbdkit without its file plugin", convertjobtest.Options{Tools: map[string]string{"nbdkit": `[ "$1" = --version ] && echo "nbdkit 1.32.5" && exit 0; exit 1`}},
			0, "needs-human", convertjob.ReasonToolsMissing, "nbdkit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := convertjobtest.Install(t, tt.opts)
			t.Setenv("VIRTIO_WIN", filepath.Join(t.TempDir(), "no-virtio-win"))
			c := newClaims(t, 2)
			c.spec.StallSeconds = tt.stall
			res, _ := run(t, t.Context(), c.spec)
			if res.OK || res.Class != tt.class || res.Reason != tt.reason || !strings.Contains(res.Error, tt.errContains) {
				t.Errorf("result %+v, want %s %s mentioning %q", res, tt.class, tt.reason, tt.errContains)
			}
			c.assertUntouched(t)
			if tt.reason == convertjob.ReasonFailed && fake.Runs(t) != 1 {
				t.Errorf("virt-v2v-in-place ran %d times", fake.Runs(t))
			}
		})
	}
}

// A conversion killed while virt-v2v writes (a signal stops ctx) leaves
// the images as they were; so does one killed outright, whose overlays
// remain. The next run converts from the images.
func TestKilledConversionStartsAgain(t *testing.T) {
	t.Run("signal", func(t *testing.T) {
		fake := convertjobtest.Install(t, convertjobtest.Options{Then: "sleep 600"})
		c := newClaims(t, 2)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			if fake.WaitWritten(ctx) == nil {
				cancel()
			}
		}()
		res, _ := run(t, ctx, c.spec)
		if res.OK || res.Class != "interrupted" || res.Reason != convertjob.ReasonInterrupted || res.ExitCode() != copyjob.ExitInterrupted {
			t.Fatalf("result %+v, want interrupted", res)
		}
		c.assertUntouched(t)

		convertjobtest.Install(t, convertjobtest.Options{})
		res, _ = run(t, t.Context(), c.spec)
		c.assertConverted(t, res)
	})
	t.Run("killed outright", func(t *testing.T) {
		convertjobtest.Install(t, convertjobtest.Options{})
		c := newClaims(t, 2)
		// What a worker killed mid-conversion leaves: overlays holding
		// writes, no state.
		for _, d := range c.spec.Disks {
			qemu(t, filepath.Dir(d.Path), "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", convertjob.ImageName, convertjob.Overlay(d.Path))
			qemu(t, "", "qemu-io", "-f", "qcow2", "-c", "write -P 0xee 0 64k", convertjob.Overlay(d.Path))
		}
		res, _ := run(t, t.Context(), c.spec)
		c.assertConverted(t, res)
	})
}

func qemu(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v: %s", name, args, err, out)
	}
}

// crashAfterFirstCommit makes the next run stop after it committed disk
// 0, as a crash would, with disk 0's image as if nothing of the commit
// had reached it (a torn write lost with the page cache). It checks that
// the state said committing before the image was written.
func crashAfterFirstCommit(t *testing.T, c *claims) {
	t.Helper()
	convertjob.SetAfterCommit(t, func(disk int) error {
		if st := readState(t, c.spec); st.Phase != convertjob.PhaseCommitting || st.Evidence.Converted == "" {
			t.Errorf("disk %d committed with the state %+v, want committing with the evidence", disk, st)
		}
		if disk != 0 {
			t.Fatalf("the run went on after disk 0")
		}
		if err := os.WriteFile(c.spec.Disks[0].Path, c.before[0], 0o600); err != nil {
			t.Fatal(err)
		}
		return errors.New("crash")
	})
}

// A commit cut short after the first image is made again, from overlays
// the commit left intact, with the claims mounted elsewhere this time:
// the images end as an uninterrupted conversion leaves them, and
// virt-v2v does not run again.
func TestCommitCutShortIsMadeAgain(t *testing.T) {
	fake := convertjobtest.Install(t, convertjobtest.Options{})
	whole := newClaims(t, 2)
	want, _ := run(t, t.Context(), whole.spec)
	whole.assertConverted(t, want)

	c := newClaims(t, 2)
	crashAfterFirstCommit(t, c)
	res, _ := run(t, t.Context(), c.spec)
	if res.OK {
		t.Fatalf("result %+v, want the crash", res)
	}
	convertjob.SetAfterCommit(t, nil)
	for i, d := range c.spec.Disks {
		if _, err := os.Stat(convertjob.Overlay(d.Path)); err != nil {
			t.Errorf("overlay %d after the crash: %v", i, err)
		}
	}

	// The claims mounted at another place.
	root := filepath.Dir(filepath.Dir(c.spec.Disks[0].Path))
	moved := root + "-moved"
	if err := os.Rename(root, moved); err != nil {
		t.Fatal(err)
	}
	for i := range c.spec.Disks {
		c.spec.Disks[i].Path = filepath.Join(moved, strings.TrimPrefix(c.spec.Disks[i].Path, root))
	}
	res, lines := run(t, t.Context(), c.spec)
	c.assertConverted(t, res)
	if !slices.Equal(res.Disks, want.Disks) || res.Reused {
		t.Errorf("result %+v, an uninterrupted conversion's %+v", res, want)
	}
	if got := stages(lines); !slices.Equal(got, []string{convertjob.StageCommitting, convertjob.StageHashing}) {
		t.Errorf("stages %q, want committing and hashing only", got)
	}
	if runs := fake.Runs(t); runs != 2 {
		t.Errorf("virt-v2v-in-place ran %d times for two conversions", runs)
	}
}

// A conversion found committing whose overlay is gone cannot finish: it
// needs the disks copied again.
func TestOverlayLostWhileCommitting(t *testing.T) {
	convertjobtest.Install(t, convertjobtest.Options{})
	c := newClaims(t, 2)
	crashAfterFirstCommit(t, c)
	if res, _ := run(t, t.Context(), c.spec); res.OK {
		t.Fatalf("result %+v, want the crash", res)
	}
	convertjob.SetAfterCommit(t, nil)
	if err := os.Remove(convertjob.Overlay(c.spec.Disks[1].Path)); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, c.spec.Disks[1].Path)
	res, _ := run(t, t.Context(), c.spec)
	if res.OK || res.Class != "needs-human" || res.Reason != convertjob.ReasonOverlaysLost ||
		!strings.Contains(res.Error, "copied again") || res.ExitCode() != copyjob.ExitNeedsHuman {
		t.Errorf("result %+v, want needs-human %s", res, convertjob.ReasonOverlaysLost)
	}
	if !bytes.Equal(readFile(t, c.spec.Disks[1].Path), before) {
		t.Error("disk 1 was written")
	}
	if st := readState(t, c.spec); st.Phase != convertjob.PhaseCommitting {
		t.Errorf("state %+v, want still committing", st)
	}
}

// A spec naming something other than claims' images, an image that is
// not what the spec says, or a state that cannot be trusted stops the
// conversion before anything is written.
func TestRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, s *convertjob.Spec)
		class  string
		reason string
	}{
		{"relative path", func(t *testing.T, s *convertjob.Spec) { s.Disks[0].Path = "0/disk.img" },
			"permanent", convertjob.ReasonBadSpec},
		{"not disk.img", func(t *testing.T, s *convertjob.Spec) { s.Disks[1].Path = filepath.Dir(s.Disks[1].Path) + "/other.img" },
			"permanent", convertjob.ReasonBadSpec},
		{"no disks", func(t *testing.T, s *convertjob.Spec) { s.Disks = nil },
			"permanent", convertjob.ReasonBadSpec},
		{"relative overlay folder", func(t *testing.T, s *convertjob.Spec) { s.Disks[0].OverlayDir = "journal/0" },
			"permanent", convertjob.ReasonBadSpec},
		{"two devices' overlays in one folder", func(t *testing.T, s *convertjob.Spec) {
			s.Disks[0].OverlayDir, s.Disks[1].OverlayDir = "/journal", "/journal"
		}, "permanent", convertjob.ReasonBadSpec},
		{"a device without an overlay folder", func(t *testing.T, s *convertjob.Spec) { s.Disks[1].Path, s.Disks[1].Device = "/dev/loop7", true },
			"permanent", convertjob.ReasonBadSpec},
		{"a file given as a device", func(t *testing.T, s *convertjob.Spec) { s.Disks[1].Device, s.Disks[1].OverlayDir = true, t.TempDir() },
			"permanent", convertjob.ReasonBadDisk},
		{"symlinked disk", func(t *testing.T, s *convertjob.Spec) {
			real := filepath.Join(t.TempDir(), "real.img")
			if err := os.Rename(s.Disks[1].Path, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, s.Disks[1].Path); err != nil {
				t.Fatal(err)
			}
		}, "permanent", convertjob.ReasonBadDisk},
		{"size mismatch", func(t *testing.T, s *convertjob.Spec) { s.Disks[0].SizeBytes += 512 },
			"permanent", convertjob.ReasonBadDisk},
		{"missing disk", func(t *testing.T, s *convertjob.Spec) {
			if err := os.Remove(s.Disks[1].Path); err != nil {
				t.Fatal(err)
			}
		}, "permanent", convertjob.ReasonBadDisk},
		{"garbled state", func(t *testing.T, s *convertjob.Spec) { writeState(t, s, `{"phase":"comm`) },
			"needs-human", convertjob.ReasonBadState},
		{"unknown phase", func(t *testing.T, s *convertjob.Spec) { writeState(t, s, `{"phase":"converting"}`) },
			"needs-human", convertjob.ReasonBadState},
		{"done for other disks", func(t *testing.T, s *convertjob.Spec) {
			writeState(t, s, fmt.Sprintf(`{"phase":"done","ids":["",""],"evidence":{"tool":"virt-v2v-in-place","converted":"x"},"disks":[{"sha256":%q,"bytes":%d}]}`,
				strings.Repeat("a", 64), diskSize))
		}, "needs-human", convertjob.ReasonBadState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := convertjobtest.Install(t, convertjobtest.Options{})
			c := newClaims(t, 2)
			s := c.spec
			s.Disks = slices.Clone(s.Disks)
			tt.setup(t, &s)
			res, _ := run(t, t.Context(), s)
			if res.OK || res.Class != tt.class || res.Reason != tt.reason || res.Error == "" {
				t.Errorf("result %+v, want %s %s", res, tt.class, tt.reason)
			}
			if fake.Runs(t) != 0 {
				t.Error("virt-v2v-in-place ran")
			}
			for i, d := range c.spec.Disks {
				if _, err := os.Lstat(convertjob.Overlay(d.Path)); !os.IsNotExist(err) {
					t.Errorf("disk %d has an overlay: %v", i, err)
				}
				if b, err := os.ReadFile(d.Path); err == nil && !bytes.Equal(b, c.before[i]) {
					t.Errorf("disk %d changed", i)
				}
			}
		})
	}
}

// A commit that fails keeps the state and the overlays, and says what
// qemu-img said.
func TestCommitFailureKeepsState(t *testing.T) {
	convertjobtest.Install(t, convertjobtest.Options{})
	c := newClaims(t, 2)
	crashAfterFirstCommit(t, c)
	if res, _ := run(t, t.Context(), c.spec); res.OK {
		t.Fatalf("result %+v, want the crash", res)
	}
	convertjob.SetAfterCommit(t, nil)
	if err := os.WriteFile(convertjob.Overlay(c.spec.Disks[0].Path), []byte("not a qcow2 image"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, _ := run(t, t.Context(), c.spec)
	if res.OK || res.Class != "needs-human" || res.Reason != convertjob.ReasonFailed ||
		!strings.Contains(res.Error, "qemu-img commit") || !strings.Contains(res.Error, "qcow2") {
		t.Errorf("result %+v, want needs-human %s with qemu-img's message", res, convertjob.ReasonFailed)
	}
	if st := readState(t, c.spec); st.Phase != convertjob.PhaseCommitting {
		t.Errorf("state %+v, want still committing", st)
	}
	for i, d := range c.spec.Disks {
		if _, err := os.Stat(convertjob.Overlay(d.Path)); err != nil {
			t.Errorf("overlay %d: %v", i, err)
		}
	}
}

// What virt-v2v printed is kept bounded: ten messages of each kind, each
// cut to 300 bytes saying how long it was.
func TestEvidenceBounded(t *testing.T) {
	long := strings.Repeat("w", 500)
	convertjobtest.Install(t, convertjobtest.Options{Then: `i=0; while [ $i -lt 12 ]; do
	echo '{ "message": "warning '$i' ` + long + `", "type": "warning" }'
	echo '{ "message": "driver '$i' ` + long + `", "type": "info" }'
	i=$((i+1)); done`})
	c := newClaims(t, 1)
	res, _ := run(t, t.Context(), c.spec)
	if !res.OK {
		t.Fatalf("result %+v", res)
	}
	ev := res.Evidence
	if len(ev.Warnings) != 10 || len(ev.Drivers) != 10 {
		t.Fatalf("%d warnings, %d driver messages kept, want 10 each", len(ev.Warnings), len(ev.Drivers))
	}
	for _, m := range append(ev.Warnings[1:], ev.Drivers[1:]...) { // after the stand-in's own
		if len(m) > 300 || !strings.HasSuffix(m, "bytes in all)") {
			t.Errorf("message of %d bytes kept: %q", len(m), m)
		}
	}
	if !strings.HasPrefix(ev.Warnings[0], "virt-v2v: warning") || !strings.HasPrefix(ev.Warnings[1], "warning 0 www") {
		t.Errorf("warnings %q", ev.Warnings[:2])
	}
	if len(res.Encode()) > convertjob.MaxResultBytes {
		t.Errorf("the result does not fit a termination message")
	}
}

func writeState(t *testing.T, s *convertjob.Spec, content string) {
	t.Helper()
	if err := os.WriteFile(s.StatePath(), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// An image's hash reads its holes as zeros, at any layout of data and
// holes.
func TestHashImage(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 3*mib + 17, 9*mib - 5} {
		if _, err := f.WriteAt([]byte("data among holes"), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(10 * mib); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := convertjob.HashImage(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (convertjob.Checked{SHA256: sha256Hex(readFile(t, p)), Bytes: 10 * mib}); got != want {
		t.Errorf("HashImage = %+v, want %+v", got, want)
	}
	ctx, cancel := context.WithTimeout(t.Context(), -time.Second)
	defer cancel()
	if _, err := convertjob.HashImage(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("HashImage after its context ended: %v", err)
	}
}

// A state recorded for other claims (one of the VM's DataVolumes was
// replaced, and its disk copied again into the new claim) is not believed:
// the guest is converted again, and the new state names the new claims.
func TestStateOfReplacedClaimsIsNotBelieved(t *testing.T) {
	fake := convertjobtest.Install(t, convertjobtest.Options{})
	c := newClaims(t, 2)
	c.spec.Disks[0].ID, c.spec.Disks[1].ID = "uid-a", "uid-b"
	first, _ := run(t, t.Context(), c.spec)
	if !first.OK {
		t.Fatalf("first conversion: %+v", first)
	}
	// Disk 1's claim replaced: a fresh copy of its disk.
	if err := os.WriteFile(c.spec.Disks[1].Path, c.before[1], 0o600); err != nil {
		t.Fatal(err)
	}
	c.spec.Disks[1].ID = "uid-c"
	again, _ := run(t, t.Context(), c.spec)
	if !again.OK || again.Reused {
		t.Fatalf("after disk 1's claim was replaced: %+v, want a new conversion", again)
	}
	if runs := fake.Runs(t); runs != 2 {
		t.Errorf("virt-v2v-in-place ran %d times, want 2", runs)
	}
	if got, want := again.Disks[1].SHA256, sha256Hex(convertjobtest.Apply(c.before[1], 1)); got != want {
		t.Errorf("disk 1 after the new conversion: %s, want %s", got, want)
	}
	if st := readState(t, c.spec); st.Phase != convertjob.PhaseDone || !slices.Equal(st.IDs, []string{"uid-a", "uid-c"}) {
		t.Errorf("state %s for %v, want done for the new claims", st.Phase, st.IDs)
	}
}

// The guest is converted on overlays kept in each disk's overlay folder
// (its journal claim), backed by the image by its path: on Block-mode
// claims (loop devices, each larger than its disk), and on disk.img files
// whose claims then hold the disk alone. Only the conversion's writes
// reach the disks, each result hashes the disk's SizeBytes, the state is
// in the first disk's overlay folder and no overlay is left; a second run
// answers from the state.
func TestConvertOnDevices(t *testing.T) {
	for _, device := range []bool{true, false} {
		t.Run(map[bool]string{true: "Block", false: "Filesystem"}[device], func(t *testing.T) { testConvertOverlaysElsewhere(t, device) })
	}
}

func testConvertOverlaysElsewhere(t *testing.T, device bool) {
	fake := convertjobtest.Install(t, convertjobtest.Options{})
	c := newClaims(t, 2)
	var backings []string
	for i := range c.spec.Disks {
		d := &c.spec.Disks[i]
		d.OverlayDir = t.TempDir()
		if !device {
			backings = append(backings, d.Path)
			continue
		}
		if err := os.Truncate(d.Path, diskSize+mib); err != nil {
			t.Fatal(err)
		}
		dev, err := loopdev.Attach(d.Path)
		if err != nil {
			t.Fatalf("this test converts on loop devices: %v", err)
		}
		t.Cleanup(func() { _ = dev.Detach() })
		d.Path, d.Device = dev.Path, true
		backings = append(backings, dev.Path)
	}
	res, _ := run(t, t.Context(), c.spec)
	if !res.OK || len(res.Disks) != 2 {
		t.Fatalf("result %+v", res)
	}
	for i, d := range c.spec.Disks {
		f, err := os.Open(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, diskSize)
		_, err = f.ReadAt(got, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := convertjobtest.Apply(c.before[i], i); !bytes.Equal(got, want) {
			t.Errorf("disk %d: the disk is not its content before with the conversion's write (first difference at %d)", i, firstDiff(got, want))
		}
		if res.Disks[i] != (convertjob.Checked{SHA256: sha256Hex(got), Bytes: diskSize}) {
			t.Errorf("disk %d: result %+v, the disk hashes to %s", i, res.Disks[i], sha256Hex(got))
		}
		want := []string(nil)
		if i == 0 {
			want = []string{convertjob.StateFile}
		}
		if names := dirNames(t, d.OverlayDir); !slices.Equal(names, want) {
			t.Errorf("disk %d: its overlay folder holds %q, want %q", i, names, want)
		}
		if names := folder(t, d); !device && !slices.Equal(names, []string{convertjob.ImageName}) {
			t.Errorf("disk %d: its claim holds %q, want the disk alone", i, names)
		}
	}
	if got := fake.Backings(t); !slices.Equal(got, backings) {
		t.Errorf("the overlays' backing files %q, want the disks by their paths %q", got, backings)
	}
	again, _ := run(t, t.Context(), c.spec)
	if !again.OK || !again.Reused || !slices.Equal(again.Disks, res.Disks) {
		t.Errorf("second run %+v, want the first's answer from the state", again)
	}
}

// dirNames are the names of the entries of dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
