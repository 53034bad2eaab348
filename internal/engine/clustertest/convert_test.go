//go:build linux

package clustertest

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob/convertjobtest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// fakeV2V makes the entrypoint of v2vImage: the worker bin with
// stand-ins for virt-v2v's tools (convertjobtest). While the file "hold"
// is in their folder, virt-v2v-in-place, having written into the
// overlays, touches "held" and waits until it is removed (or it is
// killed).
func fakeV2V(bin string) (dir, entry string, err error) {
	var f *convertjobtest.Fake
	f, entry, err = convertjobtest.Worker(bin, convertjobtest.Options{Then: `d=$(dirname "$0"); if [ -e "$d/hold" ]; then : > "$d/held"; while [ -e "$d/hold" ]; do sleep 0.1; done; fi`})
	if f != nil {
		dir = f.Dir()
	}
	shared.v2v = f
	return dir, entry, err
}

// convertedSHA256 is the SHA-256 of disk i's source file with the
// stand-in's conversion applied, as its claim holds it afterwards.
func convertedSHA256(t *testing.T, path string, i int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := diskdigest.Sum(convertjobtest.Apply(b, i))
	return hex.EncodeToString(sum[:])
}

// checkConverted checks the record and the claims of a migration whose
// guest a conversion Job converted: each claim holds its source disk with
// the conversion's write, as recorded, the copies' SHA-256s are the
// sources', and no overlay is left.
func (e *env) checkConverted(rec record.Record, files *esxisim.VMFiles) {
	e.t.Helper()
	c := rec.Conversion
	if c == nil || c.Tool != "virt-v2v-in-place" || c.OS.Distro != "debian" || !strings.Contains(c.Converted, "to run on KVM") || c.Accelerator == "" {
		e.t.Errorf("conversion evidence = %+v, want virt-v2v-in-place converting a Debian guest on an accelerator", c)
	}
	if rec.ConvertJob == "" || rec.ConvertJobUID == "" {
		e.t.Errorf("conversion Job %q (UID %q) not recorded", rec.ConvertJob, rec.ConvertJobUID)
	}
	for i, d := range rec.Disks {
		source := files.Disks[i].SHA256()
		want := convertedSHA256(e.t, files.Disks[i].LocalFlat, i)
		if d.SourceSHA256 != source {
			e.t.Errorf("disk %d: recorded copy %s, source %s", i, d.SourceSHA256, source)
		}
		if d.ConvertedSHA256 != want || d.ArtifactSHA256 != want || d.ArtifactFormat != "raw" {
			e.t.Errorf("disk %d: converted %s, image %s (%s); want %s (raw)", i, d.ConvertedSHA256, d.ArtifactSHA256, d.ArtifactFormat, want)
		}
		img := e.sim.ReceivedPath(e.ns, d.DataVolume)
		if got := fileSHA256(e.t, img); got != want {
			e.t.Errorf("disk %d: claim of DataVolume %s holds %s, want the converted %s", i, d.DataVolume, got, want)
		}
		if _, err := os.Stat(convertjob.Overlay(img)); !os.IsNotExist(err) {
			e.t.Errorf("disk %d: overlay left in the claim (%v)", i, err)
		}
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := diskdigest.Sum(b)
	return hex.EncodeToString(sum[:])
}

// A migration with conversion "virt-v2v" in cluster execution converts
// the guest with a conversion Job over all its claims: the claims hold the
// converted disks, the record holds what virt-v2v saw with each image's
// SHA-256 (as in local execution), the Job ran once, no overlay is left,
// and nothing was uploaded or staged locally.
//
// Into Block-mode claims the same holds, the Job converting on the
// claims' devices with each overlay in the disk's journal claim.
func TestGuestConvertedInCluster(t *testing.T) {
	for _, tc := range []struct{ volumeMode, name string }{{"Filesystem", "cx-conv"}, {"Block", "cx-convb"}} {
		t.Run(tc.volumeMode, func(t *testing.T) { guestConvertedInCluster(t, tc.name, tc.volumeMode) })
	}
}

func guestConvertedInCluster(t *testing.T, name, volumeMode string) {
	e := newEnv(t)
	e.image = v2vImage
	files := e.addVM(name, 6)
	spec := e.spec(name, name)
	spec.Conversion, spec.VolumeMode = engine.ConversionVirtV2V, volumeMode
	before := shared.v2v.Runs(t)
	rec := e.mustComplete(spec)

	e.checkConverted(rec, files)
	if rec.ConvertAttempt != 1 {
		t.Errorf("conversion attempt %d, want 1", rec.ConvertAttempt)
	}
	if n := shared.v2v.Runs(t) - before; n != 1 {
		t.Errorf("virt-v2v-in-place ran %d times, want once", n)
	}
	if len(e.messages("converts the guest with virt-v2v-in-place in 2 claim(s)")) != 1 {
		t.Errorf("events do not name the conversion Job once: %q", e.messages("conversion Job"))
	}
	if n := e.sim.UploadProxyBytes(); n != 0 {
		t.Errorf("%d bytes reached CDI's upload proxy", n)
	}
	if left, _ := os.ReadDir(spec.WorkDir); len(left) != 0 {
		t.Errorf("work_dir holds %d entries; cluster execution stages nothing locally", len(left))
	}
	if volumeMode == "Block" {
		// virt-v2v converted overlays backed by the pod's devices.
		b := shared.v2v.Backings(t)
		if len(b) < 2 || b[len(b)-2] != clusterjob.ConvertDevicePath(0) || b[len(b)-1] != clusterjob.ConvertDevicePath(1) {
			t.Errorf("the overlays' backing files %q, want the claims' devices last", b)
		}
	}
	// Both modes: the overlays were kept in the journal claims.
	if n := len(e.messages("keeps the copy's journal and side files beside the claim")); n != 2 {
		t.Errorf("%d journal claims made, want one per disk", n)
	}
	e.checkClaimsHoldDisks(rec)
	e.checkCleanedUp(name)
}

// A conversion Job whose worker is killed while virt-v2v writes leaves the
// copied disks as they were (virt-v2v wrote only the overlays): the next
// attempt, a new Job, converts them from the start, and the claims end
// with exactly one conversion's writes.
func TestConversionKilledMidway(t *testing.T) {
	e := newEnv(t)
	e.image = v2vImage
	files := e.addVM("cx-kill", 6)
	spec := e.spec("cx-kill", "cx-kill")
	spec.Conversion = engine.ConversionVirtV2V
	hold := filepath.Join(shared.v2vDir, "hold")
	held := filepath.Join(shared.v2vDir, "held")
	_ = os.Remove(held)
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hold)

	// One killer for the first pod seen converting, however many of its
	// stages are reported before the kill.
	var killed, started atomic.Bool
	watch := func(ev engine.Event) {
		if !strings.HasPrefix(ev.Message, "conversion Job ") || !strings.Contains(ev.Message, ": pod ") || !started.CompareAndSwap(false, true) {
			return
		}
		pod := strings.Fields(strings.SplitN(ev.Message, ": pod ", 2)[1])[0]
		go func() {
			// Once the stand-in has written the overlays and waits, the
			// claims' images must still be the copies.
			for !fileExists(held) {
				if t.Context().Err() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			for i, d := range files.Disks {
				img := e.sim.ReceivedPath(e.ns, "cx-kill-disk-"+strconv.Itoa(i))
				if got := fileSHA256(t, img); got != d.SHA256() {
					t.Errorf("disk %d: the claim changed while virt-v2v ran (%s, copy %s): it must write only the overlay", i, got, d.SHA256())
				}
			}
			pid, ok := shared.runner.Pid(e.ns, pod, clusterjob.ConvertContainer)
			if !ok {
				t.Errorf("no process for pod %s", pod)
				_ = os.Remove(hold)
				return
			}
			killed.Store(true)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Errorf("killing the worker: %v", err)
			}
			// The next attempt converts to the end.
			_ = os.Remove(hold)
		}()
	}
	rec := e.completeWatching(spec, watch)
	if !killed.Load() {
		t.Fatal("no conversion was killed")
	}
	e.checkConverted(rec, files)
	if rec.ConvertAttempt != 2 {
		t.Errorf("conversion attempt %d, want 2 (the killed Job is never run again)", rec.ConvertAttempt)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power-off commands, want 1", n)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Conversions are bounded across runners: with max_concurrent_conversions
// 1, two runners (two workspaces) migrating a VM each into one cluster
// never run two conversion Jobs at once: the second waits for the
// cluster's conversion slot, saying so, and converts once the first is
// done. Both end Completed.
func TestConversionSlotsHeldAcrossRunners(t *testing.T) {
	e := newEnv(t)
	e.image, e.maxConversions = v2vImage, 1
	files := map[string]*esxisim.VMFiles{"cx-slot-a": e.addVM("cx-slot-a", 2), "cx-slot-b": e.addVM("cx-slot-b", 2)}
	hold := filepath.Join(shared.v2vDir, "hold")
	held := filepath.Join(shared.v2vDir, "held")
	_ = os.Remove(held)
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hold)

	var waited atomic.Int32
	released := make(chan struct{})
	watch := func(ev engine.Event) {
		if !strings.HasPrefix(ev.Message, "waiting for a conversion slot") || waited.Add(1) != 1 {
			return
		}
		go func() {
			defer close(released)
			// One conversion runs (held) while the other waits: exactly
			// one conversion Job exists.
			for !fileExists(held) {
				if t.Context().Err() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			jobs, err := e.kube.ListJobs(t.Context(), e.ns, map[string]string{clusterjob.LabelComponent: clusterjob.ComponentConvert})
			if err != nil || len(jobs) != 1 {
				t.Errorf("%d conversion Jobs (%v) while one runs and one waits for the slot, want 1", len(jobs), err)
			}
			_ = os.Remove(hold)
		}()
	}
	e.onEvent.Store(&watch)
	recs := make(chan record.Record, 2)
	for name := range files {
		spec := e.spec(name, name)
		spec.Conversion = engine.ConversionVirtV2V
		go func() {
			// Each its own runner, as two Terraform workspaces are.
			rec, err := e.engine().Run(e.runCtx(), spec)
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			recs <- rec
		}()
	}
	for range files {
		rec := <-recs
		if rec.Phase != record.PhaseCompleted {
			t.Errorf("%s: phase %s, want Completed", rec.Identity.Name, rec.Phase)
			continue
		}
		e.checkConverted(rec, files[rec.Identity.Name])
	}
	e.onEvent.Store(nil)
	if waited.Load() == 0 {
		t.Fatal("no runner waited for the conversion slot")
	}
	<-released
	if len(e.messages("all 1 conversion slots of the cluster are held")) == 0 {
		t.Errorf("the wait does not name the held slot: %q", e.messages("conversion slot"))
	}
}
