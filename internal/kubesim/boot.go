package kubesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
)

// Reasons the sim writes on booted VMIs.
const (
	// ReasonGuestStartFailed: QEMU could not be started for the VMI (an
	// image is missing, a device is not supported, QEMU is not installed).
	ReasonGuestStartFailed = "FailedCreate"
	// ReasonGuestExited: QEMU exited by itself.
	ReasonGuestExited = "GuestExited"
)

const (
	// agentRefresh is how often a connected guest agent is asked again
	// (guest-ping, and its interfaces: DHCP may answer after the agent
	// starts).
	agentRefresh = 3 * time.Second
	// agentCallTimeout bounds one agent command.
	agentCallTimeout = 20 * time.Second
	// powerDown is what Linux prints on the console when the guest powers
	// itself off: QEMU then exits, and the VMI Succeeded.
	powerDown = "reboot: Power down"
)

// bootedGuest is the QEMU run of one VMI (by UID) and what its guest agent
// last said. Fields after mu are guarded by it.
type bootedGuest struct {
	namespace, name string
	uid             types.UID
	cancel          context.CancelFunc
	done            chan struct{}

	mu         sync.Mutex
	pod        string // the virt-launcher pod's name, once created
	guest      *guestboot.Guest
	running    bool   // QEMU runs
	startErr   error  // QEMU could not be started
	exited     bool   // QEMU exited by itself
	poweredOff bool   // ... after the guest powered off
	exitMsg    string // why it exited
	bootFail   string // the console line showing a failed boot
	agent      bool
	osInfo     guestboot.OSInfo
	ifaces     []guestboot.Interface
}

// bootState is a consistent copy of a bootedGuest's state.
type bootState struct {
	pod                         string
	running, exited, poweredOff bool
	startErr                    error
	exitMsg, bootFail           string
	agent                       bool
	osInfo                      guestboot.OSInfo
	ifaces                      []guestboot.Interface
	guest                       *guestboot.Guest
}

func (b *bootedGuest) state() bootState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bootState{
		pod: b.pod, running: b.running, exited: b.exited, poweredOff: b.poweredOff, startErr: b.startErr,
		exitMsg: b.exitMsg, bootFail: b.bootFail, agent: b.agent, osInfo: b.osInfo,
		ifaces: slices.Clone(b.ifaces), guest: b.guest,
	}
}

func (b *bootedGuest) update(f func(b *bootedGuest)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// Guest returns the QEMU guest running the VMI namespace/name, for tests'
// evidence (its console, its command line); nil when the sim boots no
// guest for it (Options.BootGuests off, not yet started, or stopped).
func (s *Sim) Guest(namespace, name string) *guestboot.Guest {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.boots {
		if b.namespace == namespace && b.name == name {
			return b.state().guest
		}
	}
	return nil
}

// bootFor returns the VMI's boot, starting QEMU (in the background, once a
// guest slot is free) the first time.
func (s *Sim) bootFor(vmi *kubevirtv1.VirtualMachineInstance) *bootedGuest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boots[vmi.UID]; b != nil {
		return b
	}
	ctx, cancel := context.WithCancel(s.ctx)
	b := &bootedGuest{namespace: vmi.Namespace, name: vmi.Name, uid: vmi.UID, cancel: cancel, done: make(chan struct{})}
	s.boots[vmi.UID] = b
	vmi = vmi.DeepCopy()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(b.done)
		defer cancel()
		s.runGuest(ctx, b, vmi)
		s.poke()
	}()
	return b
}

// runGuest boots the VMI's disks and follows the guest until QEMU exits or
// ctx ends (VMI gone, Sim stopped), when it stops QEMU.
func (s *Sim) runGuest(ctx context.Context, b *bootedGuest, vmi *kubevirtv1.VirtualMachineInstance) {
	select {
	case s.bootSlots <- struct{}{}:
		defer func() { <-s.bootSlots }()
	case <-ctx.Done():
		return
	}
	spec, err := s.guestSpec(ctx, vmi)
	var g *guestboot.Guest
	if err == nil {
		g, err = guestboot.Start(ctx, spec)
	}
	if err != nil {
		if ctx.Err() == nil {
			b.update(func(b *bootedGuest) { b.startErr = err })
		}
		return
	}
	defer g.Stop()
	b.update(func(b *bootedGuest) { b.guest, b.running = g, true })
	s.poke()

	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for !g.Exited() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	s.followAgent(ctx, b, g, exited)
	select {
	case <-ctx.Done():
		return // stopped by the sim: the VMI is gone
	case <-exited:
	}
	if ctx.Err() != nil {
		return
	}
	tail := g.ConsoleTail(20)
	off := slices.ContainsFunc(tail, func(l string) bool { return strings.Contains(l, powerDown) })
	msg := "QEMU exited"
	if stderr := g.QEMUStderr(3); len(stderr) > 0 {
		msg += ": " + strings.Join(stderr, "; ")
	}
	b.update(func(b *bootedGuest) {
		b.running, b.exited, b.poweredOff, b.exitMsg, b.agent = false, true, off, msg, false
	})
}

// followAgent waits for the guest agent as virt-handler does, then keeps
// asking it for the guest's OS and interfaces. It returns when QEMU exits
// or ctx ends; a guest whose console shows a failed boot is left running
// without an agent, as in a real cluster.
func (s *Sim) followAgent(ctx context.Context, b *bootedGuest, g *guestboot.Guest, exited <-chan struct{}) {
	for {
		err := g.WaitAgent(ctx)
		switch {
		case errors.Is(err, guestboot.ErrBootFailed):
			b.update(func(b *bootedGuest) { b.bootFail = err.Error() })
			s.poke()
			select {
			case <-ctx.Done():
			case <-exited:
			}
			return
		case err != nil:
			return // QEMU exited, or ctx ended
		}
		for {
			call, cancel := context.WithTimeout(ctx, agentCallTimeout)
			perr := g.Ping(call)
			var (
				info   guestboot.OSInfo
				ifs    []guestboot.Interface
				ierr   error
				ifsErr error
			)
			if perr == nil {
				info, ierr = g.OSInfo(call)
				ifs, ifsErr = g.Interfaces(call)
			}
			cancel()
			if perr != nil {
				b.update(func(b *bootedGuest) { b.agent, b.ifaces = false, nil })
				s.poke()
				break // wait for it again
			}
			b.update(func(b *bootedGuest) {
				b.agent = true
				if ierr == nil {
					b.osInfo = info
				}
				if ifsErr == nil {
					b.ifaces = ifs
				}
			})
			s.poke()
			select {
			case <-ctx.Done():
				return
			case <-exited:
				return
			case <-time.After(agentRefresh):
			}
		}
	}
}

// sweepGuests stops the QEMU of every VMI not in live (deleted, or its VM
// stopped) and forgets its boot once its virt-launcher pod is deleted.
func (s *Sim) sweepGuests(ctx context.Context, live map[types.UID]bool) error {
	s.mu.Lock()
	var gone []*bootedGuest
	for uid, b := range s.boots {
		if !live[uid] {
			gone = append(gone, b)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, b := range gone {
		b.cancel()
		st := b.state()
		if st.pod != "" {
			pod := &corev1.Pod{}
			pod.Namespace, pod.Name = b.namespace, st.pod
			if err := s.cl.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("deleting virt-launcher pod %s/%s: %w", b.namespace, st.pod, err))
				continue
			}
		}
		s.mu.Lock()
		delete(s.boots, b.uid)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// stepBootedVMI is stepVMI's Scheduled and Running phases for a VMI whose
// guest really boots: Running once QEMU runs, AgentConnected, guestOSInfo
// and the interfaces' addresses from the guest agent only, Succeeded or
// Failed when QEMU exits.
func (s *Sim) stepBootedVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	st := &vmi.Status
	s.mu.Lock()
	b := s.boots[vmi.UID]
	s.mu.Unlock()
	if b == nil && st.Phase == kubevirtv1.Running {
		// Running in the API server but not here (the sim restarted): its
		// virt-launcher is gone, as after a node failure.
		s.finishVMI(vmi, kubevirtv1.Failed, ReasonGuestExited, "the virt-launcher pod of this VMI is gone")
		return nil
	}
	if b == nil {
		b = s.bootFor(vmi)
	}
	if err := s.ensureLauncherPod(ctx, vmi, b); err != nil {
		return err
	}
	bs := b.state()
	switch {
	case bs.startErr != nil:
		s.finishVMI(vmi, kubevirtv1.Failed, ReasonGuestStartFailed, bs.startErr.Error())
		return nil
	case bs.exited && bs.poweredOff:
		s.finishVMI(vmi, kubevirtv1.Succeeded, ReasonGuestExited, bs.exitMsg)
		return nil
	case bs.exited:
		s.finishVMI(vmi, kubevirtv1.Failed, ReasonGuestExited, bs.exitMsg)
		return nil
	case !bs.running:
		return nil // waiting for a guest slot, or QEMU starting
	}
	if st.Phase != kubevirtv1.Running {
		setVMIPhase(st, kubevirtv1.Running)
	}
	agentCond := kubevirtv1.VirtualMachineInstanceAgentConnected
	if bs.agent {
		setVMICondition(st, agentCond, corev1.ConditionTrue, "", "")
		st.GuestOSInfo = kubevirtv1.VirtualMachineInstanceGuestOSInfo{
			Name: bs.osInfo.Name, KernelRelease: bs.osInfo.KernelRelease, Version: bs.osInfo.Version,
			PrettyName: bs.osInfo.PrettyName, VersionID: bs.osInfo.VersionID, KernelVersion: bs.osInfo.KernelVersion,
			Machine: bs.osInfo.Machine, ID: bs.osInfo.ID,
		}
	} else {
		removeVMICondition(st, agentCond)
		st.GuestOSInfo = kubevirtv1.VirtualMachineInstanceGuestOSInfo{}
	}
	st.Interfaces = agentInterfaces(vmi, bs.agent, bs.ifaces)
	s.setReady(vmi, bs.agent)
	return nil
}

// finishVMI ends the VMI in phase p, as virt-handler does when the domain
// is gone.
func (s *Sim) finishVMI(vmi *kubevirtv1.VirtualMachineInstance, p kubevirtv1.VirtualMachineInstancePhase, reason, msg string) {
	st := &vmi.Status
	if st.Phase != p {
		setVMIPhase(st, p)
	}
	removeVMICondition(st, kubevirtv1.VirtualMachineInstanceAgentConnected)
	st.GuestOSInfo = kubevirtv1.VirtualMachineInstanceGuestOSInfo{}
	setVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, reason, msg)
}

// agentInterfaces reports the VMI's NICs as KubeVirt does with a guest
// agent: names and MACs from the spec, the guest's interface names and
// addresses from the agent (loopback left out). The emulated NIC has
// QEMU's MAC, not the spec's, so the guest's interfaces are matched to the
// spec's in order. Without the agent there are no addresses.
func agentInterfaces(vmi *kubevirtv1.VirtualMachineInstance, agent bool, guest []guestboot.Interface) []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	out := interfaces(vmi, false)
	var nics []guestboot.Interface
	for _, g := range guest {
		if g.Name != "lo" {
			nics = append(nics, g)
		}
	}
	for i := range out {
		ni := &out[i]
		ni.IP, ni.IPs, ni.PodInterfaceName = "", nil, ""
		if !agent || i >= len(nics) {
			continue
		}
		ni.InfoSource = "domain, guest-agent"
		ni.InterfaceName = nics[i].Name
		ni.LinkState = "up"
		for _, fam := range []string{"ipv4", "ipv6"} {
			for _, a := range nics[i].IPAddresses {
				ip := net.ParseIP(a.Address)
				if a.Type != fam || ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
					continue
				}
				ni.IPs = append(ni.IPs, a.Address)
			}
		}
		if len(ni.IPs) > 0 {
			ni.IP = ni.IPs[0]
		}
	}
	return out
}

// guestSpec is the QEMU VM KubeVirt would run for vmi: its disks in boot
// order on their buses, the first interface's NIC model, its firmware,
// memory and CPU topology, on q35. Volumes without an image (cloud-init,
// config maps, ...) are left out.
func (s *Sim) guestSpec(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (guestboot.Spec, error) {
	d := vmi.Spec.Domain
	spec := guestboot.Spec{
		Machine: guestboot.MachineQ35,
		QEMU:    s.opts.GuestQEMU,
		OVMFDir: s.opts.GuestOVMFDir,
		Accel:   s.opts.GuestAccel,
	}
	disks, err := s.bootDisks(ctx, vmi)
	if err != nil {
		return spec, err
	}
	spec.Disks = disks

	switch {
	case len(d.Devices.Interfaces) > 0:
		nic, err := guestNIC(d.Devices.Interfaces[0].Model)
		if err != nil {
			return spec, fmt.Errorf("interface %s: %w", d.Devices.Interfaces[0].Name, err)
		}
		spec.NIC = nic
	case d.Devices.AutoattachPodInterface == nil || *d.Devices.AutoattachPodInterface:
		spec.NIC = guestboot.NICVirtio // KubeVirt adds a pod network interface
	}

	spec.Firmware = guestboot.FirmwareBIOS
	if fw := d.Firmware; fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		spec.Firmware = guestboot.FirmwareEFI
		if sb := fw.Bootloader.EFI.SecureBoot; sb == nil || *sb {
			spec.Firmware = guestboot.FirmwareEFISecureBoot // KubeVirt's default with EFI
		}
	}

	if d.Memory != nil && d.Memory.Guest != nil {
		spec.MemoryMiB = int(d.Memory.Guest.Value() >> 20)
	} else if m, ok := d.Resources.Requests[corev1.ResourceMemory]; ok {
		spec.MemoryMiB = int(m.Value() >> 20)
	}
	if c := d.CPU; c != nil {
		spec.Sockets, spec.Cores, spec.Threads = int(c.Sockets), int(c.Cores), int(c.Threads)
	}
	return spec, nil
}

// bootDisks returns vmi's disks backed by a DataVolume or claim, by boot
// order (disks without one last), then in declaration order.
func (s *Sim) bootDisks(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) ([]guestboot.Disk, error) {
	type ordered struct {
		disk  guestboot.Disk
		order uint
		index int
	}
	var disks []ordered
	for i, disk := range vmi.Spec.Domain.Devices.Disks {
		claim := volumeClaim(vmi.Spec.Volumes, disk.Name)
		if claim == "" {
			continue
		}
		gd, err := s.bootDisk(ctx, vmi.Namespace, disk, claim)
		if err != nil {
			return nil, err
		}
		o := ordered{disk: gd, order: ^uint(0), index: i}
		if disk.BootOrder != nil {
			o.order = *disk.BootOrder
		}
		disks = append(disks, o)
	}
	if len(disks) == 0 {
		return nil, errors.New("no disk with a DataVolume or PersistentVolumeClaim to boot")
	}
	slices.SortStableFunc(disks, func(a, b ordered) int {
		switch {
		case a.order < b.order:
			return -1
		case a.order > b.order:
			return 1
		}
		return a.index - b.index
	})
	out := make([]guestboot.Disk, 0, len(disks))
	for _, o := range disks {
		out = append(out, o.disk)
	}
	return out, nil
}

// volumeClaim is the claim behind the volume named name: its DataVolume's
// or its PersistentVolumeClaim's; "" for other volumes.
func volumeClaim(volumes []kubevirtv1.Volume, name string) string {
	var claim string
	for _, v := range volumes {
		if v.Name != name {
			continue
		}
		switch {
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	return claim
}

// bootDisk is disk as QEMU attaches it, its image that of claim.
func (s *Sim) bootDisk(ctx context.Context, ns string, disk kubevirtv1.Disk, claim string) (guestboot.Disk, error) {
	if disk.Disk == nil {
		return guestboot.Disk{}, fmt.Errorf("disk %s: only disk devices (not cdrom or lun) can be booted by kubesim", disk.Name)
	}
	bus, err := guestBus(disk.Disk.Bus)
	if err != nil {
		return guestboot.Disk{}, fmt.Errorf("disk %s: %w", disk.Name, err)
	}
	path, format, err := s.claimImage(ctx, ns, claim)
	if err != nil {
		return guestboot.Disk{}, fmt.Errorf("disk %s: %w", disk.Name, err)
	}
	return guestboot.Disk{Path: path, Format: format, Bus: bus}, nil
}

// guestBus maps a KubeVirt disk bus to QEMU's (KubeVirt's "scsi" is
// virtio-scsi; an empty bus is virtio).
func guestBus(b kubevirtv1.DiskBus) (guestboot.Bus, error) {
	switch b {
	case "", kubevirtv1.DiskBusVirtio:
		return guestboot.BusVirtio, nil
	case kubevirtv1.DiskBusSATA:
		return guestboot.BusSATA, nil
	case kubevirtv1.DiskBusSCSI:
		return guestboot.BusSCSI, nil
	}
	return "", fmt.Errorf("disk bus %q is not supported by kubesim", b)
}

// guestNIC maps a KubeVirt interface model to QEMU's (empty is virtio).
func guestNIC(model string) (guestboot.NICModel, error) {
	switch model {
	case "", "virtio":
		return guestboot.NICVirtio, nil
	case "e1000e":
		return guestboot.NICE1000E, nil
	}
	return "", fmt.Errorf("interface model %q is not supported by kubesim", model)
}

// claimImage is the image file of the DataVolume or PVC namespace/name and
// its format (as validated on arrival, or asked of qemu-img).
func (s *Sim) claimImage(ctx context.Context, namespace, name string) (string, string, error) {
	if r, ok := s.ReceivedImage(namespace, name); ok && r.Format != "" {
		return r.Path, r.Format, nil
	}
	path := imagePath(s.dir, namespace, name)
	if _, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("claim %s/%s holds no image: %w", namespace, name, err)
	}
	out, err := exec.CommandContext(ctx, s.opts.QemuImg, "info", "--output=json", path).Output()
	if err != nil {
		return "", "", fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	var info struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return "", "", fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return path, info.Format, nil
}
