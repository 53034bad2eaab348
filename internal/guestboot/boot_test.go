package guestboot_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
)

// TestBootUnconverted boots the VMware-style guest as it comes from ESXi:
// on the buses it was installed on it reaches multi-user.target and its
// guest agent answers; on virtio, as KubeVirt would attach it, the
// initramfs finds no root disk and drops to a shell, and WaitAgent says so
// at once instead of waiting out its timeout.
func TestBootUnconverted(t *testing.T) {
	img := testguest.Image(t)
	t.Logf("accelerator: %s", guestboot.ProbeAccel())

	t.Run("ide", func(t *testing.T) {
		t.Parallel()
		g := boot(t, guestboot.Disk{Path: img, Format: testguest.Format, Bus: guestboot.BusIDE})
		ctx := testguest.BootContext(t, g)
		requireBooted(ctx, t, g)
	})

	t.Run("pvscsi", func(t *testing.T) {
		t.Parallel()
		g := boot(t, guestboot.Disk{Path: img, Format: testguest.Format, Bus: guestboot.BusPVSCSI})
		ctx := testguest.BootContext(t, g)
		if _, err := g.WaitConsole(ctx, testguest.Marker); err != nil {
			t.Fatalf("%v\nconsole:\n%s", err, strings.Join(g.ConsoleTail(30), "\n"))
		}
		t.Logf("marker after %s", time.Since(g.Started()).Round(time.Second))
	})

	t.Run("virtio", func(t *testing.T) {
		t.Parallel()
		g := boot(t, guestboot.Disk{Path: img, Format: testguest.Format, Bus: guestboot.BusVirtio})
		ctx := testguest.BootContext(t, g)
		err := g.WaitAgent(ctx)
		took := time.Since(g.Started()).Round(time.Second)
		console := strings.Join(g.ConsoleTail(40), "\n")
		if !errors.Is(err, guestboot.ErrBootFailed) {
			t.Fatalf("WaitAgent on virtio: %v, want ErrBootFailed\nconsole:\n%s", err, console)
		}
		if ctx.Err() != nil {
			t.Fatalf("WaitAgent returned only at its timeout (%s)", took)
		}
		want := "ALERT!  UUID=" + testguest.RootUUID + " does not exist.  Dropping to a shell!"
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
		if strings.Contains(console, testguest.Marker) {
			t.Errorf("console shows the boot marker on virtio:\n%s", console)
		}
		t.Logf("boot failure detected after %s: %v", took, err)
	})
}

// boot starts the guest on disk with a virtio NIC (the guest's kernel has
// virtio_net on its root file system, loaded once the root is mounted) and
// stops it when the test ends.
func boot(t *testing.T, disk guestboot.Disk) *guestboot.Guest {
	t.Helper()
	g, err := guestboot.Start(context.Background(), guestboot.Spec{
		Disks: []guestboot.Disk{disk},
		NIC:   guestboot.NICVirtio,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	return g
}

// requireBooted waits for the boot marker and the guest agent, then checks
// what the agent reports: Debian 12, and the NIC with QEMU's DHCP address.
func requireBooted(ctx context.Context, t *testing.T, g *guestboot.Guest) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nconsole:\n%s", append(args, strings.Join(g.ConsoleTail(40), "\n"))...)
	}
	if _, err := g.WaitConsole(ctx, testguest.Marker); err != nil {
		fail("%v", err)
	}
	marker := time.Since(g.Started())
	if err := g.WaitAgent(ctx); err != nil {
		fail("%v", err)
	}
	t.Logf("accelerator %s: marker after %s, agent after %s", g.Accel().Name,
		marker.Round(time.Second), time.Since(g.Started()).Round(time.Second))

	info, err := g.OSInfo(ctx)
	if err != nil {
		fail("guest-get-osinfo: %v", err)
	}
	if info.ID != "debian" || info.VersionID != "12" || info.Machine != "x86_64" {
		fail("guest-get-osinfo: %+v, want debian 12 x86_64", info)
	}
	t.Logf("guest OS: %s, kernel %s", info.PrettyName, info.KernelRelease)

	// systemd-networkd may still be waiting for the DHCP lease. Once the
	// agent answers, the lease takes seconds of the guest's time; the wait
	// is bounded by this boot's own pace (twice what reaching the agent
	// took, plus a minute), so a NIC that is never configured fails the
	// test in minutes, not at the test binary's deadline.
	booted := time.Since(g.Started())
	ctx, cancel := context.WithTimeout(ctx, 2*booted+time.Minute)
	defer cancel()
	want := netip.MustParseAddr("10.0.2.15")
	var last []guestboot.Interface
	for {
		ifs, err := g.Interfaces(ctx)
		if err != nil && ctx.Err() == nil {
			fail("guest-network-get-interfaces: %v", err)
		}
		if err == nil {
			last = ifs
		}
		for _, i := range ifs {
			for _, a := range i.IPAddresses {
				if addr, err := netip.ParseAddr(a.Address); err == nil && addr == want && i.HardwareAddress != "" {
					t.Logf("guest interface %s %s has %s/%d", i.Name, i.HardwareAddress, a.Address, a.Prefix)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			fail("no interface with %s %s after the agent answered (at %s): %+v",
				want, (time.Since(g.Started()) - booted).Round(time.Second), booted.Round(time.Second), last)
		case <-time.After(time.Second):
		}
	}
}

// TestFirmware boots the BIOS-only guest with OVMF, as KubeVirt does for
// firmware.bootloader.efi: the firmware finds no EFI boot loader on the
// disk. Without Secure Boot it falls back to its built-in shell; with
// Secure Boot enforced it refuses that unsigned shell ("Security
// Violation"), finds nothing else to boot, and WaitAgent reports the failed
// boot at once.
func TestFirmware(t *testing.T) {
	img := testguest.Image(t)
	for _, fw := range []guestboot.Firmware{guestboot.FirmwareEFI, guestboot.FirmwareEFISecureBoot} {
		t.Run(string(fw), func(t *testing.T) {
			t.Parallel()
			g, err := guestboot.Start(context.Background(), guestboot.Spec{
				Disks:    []guestboot.Disk{{Path: img, Format: testguest.Format, Bus: guestboot.BusVirtio}},
				Firmware: fw,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Stop)
			ctx := testguest.BootContext(t, g)
			if fw == guestboot.FirmwareEFI {
				if _, err := g.WaitConsole(ctx, "UEFI Interactive Shell"); err != nil {
					t.Fatalf("%v\nconsole:\n%s", err, strings.Join(g.ConsoleTail(20), "\n"))
				}
			} else {
				err := g.WaitAgent(ctx)
				if !errors.Is(err, guestboot.ErrBootFailed) || ctx.Err() != nil {
					t.Fatalf("WaitAgent: %v, want ErrBootFailed before the timeout\nconsole:\n%s", err, strings.Join(g.ConsoleTail(20), "\n"))
				}
			}
			console := strings.Join(g.ConsoleTail(0), "\n")
			if got, want := strings.Contains(console, "Security Violation"), fw == guestboot.FirmwareEFISecureBoot; got != want {
				t.Errorf("console shows a Secure Boot violation: %v, want %v\nconsole:\n%s", got, want, console)
			}
			t.Logf("%s: done after %s", fw, time.Since(g.Started()).Round(time.Second))
		})
	}
}

// TestBootUnconvertedEFI boots the EFI variant of the VMware-style guest
// with OVMF on IDE of an i440FX machine, the nearest to how it ran on ESXi:
// GRUB from the EFI system partition, the boot marker and the guest agent.
func TestBootUnconvertedEFI(t *testing.T) {
	img := testguest.ImageOf(t, testguest.EFI)
	g, err := guestboot.Start(context.Background(), guestboot.Spec{
		Disks:    []guestboot.Disk{{Path: img, Format: testguest.Format, Bus: guestboot.BusIDE}},
		NIC:      guestboot.NICVirtio,
		Firmware: guestboot.FirmwareEFI,
		Machine:  guestboot.MachinePC,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	ctx := testguest.BootContext(t, g)
	requireBooted(ctx, t, g)
}
