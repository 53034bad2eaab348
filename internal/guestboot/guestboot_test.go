package guestboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestProbeAccel(t *testing.T) {
	const noFlag = "processor\t: 0\nflags\t\t: fpu vme de pse sse2 hypervisor\n"
	const vmx = "processor\t: 0\nflags\t\t: fpu vme vmx sse2\n"
	const svm = "processor\t: 0\nflags\t\t: fpu svm sse2\nbugs\t\t: vmx\n"
	missing := filepath.Join(t.TempDir(), "kvm")
	notKVM := filepath.Join(t.TempDir(), "null")
	if err := os.WriteFile(notKVM, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cpuinfo, device string
		want, reason          string
	}{
		{"no flag", noFlag, "/dev/kvm", AccelTCG, "no vmx or svm flag"},
		{"flag only under bugs", "flags : fpu\nbugs : vmx\n", "/dev/kvm", AccelTCG, "no vmx or svm flag"},
		{"vmx without device", vmx, missing, AccelTCG, "vmx flag present but cannot open"},
		{"svm with a device that is not KVM", svm, notKVM, AccelTCG, "svm flag present but " + notKVM + ": KVM_GET_API_VERSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := probeAccel([]byte(tc.cpuinfo), tc.device)
			if got.Name != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("got %s, want %s with reason containing %q", got, tc.want, tc.reason)
			}
		})
	}
	// This machine: the answer must agree with what it has.
	got := ProbeAccel()
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	if cpuFlag(cpuinfo) == "" && got.KVM() {
		t.Errorf("ProbeAccel chose KVM without a vmx or svm flag: %s", got)
	}
	if got.KVM() {
		if err := kvmWorks("/dev/kvm"); err != nil {
			t.Errorf("ProbeAccel chose KVM but %v", err)
		}
	}
	t.Logf("this machine: %s", got)
}

func TestAccelArgs(t *testing.T) {
	tcg := Accel{Name: AccelTCG}
	if got := strings.Join(tcg.QEMUArgs(), " "); got != "-accel tcg -cpu max" {
		t.Errorf("TCG args %q", got)
	}
	if got := strings.Join(tcg.LibguestfsEnv(), " "); got != "LIBGUESTFS_BACKEND=direct LIBGUESTFS_BACKEND_SETTINGS=force_tcg" {
		t.Errorf("TCG libguestfs env %q", got)
	}
	kvm := Accel{Name: AccelKVM}
	if got := strings.Join(kvm.QEMUArgs(), " "); got != "-accel kvm -cpu host" {
		t.Errorf("KVM args %q", got)
	}
	if got := strings.Join(kvm.LibguestfsEnv(), " "); got != "LIBGUESTFS_BACKEND=direct" {
		t.Errorf("KVM libguestfs env %q", got)
	}
}

func TestConsole(t *testing.T) {
	c := newConsole(3)
	fmt.Fprint(c, "\x1b[2J\x1b[1;1Hline one\r\nline two\r\n")
	fmt.Fprint(c, "line th")
	if got := c.tail(0); !slices.Equal(got, []string{"line one", "line two", "line th"}) {
		t.Errorf("tail with a partial line: %q", got)
	}
	fmt.Fprint(c, "ree\nfour\nfive\n(initramfs) ")
	if got := c.tail(0); !slices.Equal(got, []string{"line three", "four", "five", "(initramfs) "}) {
		t.Errorf("ring of 3 lines: %q", got)
	}
	if got := c.tail(2); !slices.Equal(got, []string{"five", "(initramfs) "}) {
		t.Errorf("tail(2): %q", got)
	}

	// A waiter sees lines written after it started, and returns at once
	// for lines already there.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	line, _, err := c.wait(ctx, 0, func(l string) bool { return strings.HasPrefix(l, "fo") })
	if err != nil || line != "four" {
		t.Errorf("wait for a held line: %q, %v", line, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		fmt.Fprint(c, "\nBegin: Running /scripts/local-block ... done.\r\nALERT!  UUID=x does not exist.  Dropping to a shell!\r\n")
	}()
	line, _, err = c.wait(ctx, 0, BootFailure)
	if err != nil || !strings.Contains(line, "Dropping to a shell") {
		t.Errorf("wait for a boot failure: %q, %v", line, err)
	}

	// The end of the stream ends waiters.
	go c.close()
	if _, _, err := c.wait(ctx, 0, func(string) bool { return false }); !errors.Is(err, errConsoleClosed) {
		t.Errorf("wait on a closed console: %v", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if _, _, err := newConsole(5).wait(short, 0, func(string) bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait past its deadline: %v", err)
	}
}

func TestQEMUArgs(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"virtio bios", Spec{Disks: []Disk{{Path: img, Format: "raw"}}, NIC: NICVirtio}, []string{
			"-machine q35", "-accel tcg -cpu max", "-m 1024", "-smp 1,sockets=1,cores=1,threads=1", "-snapshot",
			"-drive file=" + img + ",format=raw,if=none,id=disk0", "-device virtio-blk-pci,drive=disk0,bootindex=1",
			"-nic user,model=virtio-net-pci,restrict=on",
			"-device virtserialport,bus=virtio-serial0.0,chardev=qga0,name=org.qemu.guest_agent.0",
		}},
		{"sata and ide", Spec{Disks: []Disk{{Path: img, Format: "qcow2", Bus: BusSATA}, {Path: img, Format: "raw", Bus: BusIDE}, {Path: img, Format: "raw", Bus: BusIDE}}, NIC: NICE1000E, MemoryMiB: 2048, Sockets: 1, Cores: 2, Threads: 2}, []string{
			"-device ide-hd,drive=disk0,bus=ide.0,bootindex=1", "-device piix3-ide,id=pide",
			"-device ide-hd,drive=disk1,bus=pide.0,unit=0,bootindex=2", "-device ide-hd,drive=disk2,bus=pide.0,unit=1,bootindex=3",
			"-nic user,model=e1000e,restrict=on", "-m 2048", "-smp 4,sockets=1,cores=2,threads=2",
		}},
		{"pc ide and sata", Spec{Machine: MachinePC, Disks: []Disk{{Path: img, Format: "raw", Bus: BusIDE}, {Path: img, Format: "raw", Bus: BusSATA}}, Firmware: FirmwareEFI}, []string{
			"-machine pc", "-device ide-hd,drive=disk0,bus=ide.0,unit=0,bootindex=1",
			"-device ich9-ahci,id=ahci", "-device ide-hd,drive=disk1,bus=ahci.0,bootindex=2",
			"-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
		}},
		{"scsi and pvscsi", Spec{Disks: []Disk{{Path: img, Format: "raw", Bus: BusSCSI}, {Path: img, Format: "raw", Bus: BusPVSCSI}}}, []string{
			"-device virtio-scsi-pci,id=scsi0", "-device scsi-hd,drive=disk0,bus=scsi0.0,bootindex=1",
			"-device pvscsi,id=pvscsi0", "-device scsi-hd,drive=disk1,bus=pvscsi0.0,bootindex=2",
		}},
		{"secure boot", Spec{Disks: []Disk{{Path: img, Format: "raw"}}, Firmware: FirmwareEFISecureBoot}, []string{
			"-machine q35,smm=on", "-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
			"-global driver=cfi.pflash01,property=secure,value=on",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Accel = Accel{Name: AccelTCG}
			g := &Guest{spec: withDefaults(tc.spec), dir: t.TempDir(), agent: &agent{path: "/x/qga.sock"}}
			args, err := g.qemuArgs()
			if err != nil {
				if tc.spec.Firmware != FirmwareBIOS && tc.spec.Firmware != "" && errors.Is(err, ErrQEMUMissing) {
					t.Fatalf("%v (the Debian package ovmf is needed)", err)
				}
				t.Fatal(err)
			}
			line := " " + strings.Join(args, " ") + " "
			for _, w := range tc.want {
				if !strings.Contains(line, " "+w+" ") {
					t.Errorf("command line lacks %q:\n%s", w, line)
				}
			}
			if tc.spec.NIC == NICNone && strings.Contains(line, "-nic") {
				t.Errorf("a NIC without one asked for: %s", line)
			}
		})
	}
	for name, spec := range map[string]Spec{
		"no disks":            {},
		"vmdk":                {Disks: []Disk{{Path: img, Format: "vmdk"}}},
		"unknown bus":         {Disks: []Disk{{Path: img, Format: "raw", Bus: "floppy"}}},
		"missing":             {Disks: []Disk{{Path: filepath.Join(dir, "none"), Format: "raw"}}},
		"comma":               {Disks: []Disk{{Path: "/a,b", Format: "raw"}}},
		"nic":                 {Disks: []Disk{{Path: img, Format: "raw"}}, NIC: "rtl8139"},
		"firmware":            {Disks: []Disk{{Path: img, Format: "raw"}}, Firmware: "coreboot"},
		"machine":             {Disks: []Disk{{Path: img, Format: "raw"}}, Machine: "microvm"},
		"pc with Secure Boot": {Disks: []Disk{{Path: img, Format: "raw"}}, Machine: MachinePC, Firmware: FirmwareEFISecureBoot},
	} {
		spec.Accel = Accel{Name: AccelTCG}
		g := &Guest{spec: withDefaults(spec), dir: t.TempDir(), agent: &agent{path: "/x/qga.sock"}}
		if _, err := g.qemuArgs(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// fakeQEMU writes a script standing in for qemu-system-x86_64: it creates
// the guest agent's socket path, prints a line on the console and then
// spins, burning CPU without ever booting.
func fakeQEMU(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu")
	script := `#!/bin/sh
for a; do
  case $a in
  socket,id=qga0,path=*) s=${a#socket,id=qga0,path=}; touch "${s%%,*}" ;;
  esac
done
echo "SeaBIOS (fake)"
while :; do :; done
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A guest that spins without booting uses up its CPU budget: the wait ends
// with ErrCPUBudget, saying how much CPU QEMU had, not at a wall-clock
// timeout.
func TestWithCPUBudget(t *testing.T) {
	t.Setenv("VMMIGRATION_GUEST_SLOTS_DIR", t.TempDir())
	g, err := Start(context.Background(), Spec{
		Disks: []Disk{{Path: "/dev/null", Format: "raw"}},
		QEMU:  fakeQEMU(t), Accel: Accel{Name: AccelTCG},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	ctx, cancel := g.WithCPUBudget(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = g.WaitConsole(ctx, "never printed")
	if !errors.Is(err, ErrCPUBudget) || !strings.Contains(err.Error(), "on a CPU") {
		t.Fatalf("WaitConsole: %v, want ErrCPUBudget", err)
	}
	if g.CPUTime() < 500*time.Millisecond {
		t.Errorf("the budget ended after %s of CPU", g.CPUTime())
	}
	if err := g.WaitAgent(ctx); !errors.Is(err, ErrCPUBudget) {
		t.Errorf("WaitAgent on the spent budget: %v, want ErrCPUBudget", err)
	}
}

// QEMU starts only in a free guest slot, held until Stop.
func TestStartTakesAGuestSlot(t *testing.T) {
	t.Setenv("VMMIGRATION_GUEST_SLOTS_DIR", t.TempDir())
	t.Setenv("VMMIGRATION_GUEST_SLOTS", "1")
	spec := Spec{Disks: []Disk{{Path: "/dev/null", Format: "raw"}}, QEMU: fakeQEMU(t), Accel: Accel{Name: AccelTCG}}
	g, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if g2, err := Start(ctx, spec); err == nil || !strings.Contains(err.Error(), "guest slots") {
		if g2 != nil {
			g2.Stop()
		}
		t.Fatalf("a second guest with one slot: %v, want a wait for a slot", err)
	}
	g.Stop()
	g2, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("after Stop freed the slot: %v", err)
	}
	g2.Stop()
}
