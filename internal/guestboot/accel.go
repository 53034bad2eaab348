package guestboot

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// Accelerator names, as QEMU's -accel takes them.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Accel is the accelerator guests run with and why it was chosen.
type Accel struct {
	// Name is AccelKVM or AccelTCG.
	Name string
	// Reason says why: "vmx flag and a working /dev/kvm", or what the KVM
	// probe found missing.
	Reason string
}

// KVM reports whether the accelerator is KVM.
func (a Accel) KVM() bool { return a.Name == AccelKVM }

// QEMUArgs are the -accel and -cpu arguments for QEMU: KVM with the host CPU,
// or TCG emulating every feature QEMU knows (-cpu max).
func (a Accel) QEMUArgs() []string {
	if a.KVM() {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg", "-cpu", "max"}
}

// LibguestfsEnv is the environment libguestfs (and so virt-v2v) needs to
// run its helper VM with this accelerator: the direct backend, and TCG
// forced when KVM is not usable (libguestfs otherwise opens /dev/kvm by
// itself where one exists, and its helper VM hangs on a nested one).
func (a Accel) LibguestfsEnv() []string {
	env := []string{"LIBGUESTFS_BACKEND=direct"}
	if !a.KVM() {
		env = append(env, "LIBGUESTFS_BACKEND_SETTINGS=force_tcg")
	}
	return env
}

func (a Accel) String() string { return a.Name + " (" + a.Reason + ")" }

var (
	probeOnce sync.Once
	probed    Accel
)

// ProbeAccel picks the accelerator for guests on this machine, once per
// process. KVM needs both hardware virtualisation visible to this kernel
// (the vmx or svm flag in /proc/cpuinfo) and a /dev/kvm that answers: a
// nested paravirtual /dev/kvm without the flag runs unmodified guest
// kernels far slower than TCG, or not at all, so it counts as absent.
func ProbeAccel() Accel {
	probeOnce.Do(func() {
		cpuinfo, err := os.ReadFile("/proc/cpuinfo")
		if err != nil {
			probed = Accel{Name: AccelTCG, Reason: fmt.Sprintf("cannot read /proc/cpuinfo: %v", err)}
			return
		}
		probed = probeAccel(cpuinfo, "/dev/kvm")
	})
	return probed
}

// probeAccel is ProbeAccel's decision for a given /proc/cpuinfo content
// and KVM device.
func probeAccel(cpuinfo []byte, kvmDevice string) Accel {
	flag := cpuFlag(cpuinfo)
	if flag == "" {
		return Accel{Name: AccelTCG, Reason: "no vmx or svm flag in /proc/cpuinfo"}
	}
	if err := kvmWorks(kvmDevice); err != nil {
		return Accel{Name: AccelTCG, Reason: fmt.Sprintf("%s flag present but %v", flag, err)}
	}
	return Accel{Name: AccelKVM, Reason: flag + " flag and a working " + kvmDevice}
}

// cpuFlag returns "vmx" or "svm" when a "flags" line of cpuinfo has it.
func cpuFlag(cpuinfo []byte) string {
	for _, line := range bytes.Split(cpuinfo, []byte("\n")) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(key)) != "flags" {
			continue
		}
		for _, f := range bytes.Fields(value) {
			switch string(f) {
			case "vmx", "svm":
				return string(f)
			}
		}
	}
	return ""
}

// KVM ioctls (linux/kvm.h): _IO(KVMIO, 0x00) and _IO(KVMIO, 0x01).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	kvmAPIVersion    = 12
)

// kvmWorks opens the KVM device, checks its API version and creates (and
// drops) a VM, which is what QEMU does first.
func kvmWorks(device string) error {
	f, err := os.OpenFile(device, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", device, err)
	}
	defer f.Close()
	v, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), kvmGetAPIVersion, 0)
	if errno != 0 {
		return fmt.Errorf("%s: KVM_GET_API_VERSION: %w", device, errno)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("%s: KVM API version %d, want %d", device, v, kvmAPIVersion)
	}
	vm, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), kvmCreateVM, 0)
	if errno != 0 {
		return fmt.Errorf("%s: KVM_CREATE_VM: %w", device, errno)
	}
	_ = syscall.Close(int(vm))
	return nil
}
