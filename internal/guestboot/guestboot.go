// Package guestboot boots disk images in QEMU the way a KubeVirt VMI runs
// them, to prove that a migrated guest really boots: a q35 machine, the
// VMI's disk bus, NIC model, firmware, memory and CPU topology, and the
// guest's own qemu-guest-agent on the virtio-serial port KubeVirt uses.
//
// Images are never written: QEMU runs with -snapshot, so guest writes go
// to a temporary overlay. The serial console is kept in a bounded buffer
// for evidence (ConsoleTail). The accelerator is KVM only where it really
// works (ProbeAccel), else TCG. QEMU runs in its own process group and dies
// with this program (Pdeathsig), so a crashed test leaves no VM behind.
//
//	g, err := guestboot.Start(ctx, guestboot.Spec{
//		Disks: []guestboot.Disk{{Path: img, Format: "raw", Bus: guestboot.BusVirtio}},
//		NIC:   guestboot.NICVirtio,
//	})
//	defer g.Stop()
//	err = g.WaitAgent(ctx)        // ErrBootFailed early if the guest panics or drops to the initramfs shell
//	info, err := g.OSInfo(ctx)    // info.ID == "debian", info.VersionID == "12"
package guestboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/childproc"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestslot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// Bus is the bus a disk is attached to.
type Bus string

// Disk buses. BusVirtio, BusSATA and BusSCSI are KubeVirt's disk buses
// (KubeVirt's "scsi" is virtio-scsi). BusIDE (a PIIX IDE controller) and
// BusPVSCSI (VMware's paravirtual SCSI) are what a guest had on ESXi: they
// show that an unconverted guest boots at all. Debian's cloud kernel has no
// AHCI driver, so for guests built with it BusIDE stands in for SATA.
const (
	BusVirtio Bus = "virtio"
	BusSATA   Bus = "sata"
	BusSCSI   Bus = "scsi"
	BusIDE    Bus = "ide"
	BusPVSCSI Bus = "pvscsi"
)

// NICModel is the emulated network card.
type NICModel string

// NIC models, as KubeVirt's interface "model". NICNone gives the guest no
// network card. Debian's cloud kernel has a driver for virtio only.
const (
	NICNone   NICModel = ""
	NICVirtio NICModel = "virtio"
	NICE1000E NICModel = "e1000e"
)

// Firmware is the VM's firmware.
type Firmware string

// Firmware kinds: SeaBIOS, OVMF, and OVMF with Secure Boot enforced (SMM,
// Microsoft keys enrolled), as KubeVirt's firmware.bootloader sets them.
const (
	FirmwareBIOS              Firmware = "bios"
	FirmwareEFI               Firmware = "efi"
	FirmwareEFISecureBoot     Firmware = "efi-secureboot"
	defaultOVMFDir                     = "/usr/share/OVMF"
	defaultMemoryMiB                   = 1024
	defaultConsoleLines                = 2000
	defaultQEMU                        = "qemu-system-x86_64"
	guestAgentPortName                 = "org.qemu.guest_agent.0"
	maxDisksPerIDEController           = 4
	maxDisksPerSATAController          = 6
)

// Machine is QEMU's machine type.
type Machine string

// Machine types. MachineQ35 is what KubeVirt runs. MachinePC (i440FX with
// its PIIX3 IDE) is the nearest QEMU has to VMware's virtual hardware
// (440BX): use it for the baseline boot of an unconverted guest where q35
// cannot stand in, e.g. an EFI guest on IDE (under OVMF on q35 the add-on
// PIIX IDE controller finds no disk in Linux).
const (
	MachineQ35 Machine = "q35"
	MachinePC  Machine = "pc"
)

// Disk is one disk image, attached in the order given; the first boots.
type Disk struct {
	// Path is the image file. It is opened read-only in effect (-snapshot).
	Path string
	// Format is the image format, "raw" or "qcow2"; never probed.
	Format string
	// Bus is the bus the disk is attached to; BusVirtio if empty.
	Bus Bus
}

// Spec describes the VM to boot.
type Spec struct {
	// Disks, at least one.
	Disks []Disk
	// NIC is the network card model; the card is on QEMU user networking
	// restricted to the VM (restrict=on): the guest gets 10.0.2.15 from
	// QEMU's DHCP server and no traffic leaves the host.
	NIC NICModel
	// Firmware is FirmwareBIOS when empty.
	Firmware Firmware
	// Machine is MachineQ35 when empty.
	Machine Machine
	// MemoryMiB defaults to 1024.
	MemoryMiB int
	// Sockets, Cores and Threads default to 1 each.
	Sockets, Cores, Threads int
	// ConsoleLines is how many serial console lines are kept (default 2000).
	ConsoleLines int
	// QEMU is the qemu-system-x86_64 binary (looked up in PATH if empty).
	QEMU string
	// OVMFDir holds Debian's OVMF_CODE_4M*.fd and OVMF_VARS_4M*.fd
	// (default /usr/share/OVMF, package ovmf).
	OVMFDir string
	// Accel overrides the accelerator; ProbeAccel's choice when zero.
	Accel Accel
}

// Errors, matched with errors.Is.
var (
	// ErrBootFailed: the console shows the guest cannot boot (the
	// initramfs dropped to a shell, a kernel panic, no bootable disk).
	ErrBootFailed = errors.New("guest failed to boot")
	// ErrExited: QEMU exited.
	ErrExited = errors.New("QEMU exited")
	// ErrQEMUMissing: qemu-system-x86_64 or the OVMF firmware is not
	// installed.
	ErrQEMUMissing = errors.New("QEMU not installed")

	errConsoleClosed = errors.New("console closed")
)

// bootFailures are console lines after which a guest will not come up by
// itself.
var bootFailures = []string{
	"Dropping to a shell",
	"Kernel panic",
	"No bootable device",
	"No bootable option or device was found",
	"Boot failed:",
	"You are in emergency mode",
}

// BootFailure reports whether a console line shows a failed boot.
func BootFailure(line string) bool {
	for _, f := range bootFailures {
		if strings.Contains(line, f) {
			return true
		}
	}
	return false
}

// Guest is a running VM.
type Guest struct {
	spec    Spec
	accel   Accel
	dir     string
	proc    *childproc.Process
	console *console
	stderr  *console
	agent   *agent
	started time.Time
	args    []string
	stop    sync.Once
	release func() // frees the guest slot
}

// Start boots the VM described by spec and returns once QEMU runs. QEMU
// starts once one of the machine's guest slots (package guestslot) is
// free, which it holds until Stop; ctx bounds the wait.
func Start(ctx context.Context, spec Spec) (*Guest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec = withDefaults(spec)
	qemu, err := exec.LookPath(spec.QEMU)
	if err != nil {
		return nil, fmt.Errorf("guestboot: %w: %s not found (install the Debian package qemu-system-x86, e.g. scripts/ensure-guest-deps.sh): %v", ErrQEMUMissing, spec.QEMU, err)
	}
	dir, err := os.MkdirTemp("", "guestboot-")
	if err != nil {
		return nil, err
	}
	g := &Guest{
		spec:    spec,
		accel:   spec.Accel,
		dir:     dir,
		console: newConsole(spec.ConsoleLines),
		stderr:  newConsole(200),
		agent:   &agent{path: filepath.Join(dir, "qga.sock")},
	}
	g.args, err = g.qemuArgs()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	g.release, err = guestslot.Acquire(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("guestboot: %w", err)
	}
	// -snapshot overlays go to TMPDIR: keep them in this guest's folder.
	env := append(os.Environ(), "TMPDIR="+dir)
	g.started = time.Now()
	g.proc, err = childproc.Start(qemu, g.args, env, g.console, g.stderr)
	if err != nil {
		g.release()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("guestboot: %w", err)
	}
	go func() {
		<-g.proc.Done()
		g.console.close()
		g.stderr.close()
	}()
	// QEMU creates the agent socket before it runs the guest.
	if err := waitFor(ctx, func() bool {
		_, err := os.Stat(g.agent.path)
		return err == nil || g.proc.Exited()
	}); err != nil {
		g.Stop()
		return nil, err
	}
	if g.proc.Exited() {
		defer g.Stop()
		return nil, fmt.Errorf("guestboot: %w at start: %v: %s", ErrExited, g.proc.Err(), strings.Join(g.stderr.tail(20), "\n"))
	}
	return g, nil
}

func withDefaults(s Spec) Spec {
	if s.Firmware == "" {
		s.Firmware = FirmwareBIOS
	}
	if s.Machine == "" {
		s.Machine = MachineQ35
	}
	if s.MemoryMiB <= 0 {
		s.MemoryMiB = defaultMemoryMiB
	}
	for _, n := range []*int{&s.Sockets, &s.Cores, &s.Threads} {
		if *n <= 0 {
			*n = 1
		}
	}
	if s.ConsoleLines <= 0 {
		s.ConsoleLines = defaultConsoleLines
	}
	if s.QEMU == "" {
		s.QEMU = defaultQEMU
	}
	if s.OVMFDir == "" {
		s.OVMFDir = defaultOVMFDir
	}
	if s.Accel.Name == "" {
		s.Accel = ProbeAccel()
	}
	disks := make([]Disk, len(s.Disks))
	for i, d := range s.Disks {
		if d.Bus == "" {
			d.Bus = BusVirtio
		}
		disks[i] = d
	}
	s.Disks = disks
	return s
}

// qemuArgs is the QEMU command line for the guest's spec.
func (g *Guest) qemuArgs() ([]string, error) {
	s := g.spec
	if len(s.Disks) == 0 {
		return nil, errors.New("guestboot: no disks")
	}
	machine := string(s.Machine)
	switch {
	case s.Machine != MachineQ35 && s.Machine != MachinePC:
		return nil, fmt.Errorf("guestboot: unknown machine type %q", s.Machine)
	case s.Firmware == FirmwareEFISecureBoot && s.Machine != MachineQ35:
		return nil, errors.New("guestboot: Secure Boot needs the q35 machine type")
	case s.Firmware == FirmwareEFISecureBoot:
		machine += ",smm=on"
	}
	args := []string{
		"-name", "guestboot",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", machine,
	}
	args = append(args, s.Accel.QEMUArgs()...)
	args = append(args,
		"-m", strconv.Itoa(s.MemoryMiB),
		"-smp", fmt.Sprintf("%d,sockets=%d,cores=%d,threads=%d", s.Sockets*s.Cores*s.Threads, s.Sockets, s.Cores, s.Threads),
		"-snapshot",
		"-chardev", "stdio,id=serial0,signal=off",
		"-serial", "chardev:serial0",
		"-chardev", "socket,id=qga0,path="+g.agent.path+",server=on,wait=off",
		"-device", "virtio-serial-pci,id=virtio-serial0",
		"-device", "virtserialport,bus=virtio-serial0.0,chardev=qga0,name="+guestAgentPortName,
	)
	fw, err := firmwareArgs(s, g.dir)
	if err != nil {
		return nil, err
	}
	args = append(args, fw...)
	disks, err := diskArgs(s.Machine, s.Disks)
	if err != nil {
		return nil, err
	}
	args = append(args, disks...)
	switch s.NIC {
	case NICNone:
	case NICVirtio:
		args = append(args, "-nic", "user,model=virtio-net-pci,restrict=on")
	case NICE1000E:
		args = append(args, "-nic", "user,model=e1000e,restrict=on")
	default:
		return nil, fmt.Errorf("guestboot: unknown NIC model %q", s.NIC)
	}
	return args, nil
}

// diskArgs attaches each disk to a controller of its bus, creating the
// controllers the machine lacks, with boot order following the list.
func diskArgs(machine Machine, disks []Disk) ([]string, error) {
	var args []string
	made := map[Bus]bool{}
	count := map[Bus]int{}
	for i, d := range disks {
		if d.Path == "" {
			return nil, fmt.Errorf("guestboot: disk %d has no path", i)
		}
		if d.Format != "raw" && d.Format != "qcow2" {
			return nil, fmt.Errorf("guestboot: disk %s: format %q, want raw or qcow2", d.Path, d.Format)
		}
		abs, err := filepath.Abs(d.Path)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("guestboot: disk: %w", err)
		}
		if strings.Contains(abs, ",") {
			return nil, fmt.Errorf("guestboot: disk path %q has a comma, which QEMU's option syntax cannot take", abs)
		}
		id := fmt.Sprintf("disk%d", i)
		args = append(args, "-drive", fmt.Sprintf("file=%s,format=%s,if=none,id=%s", abs, d.Format, id))
		n := count[d.Bus]
		count[d.Bus]++
		boot := fmt.Sprintf(",bootindex=%d", i+1)
		switch d.Bus {
		case BusVirtio:
			args = append(args, "-device", "virtio-blk-pci,drive="+id+boot)
		case BusSATA:
			// q35's own ICH9 AHCI controller has buses ide.0 to ide.5; pc
			// gets one added.
			if n >= maxDisksPerSATAController {
				return nil, fmt.Errorf("guestboot: more than %d SATA disks", maxDisksPerSATAController)
			}
			bus := "ide"
			if machine == MachinePC {
				bus = "ahci"
				if !made[BusSATA] {
					args = append(args, "-device", "ich9-ahci,id=ahci")
				}
			}
			args = append(args, "-device", fmt.Sprintf("ide-hd,drive=%s,bus=%s.%d%s", id, bus, n, boot))
		case BusIDE:
			// pc's own PIIX3 IDE has buses ide.0 and ide.1; q35 gets one
			// added.
			if n >= maxDisksPerIDEController {
				return nil, fmt.Errorf("guestboot: more than %d IDE disks", maxDisksPerIDEController)
			}
			bus := "ide"
			if machine == MachineQ35 {
				bus = "pide"
				if !made[BusIDE] {
					args = append(args, "-device", "piix3-ide,id=pide")
				}
			}
			args = append(args, "-device", fmt.Sprintf("ide-hd,drive=%s,bus=%s.%d,unit=%d%s", id, bus, n/2, n%2, boot))
		case BusSCSI:
			if !made[BusSCSI] {
				args = append(args, "-device", "virtio-scsi-pci,id=scsi0")
			}
			args = append(args, "-device", "scsi-hd,drive="+id+",bus=scsi0.0"+boot)
		case BusPVSCSI:
			if !made[BusPVSCSI] {
				args = append(args, "-device", "pvscsi,id=pvscsi0")
			}
			args = append(args, "-device", "scsi-hd,drive="+id+",bus=pvscsi0.0"+boot)
		default:
			return nil, fmt.Errorf("guestboot: disk %s: unknown bus %q", d.Path, d.Bus)
		}
		made[d.Bus] = true
	}
	return args, nil
}

// firmwareArgs loads OVMF for EFI: its code read-only, and a private copy
// of its variable store (with Microsoft's keys enrolled for Secure Boot).
func firmwareArgs(s Spec, dir string) ([]string, error) {
	var code, vars string
	switch s.Firmware {
	case FirmwareBIOS:
		return nil, nil
	case FirmwareEFI:
		code, vars = "OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"
	case FirmwareEFISecureBoot:
		code, vars = "OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd"
	default:
		return nil, fmt.Errorf("guestboot: unknown firmware %q", s.Firmware)
	}
	code = filepath.Join(s.OVMFDir, code)
	if _, err := os.Stat(code); err != nil {
		return nil, fmt.Errorf("guestboot: %w: EFI firmware %s (install the Debian package ovmf): %v", ErrQEMUMissing, code, err)
	}
	b, err := os.ReadFile(filepath.Join(s.OVMFDir, vars))
	if err != nil {
		return nil, fmt.Errorf("guestboot: %w: EFI variable store (install the Debian package ovmf): %v", ErrQEMUMissing, err)
	}
	varsCopy := filepath.Join(dir, "efivars.fd")
	if err := os.WriteFile(varsCopy, b, 0o600); err != nil {
		return nil, err
	}
	args := []string{
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + code,
		"-drive", "if=pflash,format=raw,unit=1,file=" + varsCopy,
	}
	if s.Firmware == FirmwareEFISecureBoot {
		args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	return args, nil
}

// Accel is the accelerator the guest runs with.
func (g *Guest) Accel() Accel { return g.accel }

// Args is QEMU's command line (without the binary), for evidence.
func (g *Guest) Args() []string { return append([]string(nil), g.args...) }

// Started is when QEMU was started.
func (g *Guest) Started() time.Time { return g.started }

// ConsoleTail returns the last n lines of the serial console (all that are
// kept when n <= 0), terminal escape sequences removed.
func (g *Guest) ConsoleTail(n int) []string { return g.console.tail(n) }

// QEMUStderr returns the last n lines QEMU wrote to its standard error.
func (g *Guest) QEMUStderr(n int) []string { return g.stderr.tail(n) }

// Exited reports whether QEMU has exited.
func (g *Guest) Exited() bool { return g.proc.Exited() }

// CPUTime is how long QEMU has run on a CPU: under TCG, a measure of how
// far the guest got that does not depend on how busy the machine is.
func (g *Guest) CPUTime() time.Duration { return g.proc.CPUTime() }

// ErrCPUBudget: the guest used up the CPU time it was given (WithCPUBudget)
// without getting where it was waited for.
var ErrCPUBudget = errors.New("guest used up its CPU budget")

// WithCPUBudget returns a context that ends, with a cause wrapping
// ErrCPUBudget, once QEMU has run for cpu on a CPU since it started, or
// when ctx ends. A wait bounded by it gives the guest a fixed amount of
// work rather than of wall time, so a machine busy with other work makes
// it longer, not fail: deadlines that wait on a guest derive from the
// guest's measured speed.
func (g *Guest) WithCPUBudget(ctx context.Context, cpu time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-g.proc.Done():
				return
			case <-t.C:
				if used := g.CPUTime(); used >= cpu {
					cancel(fmt.Errorf("guestboot: %w: QEMU ran %s on a CPU (%s since it started)",
						ErrCPUBudget, used.Round(time.Second), time.Since(g.started).Round(time.Second)))
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// WaitConsole waits for a console line containing substr and returns it.
// It returns early, with an error wrapping ErrBootFailed, when the console
// shows a failed boot (BootFailure), or ErrExited when QEMU exits.
func (g *Guest) WaitConsole(ctx context.Context, substr string) (string, error) {
	line, _, err := g.console.wait(ctx, 0, func(l string) bool {
		return strings.Contains(l, substr) || BootFailure(l)
	})
	switch {
	case err != nil:
		return "", g.waitErr(err, "console line "+strconv.Quote(substr))
	case !strings.Contains(line, substr):
		return line, fmt.Errorf("guestboot: %w: %s", ErrBootFailed, line)
	}
	return line, nil
}

// agentRetry is how long one guest-sync waits for the agent before the
// next try.
const agentRetry = 3 * time.Second

// WaitAgent waits until the guest agent answers guest-sync and guest-ping,
// as KubeVirt's AgentConnected condition does. It returns early, with an
// error wrapping ErrBootFailed, when the console shows a failed boot, and
// with ErrExited when QEMU exits; otherwise it waits until ctx ends.
func (g *Guest) WaitAgent(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		line, _, err := g.console.wait(ctx, 0, BootFailure)
		switch {
		case err == nil:
			cancel(fmt.Errorf("guestboot: %w: %s", ErrBootFailed, line))
		case errors.Is(err, errConsoleClosed):
			cancel(fmt.Errorf("guestboot: %w: %v", ErrExited, g.proc.Err()))
		}
	}()
	for {
		try, cancelTry := context.WithTimeout(ctx, agentRetry)
		err := g.agent.call(try, "guest-ping", nil, nil)
		cancelTry()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ctx.Err()) {
				return cause
			}
			return fmt.Errorf("guestboot: no guest agent after %s: %w", time.Since(g.started).Round(time.Second), ctx.Err())
		}
		// A dial error comes back at once: do not spin.
		_ = retry.Sleep(ctx, 200*time.Millisecond)
	}
}

// Ping runs guest-ping.
func (g *Guest) Ping(ctx context.Context) error {
	return g.agent.call(ctx, "guest-ping", nil, nil)
}

// OSInfo runs guest-get-osinfo.
func (g *Guest) OSInfo(ctx context.Context) (OSInfo, error) {
	var info OSInfo
	err := g.agent.call(ctx, "guest-get-osinfo", nil, &info)
	return info, err
}

// Interfaces runs guest-network-get-interfaces.
func (g *Guest) Interfaces(ctx context.Context) ([]Interface, error) {
	var ifs []Interface
	err := g.agent.call(ctx, "guest-network-get-interfaces", nil, &ifs)
	return ifs, err
}

// Stop kills QEMU (its whole process group), waits for it, and removes
// the guest's temporary files. The images are untouched. Safe to call more
// than once.
func (g *Guest) Stop() {
	g.stop.Do(func() {
		g.agent.close()
		g.proc.Kill()
		g.release()
		_ = os.RemoveAll(g.dir)
	})
}

func (g *Guest) waitErr(err error, what string) error {
	if errors.Is(err, errConsoleClosed) {
		return fmt.Errorf("guestboot: %w before a %s: %v", ErrExited, what, g.proc.Err())
	}
	return fmt.Errorf("guestboot: no %s after %s (QEMU ran %s on a CPU): %w", what, time.Since(g.started).Round(time.Second), g.CPUTime().Round(time.Second), err)
}

// waitFor polls cond every 20 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := retry.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
