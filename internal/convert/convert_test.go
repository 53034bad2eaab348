package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

const mib = 1 << 20

func needQemuImg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Fatal("qemu-img is not installed: install the Debian package qemu-utils (make test does so)")
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sparseRaw writes a sparse raw disk of size bytes with a little data.
func sparseRaw(t *testing.T, path string, size int64) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for i, off := range []int64{0, size / 3, size - 4096} {
		data := bytes.Repeat([]byte(fmt.Sprintf("block %d data ", i)), 4096/10)
		if _, err := f.WriteAt(data[:min(int64(len(data)), size-off)], off); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// fileSHA is the disk digest of the file at path, computed from its bytes.
func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return diskdigest.Bytes(b)
}

func TestRawToQCOW2(t *testing.T) {
	needQemuImg(t)
	var q Tool
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "disk-0.raw"), 64*mib)
	dst := filepath.Join(dir, "disk-0.qcow2")
	a, err := q.Convert(ctxT(t), src, Raw, dst, QCOW2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Skipped || a.Path != dst || a.Format != QCOW2 || a.VirtualSize != 64*mib || a.SHA256 != fileSHA(t, dst) {
		t.Errorf("artifact %+v", a)
	}
	res, err := q.Check(ctxT(t), dst, QCOW2, 64*mib)
	if err != nil || res.VirtualSize != 64*mib || res.Leaks != 0 {
		t.Errorf("Check = %+v, %v", res, err)
	}
	info, err := q.Info(ctxT(t), dst, QCOW2)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != QCOW2 || info.VirtualSize != 64*mib || info.ActualSize <= 0 || info.ActualSize > 4*mib || info.BackingFile != "" || info.Corrupt {
		t.Errorf("Info = %+v", info)
	}
	if _, err := q.Check(ctxT(t), dst, QCOW2, 32*mib); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("Check with the wrong size: %v", err)
	}
	// The sidecar records the artifact and its source.
	var sc sidecar
	b, _ := os.ReadFile(dst + SidecarSuffix)
	if err := json.Unmarshal(b, &sc); err != nil || sc.SHA256 != a.SHA256 || sc.Source.Path != src || sc.Source.Format != Raw || sc.Format != QCOW2 {
		t.Errorf("sidecar %s: %v", b, err)
	}
	for _, p := range []string{dst + ".tmp", dst + SidecarSuffix + ".tmp"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind", p)
		}
	}
	// And back: qcow2 -> raw gives the original bytes.
	back := filepath.Join(dir, "back.raw")
	if a2, err := q.Convert(ctxT(t), dst, QCOW2, back, Raw); err != nil || a2.SHA256 != fileSHA(t, src) {
		t.Errorf("qcow2 -> raw: %+v, %v; want sha %s", a2, err, fileSHA(t, src))
	}
}

func TestRawToRawPreservesSHA256(t *testing.T) {
	needQemuImg(t)
	var q Tool
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), 40*mib+512)
	dst := filepath.Join(dir, "out.raw")
	a, err := q.Convert(ctxT(t), src, Raw, dst, Raw)
	if err != nil {
		t.Fatal(err)
	}
	if want := fileSHA(t, src); a.SHA256 != want || a.SizeBytes != 40*mib+512 {
		t.Errorf("artifact %+v, want sha %s", a, want)
	}
	if _, err := q.Check(ctxT(t), dst, Raw, 40*mib+512); err != nil {
		t.Error(err)
	}
	if _, err := q.Check(ctxT(t), dst, Raw, 40*mib); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("raw Check with the wrong size: %v", err)
	}
}

// countingQemuImg returns a qemu-img wrapper that logs each subcommand to
// a file (and, with sleep, sleeps after a successful convert, as if the
// process hung right after writing its output).
func countingQemuImg(t *testing.T, sleep bool) (bin, log string) {
	t.Helper()
	real, err := exec.LookPath(DefaultBinary)
	if err != nil {
		t.Fatal("qemu-img is not installed: install the Debian package qemu-utils (make test does so)")
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$1\" >> '" + log + "'\n"
	if sleep {
		script += "'" + real + "' \"$@\" || exit $?\n[ \"$1\" = convert ] && exec sleep 60\nexit 0\n"
	} else {
		script += "exec '" + real + "' \"$@\"\n"
	}
	bin = filepath.Join(dir, "qemu-img")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func calls(t *testing.T, log, sub string) int {
	b, _ := os.ReadFile(log)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == sub {
			n++
		}
	}
	return n
}

func TestConvertIsIdempotent(t *testing.T) {
	bin, log := countingQemuImg(t, false)
	q := Tool{Path: bin}
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), 16*mib)
	dst := filepath.Join(dir, "out.qcow2")
	first, err := q.Convert(ctxT(t), src, Raw, dst, QCOW2)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dst)
	second, err := q.Convert(ctxT(t), src, Raw, dst, QCOW2)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(dst)
	if n := calls(t, log, "convert"); n != 1 {
		t.Errorf("qemu-img convert ran %d times, want 1", n)
	}
	if !second.Skipped || second.SHA256 != first.SHA256 || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second Convert = %+v (mtime %v -> %v)", second, before.ModTime(), after.ModTime())
	}

	// A changed artifact is not trusted: it is converted again.
	if err := os.WriteFile(dst, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := q.Convert(ctxT(t), src, Raw, dst, QCOW2)
	if err != nil || third.Skipped || third.SHA256 != first.SHA256 {
		t.Errorf("after tampering: %+v, %v", third, err)
	}
	// So is one made from a source that changed since.
	os.Chtimes(src, time.Now(), time.Now().Add(time.Hour))
	if fourth, err := q.Convert(ctxT(t), src, Raw, dst, QCOW2); err != nil || fourth.Skipped {
		t.Errorf("after the source changed: %+v, %v", fourth, err)
	}
	if n := calls(t, log, "convert"); n != 3 {
		t.Errorf("qemu-img convert ran %d times, want 3", n)
	}
}

func TestInterruptedConvertLeavesNoArtifact(t *testing.T) {
	bin, log := countingQemuImg(t, true)
	q := Tool{Path: bin}
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), 16*mib)
	dst := filepath.Join(dir, "out.qcow2")
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() {
		// Cancel once qemu-img has written its output and is "hanging".
		for ctx.Err() == nil {
			if _, err := os.Stat(dst + ".tmp"); err == nil && calls(t, log, "convert") == 1 {
				time.Sleep(100 * time.Millisecond)
				cancel()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := q.Convert(ctx, src, Raw, dst, QCOW2)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Convert: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancellation took %v", d)
	}
	for _, p := range []string{dst, dst + SidecarSuffix} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after an interrupted convert", p)
		}
	}
	// The next attempt cleans up and finishes.
	a, err := (&Tool{}).Convert(ctxT(t), src, Raw, dst, QCOW2)
	if err != nil || a.Skipped {
		t.Fatalf("retry: %+v, %v", a, err)
	}
	if _, err := os.Stat(dst + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Error("temporary output left behind")
	}
}

func TestCheckDetectsCorruptQCOW2(t *testing.T) {
	needQemuImg(t)
	var q Tool
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), 32*mib)
	good := filepath.Join(dir, "good.qcow2")
	if _, err := q.Convert(ctxT(t), src, Raw, good, QCOW2); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		damage func(b []byte)
		want   string
	}{
		{"refcount block zeroed", func(b []byte) {
			rt := binary.BigEndian.Uint64(b[48:56])      // refcount_table_offset
			blk := binary.BigEndian.Uint64(b[rt : rt+8]) // first refcount block
			copy(b[blk:blk+65536], make([]byte, 65536))  // every refcount = 0
		}, "corruptions"},
		{"bad magic", func(b []byte) { copy(b, "XXXX") }, "could not complete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(img)
			tc.damage(b)
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".qcow2")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := q.Check(ctxT(t), p, QCOW2, 0)
			if !errors.Is(err, ErrInvalidImage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check = %v, want ErrInvalidImage mentioning %q", err, tc.want)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "odd.raw"), make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Check(ctxT(t), filepath.Join(dir, "odd.raw"), Raw, 0); !errors.Is(err, ErrInvalidImage) {
		t.Errorf("raw Check of a 1000-byte file: %v", err)
	}
}

func TestMissingQemuImg(t *testing.T) {
	q := Tool{Path: filepath.Join(t.TempDir(), "no-such-qemu-img")}
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), mib)
	_, err := q.Convert(ctxT(t), src, Raw, filepath.Join(dir, "out.qcow2"), QCOW2)
	if !errors.Is(err, ErrQemuImgMissing) || !strings.Contains(err.Error(), "qemu-utils") {
		t.Errorf("Convert without qemu-img: %v", err)
	}
	if _, err := q.Info(ctxT(t), src, Raw); !errors.Is(err, ErrQemuImgMissing) {
		t.Errorf("Info without qemu-img: %v", err)
	}
}

func TestConvertRejectsBadInput(t *testing.T) {
	var q Tool
	dir := t.TempDir()
	src := sparseRaw(t, filepath.Join(dir, "in.raw"), mib)
	for _, tc := range []struct {
		src, dst   string
		sfmt, dfmt Format
		want       string
	}{
		{src, filepath.Join(dir, "o.vmdk"), Raw, VMDK, "not supported"},
		{src, filepath.Join(dir, "o.raw"), "", Raw, "not supported"},
		{src, src, Raw, Raw, "same file"},
		{filepath.Join(dir, "missing.raw"), filepath.Join(dir, "o.raw"), Raw, Raw, "no such file"},
	} {
		if _, err := q.Convert(ctxT(t), tc.src, tc.sfmt, tc.dst, tc.dfmt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Convert(%s %s -> %s %s) = %v, want %q", tc.src, tc.sfmt, tc.dst, tc.dfmt, err, tc.want)
		}
	}
}

func TestRefusesBackingFile(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	base := sparseRaw(t, filepath.Join(dir, "base.raw"), 4*mib)
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command(DefaultBinary, "create", "-f", "qcow2", "-b", base, "-F", "raw", overlay).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var q Tool
	_, err := q.Convert(ctxT(t), overlay, QCOW2, filepath.Join(dir, "out.raw"), Raw)
	if err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("Convert of an overlay: %v", err)
	}
}
