package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
)

// TestConversionIsACheckpoint interrupts a migration while virt-v2v
// converts the guest (a stand-in that writes into the disk it was given,
// then works until it is stopped), and runs again with a new engine: the
// conversion runs again from the unchanged copied image (its half-written
// copy is replaced, never imported), once it finished it is never run
// again, and the DataVolume receives the converted image, whose SHA-256
// differs from the source's and is recorded with what virt-v2v saw. The
// real virt-v2v converting the real guest, which then boots, is
// provider.TestAccRealGuestConvertedBoots (local execution) and
// clustertest.TestRealGuestConvertedInCluster (a conversion Job).
func TestConversionIsACheckpoint(t *testing.T) {
	// The disk is virt-v2v's last argument (-i disk -if raw PATH). The first
	// run half converts the disk and waits to be stopped; the second
	// converts it whole, and must be given a fresh copy.
	runs := fakeV2VTools(t, `for disk; do :; done
echo '{ "message": "Inspecting the source", "timestamp": "", "type": "message" }'
if [ "$n" = 0 ]; then
	printf 'half-converted' | dd of="$disk" bs=1 seek=8192 conv=notrunc status=none
	sleep 600 & wait
fi
printf 'converted-to-kvm' | dd of="$disk" bs=1 seek=4096 conv=notrunc status=none
echo '{ "message": "Converting Debian GNU/Linux 12 (bookworm) to run on KVM", "timestamp": "", "type": "message" }'
`)
	e := newEnv(t)
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: "guest01", GuestOS: "debian12-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Thin: true, Content: []esxisim.Extent{{Offset: 0, Length: 1 << 20, Seed: 11}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}}})
	spec := e.spec("guest01", "guest01")
	spec.Conversion = engine.ConversionVirtV2V
	sourceSHA, err := convert.FileSHA256(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}

	// Stop the run once virt-v2v has written into its copy.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := func(ev engine.Event) {
		if strings.HasPrefix(ev.Message, "converting the guest") {
			go func() {
				for i := 0; i < 200 && !halfWritten(spec.WorkDir); i++ {
					time.Sleep(50 * time.Millisecond)
				}
				cancel()
			}()
		}
	}
	e.onEvent.Store(&stop)
	rec, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	var se *engine.StopError
	if !errors.As(err, &se) || se.State != engine.StateInterrupted || se.Phase != record.PhaseConverting {
		t.Fatalf("first Run = %v, want an interruption in Converting", err)
	}
	if rec.Conversion != nil || rec.Disks[0].ConvertedSHA256 != "" {
		t.Fatalf("an interrupted conversion was recorded: %+v", rec.Conversion)
	}
	if rec.Disks[0].SourceSHA256 != sourceSHA {
		t.Fatalf("copied %s, source is %s", rec.Disks[0].SourceSHA256, sourceSHA)
	}

	rec, err = e.engine().Run(e.ctx(2*time.Minute), spec)
	if err != nil || rec.Phase != record.PhaseCompleted {
		t.Fatalf("second Run = %v in %s", err, rec.Phase)
	}
	if b, _ := os.ReadFile(runs); strings.TrimSpace(string(b)) != "2" {
		t.Errorf("virt-v2v-in-place ran %q times, want 2 (once cut short, once to the end)", b)
	}
	d := rec.Disks[0]
	c := rec.Conversion
	if c == nil || c.Tool != "virt-v2v-in-place" || c.OS.Distro != "debian" || c.OS.Type != "linux" ||
		c.Converted != "Converting Debian GNU/Linux 12 (bookworm) to run on KVM" {
		t.Fatalf("conversion evidence %+v", c)
	}
	if d.SourceSHA256 != sourceSHA || d.ConvertedSHA256 == "" || d.ConvertedSHA256 == sourceSHA || d.ArtifactSHA256 != d.ConvertedSHA256 {
		t.Errorf("checksums: source %s (was %s), converted %s, artifact %s", d.SourceSHA256, sourceSHA, d.ConvertedSHA256, d.ArtifactSHA256)
	}
	// What the DataVolume received is the whole conversion, not the
	// half-written copy of the first run.
	want := wholeConversion(t, files.Disks[0].LocalFlat)
	if d.ConvertedSHA256 != want {
		t.Errorf("converted image %s, want %s (a fresh copy of the source with the second run's write only)", d.ConvertedSHA256, want)
	}
	if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != d.ConvertedSHA256 {
		t.Errorf("the DataVolume received %s, want the converted image %s", got, d.ConvertedSHA256)
	}
	if left, _ := filepath.Glob(filepath.Join(spec.WorkDir, "*", "*", "*"+convert.TmpSuffix)); len(left) > 0 {
		t.Errorf("conversion copies left behind: %v", left)
	}
	// The source disk is only read.
	if sum, err := convert.FileSHA256(files.Disks[0].LocalFlat); err != nil || sum != sourceSHA {
		t.Errorf("the source disk changed: %s, %v (copied %s)", sum, err, sourceSHA)
	}
	// Completed: applying again converts nothing.
	if rec, err = e.engine().Run(e.ctx(time.Minute), spec); err != nil || rec.Phase != record.PhaseCompleted {
		t.Errorf("third Run = %v in %s", err, rec.Phase)
	}
	if b, _ := os.ReadFile(runs); strings.TrimSpace(string(b)) != "2" {
		t.Errorf("virt-v2v-in-place ran %q times after Completed, want 2", b)
	}
}

// halfWritten reports whether a conversion copy under workDir holds the
// first run's partial write.
func halfWritten(workDir string) bool {
	copies, _ := filepath.Glob(filepath.Join(workDir, "*", "*", "*"+convert.TmpSuffix))
	for _, c := range copies {
		b := make([]byte, 14)
		if f, err := os.Open(c); err == nil {
			_, _ = f.ReadAt(b, 8192)
			f.Close()
			if string(b) == "half-converted" {
				return true
			}
		}
	}
	return false
}

// wholeConversion is the SHA-256 of the source disk with only the
// second run's write applied.
func wholeConversion(t *testing.T, source string) string {
	t.Helper()
	b, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[4096:], "converted-to-kvm")
	return diskdigest.Bytes(b)
}

// fakeV2VTools puts stand-ins for virt-v2v's tools first in PATH: the
// inspector reports a Debian guest, and virt-v2v-in-place runs the given
// shell body (its count of runs so far is in $n).
func fakeV2VTools(t *testing.T, inPlace string) (runs string) {
	t.Helper()
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs")
	tools := map[string]string{
		"virt-v2v": `echo "virt-v2v 2.2.0"`,
		"virt-inspector": `cat <<'X'
<operatingsystems><operatingsystem><name>linux</name><distro>debian</distro><major_version>12</major_version><minor_version>4</minor_version><arch>x86_64</arch><osinfo>debian12</osinfo></operatingsystem></operatingsystems>
X`,
		"nbdkit":            `echo "nbdkit 1.32.5"`,
		"nbdinfo":           `echo "nbdinfo 1.14.2"`,
		"virt-v2v-in-place": "n=$(cat " + runs + " 2>/dev/null || echo 0); echo $((n+1)) > " + runs + "\n" + inPlace,
	}
	for name, body := range tools {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The stand-ins start no helper VM: they take guest slots of their own,
	// not the machine's, which other test packages' real guests hold.
	t.Setenv(guestslot.EnvDir, filepath.Join(dir, "guest-slots"))
	return runs
}

// A virt-v2v whose helper VM hangs is killed once it has printed nothing
// for the stall timeout, and the conversion is retried from the unchanged
// copied image instead of holding the powered-off source's migration
// until the apply times out.
func TestConversionStallIsRetried(t *testing.T) {
	runs := fakeV2VTools(t, `echo "libguestfs: launch: backend=direct" >&2
if [ "$n" = 0 ]; then sleep 600 & wait; fi
echo '{ "message": "Converting 12.4 to run on KVM", "timestamp": "", "type": "message" }'
`)
	e := newEnv(t)
	e.host.AddVM(t, esxisim.VMSpec{Name: "hangs01", GuestOS: "debian12-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Content: []esxisim.Extent{{Offset: 0, Length: 1 << 20, Seed: 7}}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}}})
	spec := e.spec("hangs01", "hangs01")
	spec.Conversion = engine.ConversionVirtV2V
	rec, err := e.engine(func(d *engine.Deps) { d.ConversionStallTimeout = 2 * time.Second }).Run(e.ctx(2*time.Minute), spec)
	if err != nil || rec.Phase != record.PhaseCompleted {
		t.Fatalf("Run = %v in %s", err, rec.Phase)
	}
	if b, _ := os.ReadFile(runs); strings.TrimSpace(string(b)) != "2" {
		t.Errorf("virt-v2v-in-place ran %q times, want 2", b)
	}
	var stalled []record.ErrorEntry
	for _, x := range rec.Errors {
		if x.Reason == "ConversionStalled" {
			stalled = append(stalled, x)
		}
	}
	if len(stalled) != 1 || stalled[0].Phase != record.PhaseConverting || stalled[0].Class != record.ClassTransient ||
		!strings.Contains(stalled[0].Message, "printed nothing and wanted less than") {
		t.Errorf("error history %+v: want one transient ConversionStalled in Converting", rec.Errors)
	}
	if rec.Conversion == nil || rec.Conversion.Converted != "Converting 12.4 to run on KVM" {
		t.Errorf("conversion evidence %+v", rec.Conversion)
	}
}
