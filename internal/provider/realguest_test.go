package provider_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// newGuestEnv is a migration environment whose simulated KubeVirt boots
// the imported disks in QEMU, with a source VM installed the way VMware
// guests are: the Debian 12 test guest (grub, an initramfs with only the
// ata and pvscsi drivers, no virtio) on a pvscsi disk with a vmxnet3 NIC.
func newGuestEnv(t *testing.T, vmName string, mods ...func(*kubesim.Options)) *migrationEnv {
	t.Helper()
	img := testguest.Image(t)
	e := newMigrationEnvWith(t, append([]func(*kubesim.Options){func(o *kubesim.Options) { o.BootGuests = true }}, mods...)...)
	size := fileSize(t, img)
	_, files := e.host.AddVM(t, esxisim.VMSpec{Name: vmName, GuestOS: "debian12-64", CPUs: 2, MemoryMiB: 1024,
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Controller: "scsi0:0", Content: []esxisim.Extent{}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", Adapter: "vmxnet3"}}})
	if err := convert.CopySparse(img, files.Disks[0].LocalFlat); err != nil {
		t.Fatal(err)
	}
	return e
}

// wrappedRE matches the parts in order, as Terraform prints them: its
// lines wrap between any two words.
func wrappedRE(parts ...string) *regexp.Regexp {
	var res []string
	for _, p := range parts {
		words := strings.Fields(p)
		for i, w := range words {
			words[i] = regexp.QuoteMeta(w)
		}
		res = append(res, strings.Join(words, `\s+`))
	}
	return regexp.MustCompile(`(?s)` + strings.Join(res, `.*`))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// guestTimeout is how long a migration that converts and boots a real
// guest may take: until shortly before the test binary's deadline. virt-v2v
// and QEMU under TCG take as long as the machine lets them (they wait for
// a guest slot, then share the cores with the other tests), so a fixed
// number holds only on an idle machine; virt-v2v's watchdog and the
// console's boot-failure lines stop a guest that is stuck, not slow.
func guestTimeout(t *testing.T) string {
	d, ok := testguest.Context(t).Deadline()
	if !ok {
		return "2h"
	}
	return fmt.Sprintf("%ds", max(int(time.Until(d).Seconds()), 60))
}

// guestMigration is the configuration of the real guest's migration
// (conversion "-": the default, virt-v2v); the guest must answer through
// its agent and report an IP. Its VMI may wait for a guest slot (kubesim
// keeps it Scheduled, as a node short of room keeps a virt-launcher pod
// from starting) as long as the test may run.
func (e *migrationEnv) guestMigration(t *testing.T, label, vmName, dest, conversion, validationTimeout string) string {
	timeout := guestTimeout(t)
	if validationTimeout == "" {
		validationTimeout = timeout
	}
	return acctest.ProviderConfig(e.providerBlock()) + e.hcl(migrationHCL{label: label, vm: vmName, dest: dest, conversion: conversion, retries: 2,
		body: fmt.Sprintf(`  validation = {
    guest_agent = true
    ip_reported = true
    timeout     = %q
  }
  power_off_policy = "hard"
  start_timeout    = %q
  timeouts {
    create = %q
  }
`, validationTimeout, timeout, timeout)})
}

// Without conversion, the guest installed on VMware does not boot on the
// virtio disk it is given: its initramfs has no virtio driver and stops in
// its shell. The migration is never Completed: it stops at Validating in
// ManualInterventionRequired, as soon as the console shows it, with the
// console as evidence and what to do.
func TestAccRealGuestWithoutConversionDoesNotBoot(t *testing.T) {
	e := newGuestEnv(t, "debian-raw")
	// An explicit bus the guest lacks drivers for.
	cfg := e.guestMigration(t, "raw", "debian-raw", "    disk_bus = \"virtio\"\n", engine.ConversionNone, "")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			// The stop comes as soon as the console shows the failure: the
			// shell's "(initramfs)" prompt that follows it may or may not
			// have been printed by then (a busy machine slows the guest).
			ExpectError: wrappedRE(`migration needs manual intervention in phase Validating: the guest does not boot: its console shows "ALERT!`,
				`Dropping to a shell!"; the end of its console:`, `set conversion = "virt-v2v" (which migrates it again, installing the virtio drivers)`),
		}},
	})
	rec := e.expectStopped(t, "raw", record.PhaseManualInterventionRequired, record.PhaseValidating, "ValidationFailed")
	if !strings.Contains(rec.Message, "Dropping to a shell") {
		t.Errorf("the stop message lacks the console: %q", rec.Message)
	}
	var console *record.CheckResult
	for i, c := range rec.Validation {
		if c.ID == "guest_console" {
			console = &rec.Validation[i]
		}
	}
	if console == nil || console.Passed || !strings.Contains(console.Message, "Dropping to a shell") {
		t.Errorf("validation evidence %+v: want a failed guest_console with the shell", rec.Validation)
	}
	if rec.Conversion != nil || rec.Disks[0].ConvertedSHA256 != "" {
		t.Errorf("a migration without conversion recorded one: %+v", rec.Conversion)
	}
	if g := e.cluster.VMIGuest(t, e.namespace, "raw"); g.AgentConnected || g.OSID != "" || len(g.IPs) > 0 || g.DiskBus != "virtio" {
		t.Errorf("the guest that did not boot reports %+v", g)
	}
}

// Where the cluster does not log the serial console (KubeVirt's
// disableSerialConsoleLog), a guest that never answers is not recognised
// from its console: validation runs to its timeout, and the stop and the
// evidence say that the console was not available, not only that the
// checks failed. The guest here is a disk with nothing to boot (QEMU runs
// its firmware only): what is tested is the cluster's missing console, not
// the guest, so no Linux boots under TCG for it.
func TestAccGuestConsoleNotLogged(t *testing.T) {
	e := newMigrationEnvWith(t, func(o *kubesim.Options) { o.BootGuests, o.DisableSerialConsoleLog = true, true })
	e.host.AddVM(t, esxisim.VMSpec{Name: "debian-nolog", GuestOS: "debian12-64", CPUs: 1, MemoryMiB: 256,
		Disks: []esxisim.DiskSpec{{CapacityBytes: 64 << 20, Thin: true, Controller: "scsi0:0", Content: []esxisim.Extent{}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", Adapter: "vmxnet3"}}})
	cfg := e.guestMigration(t, "nolog", "debian-nolog", "    disk_bus = \"virtio\"\n", engine.ConversionNone, "30s")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: cfg,
			ExpectError: wrappedRE(`migration needs manual intervention in phase Validating: the VM runs but guest_agent`,
				`the cluster does not log the guest's serial console`, `no guest-console-log container`, `disableSerialConsoleLog`),
		}},
	})
	rec := e.expectStopped(t, "nolog", record.PhaseManualInterventionRequired, record.PhaseValidating, "ValidationFailed")
	var note *record.CheckResult
	for i, c := range rec.Validation {
		if c.ID == engine.CheckConsoleLog {
			note = &rec.Validation[i]
		}
		if c.ID == "guest_console" {
			t.Errorf("validation evidence has a console although the cluster logs none: %+v", c)
		}
	}
	if note == nil || note.Passed || note.Severity != "warning" || !strings.Contains(note.Message, "no guest-console-log container") {
		t.Errorf("validation evidence %+v: want a console_log warning", rec.Validation)
	}
}

// With the default conversion, the same guest is converted by the real
// virt-v2v on a copy of its disk, imported, and boots on the virtio disk
// and NIC the provider renders: the console shows the guest's boot marker,
// its agent answers with its OS and address, and the migration is
// Completed with the inspected OS and the checksums of the copy and of the
// converted image in state.
func TestAccRealGuestConvertedBoots(t *testing.T) {
	e := newGuestEnv(t, "debian-v2v")
	addr := "vmmigration_migration.conv"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: acctest.ProviderFactories,
		Steps: []resource.TestStep{{
			Config: e.guestMigration(t, "conv", "debian-v2v", "", "-", ""),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr(addr, "phase", string(record.PhaseCompleted)),
				resource.TestCheckResourceAttr(addr, "conversion", engine.ConversionVirtV2V),
				resource.TestCheckResourceAttr(addr, "destination.disk_bus", "virtio"),
				resource.TestCheckResourceAttr(addr, "destination.nic_model", "virtio"),
				resource.TestMatchResourceAttr(addr, "guest_os", regexp.MustCompile(`^12\.\d+ \(debian12\)$|^debian 12\.\d+ \(debian12\)$`)),
				resource.TestCheckResourceAttr(addr, "conversion_evidence.tool", "virt-v2v-in-place"),
				resource.TestCheckResourceAttr(addr, "conversion_evidence.os_distro", "debian"),
				resource.TestMatchResourceAttr(addr, "conversion_evidence.version", regexp.MustCompile(`^2\.`)),
				resource.TestMatchResourceAttr(addr, "conversion_evidence.converted", regexp.MustCompile(`to run on KVM$`)),
				func(s *terraform.State) error {
					d := s.RootModule().Resources[addr].Primary.Attributes
					src, conv, art := d["disks.0.source_sha256"], d["disks.0.converted_sha256"], d["disks.0.artifact_sha256"]
					if len(src) != 64 || len(conv) != 64 || conv == src || art != conv {
						return fmt.Errorf("checksums: source %q converted %q artifact %q: want the converted image imported, differing from the copy", src, conv, art)
					}
					return nil
				},
				// The guest itself, as KubeVirt reports it, while the
				// migration's record is still there.
				func(*terraform.State) error { return e.checkBootedGuest(t, "conv") },
			),
		}},
	})
}

// checkBootedGuest checks that the migrated VM's guest booted: its agent
// answers with its OS and an address, on virtio devices, the console shows
// the guest's boot marker, and the record holds the conversion's evidence.
func (e *migrationEnv) checkBootedGuest(t *testing.T, name string) error {
	g := e.cluster.VMIGuest(t, e.namespace, name)
	if !g.AgentConnected || g.OSID != "debian" || g.OSVersion != "12" || len(g.IPs) == 0 || g.DiskBus != "virtio" || g.NICModel != "virtio" {
		return fmt.Errorf("the migrated guest reports %+v: want its agent connected, debian 12, an IP, on virtio", g)
	}
	// The marker follows the agent's start by a moment (under TCG on a busy
	// machine, a long one).
	deadline, ok := testguest.Context(t).Deadline()
	if !ok {
		deadline = time.Now().Add(time.Hour)
	}
	for c := e.cluster.GuestConsole(t, e.namespace, name); !strings.Contains(c, testguest.Marker); c = e.cluster.GuestConsole(t, e.namespace, name) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the console lacks the boot marker %s:\n%s", testguest.Marker, c)
		}
		time.Sleep(2 * time.Second)
	}
	rec := e.record(t, name).Record
	if rec.Conversion == nil || rec.Conversion.OS.Type != "linux" || rec.Conversion.Accelerator == "" || len(rec.Conversion.Drivers) == 0 {
		return fmt.Errorf("conversion evidence %+v", rec.Conversion)
	}
	t.Logf("converted in %.0f s on %s; downtime %s", rec.Conversion.Seconds, rec.Conversion.Accelerator, rec.Downtime().Round(time.Second))
	return nil
}
