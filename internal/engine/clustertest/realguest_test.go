//go:build linux

package clustertest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// A real guest migrated in cluster execution boots: the Debian 12 test
// guest, installed the VMware way (no virtio driver in its initramfs), is
// copied by a copy Job, converted by the real virt-v2v-in-place in its
// conversion Job (the worker's image is this machine, as podrun runs it),
// and booted by kubesim in QEMU from its claim on KubeVirt's virtio
// devices; its guest agent answers with an IP. Without the conversion it
// stops in its initramfs' shell (the provider's
// TestAccRealGuestWithoutConversionDoesNotBoot).
func TestRealGuestConvertedInCluster(t *testing.T) {
	img := testguest.Image(t)
	ctx := testguest.Context(t)
	e := newEnvWith(t, func(o *kubesim.Options) { o.BootGuests = true })
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := e.host.AddVM(esxisim.VMSpec{Name: "cx-debian", GuestOS: "debian12-64", CPUs: 2, MemoryMiB: 1024,
		Disks: []esxisim.DiskSpec{{CapacityBytes: fi.Size(), Thin: true, Controller: "scsi0:0", Content: []esxisim.Extent{}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", Adapter: "vmxnet3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := convert.CopySparse(img, files.Disks[0].LocalFlat); err != nil {
		t.Fatal(err)
	}
	source, err := convert.FileSHA256(img)
	if err != nil {
		t.Fatal(err)
	}
	spec := e.spec("cx-debian", "cx-debian")
	spec.Conversion = engine.ConversionVirtV2V
	spec.PowerOffPolicy = "hard"
	left := time.Until(deadlineOf(t))
	spec.StartTimeout, spec.Validation.Timeout = left, left
	spec.Validation.GuestAgent, spec.Validation.IPReported = true, true

	// The conversion's helper VM runs in the pod, with guest slots of its
	// own (the pod's /tmp): this test holds one of the machine's for it
	// until the conversion is over, so that no more real guests run at
	// once than the machine allows. The boot then takes its own.
	release, err := guestslot.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	watch := func(ev engine.Event) {
		if !once && (strings.HasPrefix(ev.Message, "conversion Job ") && strings.Contains(ev.Message, " converted ") || strings.Contains(ev.Message, "entering Importing")) {
			once = true
			release()
		}
	}
	e.onEvent.Store(&watch)
	rec, err := e.engine().Run(ctx, spec)
	e.onEvent.Store(nil)
	if !once {
		release()
	}
	if err != nil {
		t.Fatalf("Run: %v\nsim: %v", err, e.sim.LastError())
	}
	c := rec.Conversion
	if c == nil || c.Tool != "virt-v2v-in-place" || c.OS.Distro != "debian" || c.Job == "" || !strings.Contains(c.Converted, "KVM") {
		t.Fatalf("conversion evidence %+v, want the real virt-v2v's, by a conversion Job", c)
	}
	d := rec.Disks[0]
	if d.SourceSHA256 != source || d.ConvertedSHA256 == "" || d.ConvertedSHA256 == source || d.ArtifactSHA256 != d.ConvertedSHA256 {
		t.Errorf("disk: source %s (image %s), converted %s, image %s", d.SourceSHA256, source, d.ConvertedSHA256, d.ArtifactSHA256)
	}
	if got, err := convert.FileSHA256(e.sim.ReceivedPath(e.ns, d.DataVolume)); err != nil || got != d.ConvertedSHA256 {
		t.Errorf("the claim holds %s (%v), the conversion recorded %s", got, err, d.ConvertedSHA256)
	}
	// The guest agent answers before multi-user.target, after which the
	// guest prints its marker: on a busy machine, a while after.
	for {
		console, err := e.kube.GuestConsoleTail(t.Context(), e.ns, "cx-debian", 200)
		if err == nil && strings.Contains(console, testguest.Marker) {
			break
		}
		if time.Now().After(deadlineOf(t)) {
			t.Fatalf("the guest's console (%v) lacks the boot marker %s:\n%s", err, testguest.Marker, tailLines(console, 30))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("converted by %s %s in conversion Job %s on %s in %.0f s: %s", c.Tool, c.Version, c.Job, c.Accelerator, c.Seconds, c.OS)
}

// deadlineOf is the end of testguest.Context(t).
func deadlineOf(t *testing.T) time.Time {
	if d, ok := testguest.Context(t).Deadline(); ok {
		return d
	}
	return time.Now().Add(2 * time.Hour)
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
