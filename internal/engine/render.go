package engine

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Annotations the engine puts on the objects it creates, for people
// inspecting them.
const (
	AnnotationSourceHost   = "vmmigration.io/source-host"
	AnnotationSourceVM     = "vmmigration.io/source-vm"
	AnnotationSourcePath   = "vmmigration.io/source-path"
	AnnotationSourceSHA256 = "vmmigration.io/source-sha256"
)

// LabelMigration marks the objects of a migration: its value is the
// migration's name (the destination VM's).
const LabelMigration = kube.LabelMigration

// IsOwnLabel reports whether a label key is one the engine sets on the
// objects it makes (not one a user configured).
func IsOwnLabel(key string) bool {
	return key == kube.LabelMigration || key == kube.LabelManagedBy
}

// labels returns the user's labels plus ours (ours win).
func (s Spec) labels() map[string]string {
	out := maps.Clone(s.Labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, kube.MigrationLabels(s.Name))
	return out
}

// roundUpMiB rounds n bytes up to a whole MiB.
func roundUpMiB(n int64) int64 {
	const mib = 1 << 20
	return (n + mib - 1) / mib * mib
}

// renderDataVolume is the DataVolume for disk d.
func (r *run) renderDataVolume(d record.DiskEvidence) *cdiv1beta1.DataVolume {
	s := r.spec
	am := corev1.PersistentVolumeAccessMode(s.AccessMode)
	vm := corev1.PersistentVolumeMode(s.VolumeMode)
	sc := s.StorageClass
	src := &cdiv1beta1.DataVolumeSource{}
	annotations := map[string]string{
		AnnotationSourceHost:   r.rec().Identity.Host,
		AnnotationSourceVM:     r.rec().Identity.VMName,
		AnnotationSourcePath:   d.SourcePath,
		AnnotationSourceSHA256: d.SourceSHA256,
		// Bind and fill the claim now even where the StorageClass
		// waits for a first consumer: the VM is created Halted, so
		// no pod would ever consume it.
		cdi.AnnImmediateBinding: "true",
	}
	size := roundUpMiB(d.SizeBytes)
	switch {
	case r.inCluster():
		// An empty claim, which the disk's copy Job fills. It asks for
		// exactly the disk: the copy's journal and the room a chain's
		// deltas need are in the disk's journal claim, and a claim
		// larger than the disk would show the guest a larger disk where
		// KubeVirt's ExpandDisks grows disk.img to fill its claim (and
		// a device is the disk, all of it). Migrations recorded before
		// journal claims keep that room beside disk.img.
		src.Blank = &cdiv1beta1.DataVolumeBlankImage{}
		if room := r.clusterRoom(d); room > 0 && !r.journalClaims() {
			size += room
			annotations[AnnotationScratchBytes] = strconv.FormatInt(room, 10)
		}
	case s.Transport.Kind == TransportHTTP:
		src.HTTP = &cdiv1beta1.DataVolumeSourceHTTP{URL: d.ArtifactURL}
		if s.Transport.StagingCAPEM != "" {
			src.HTTP.CertConfigMap = StagingCAConfigMapName(s.Name)
		}
	default:
		src.Upload = &cdiv1beta1.DataVolumeSourceUpload{}
	}
	return &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: d.DataVolume, Labels: s.labels(),
			Annotations: annotations,
		},
		Spec: cdiv1beta1.DataVolumeSpec{
			Source: src,
			Storage: &cdiv1beta1.StorageSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{am},
				VolumeMode:       &vm,
				StorageClassName: &sc,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
				}},
			},
		},
	}
}

// MachineType is the rendered VMs' machine type: KubeVirt's q35, the one
// virt-v2v converts guests for.
const MachineType = "q35"

// hypervSpinlockRetries is the spinlock retry count given to Windows
// guests (Hyper-V's recommended 8191, as virt-v2v's libvirt output sets).
const hypervSpinlockRetries = 8191

// isWindows reports whether the migrated guest is Windows: as virt-v2v
// inspected it, else as the .vmx declares it.
func (r *run) isWindows() bool {
	if c := r.rec().Conversion; c != nil && c.OS.Type != "" {
		return c.OS.Type == "windows"
	}
	return r.rec().Source != nil && isWindowsGuest(r.rec().Source.GuestOS)
}

// cpuTopology is the VM's CPU layout from numvcpus and
// cpuid.coresPerSocket: VMware gives each vCPU its own socket unless
// coresPerSocket says otherwise.
func cpuTopology(src *record.SourceInventory) *kubevirtv1.CPU {
	cpus := max(src.CPUs, 1)
	cores := src.CoresPerSocket
	if cores <= 0 || cpus%cores != 0 {
		cores = 1
	}
	return &kubevirtv1.CPU{Sockets: uint32(cpus / cores), Cores: uint32(cores), Threads: 1}
}

// windowsFeatures are the Hyper-V enlightenments KubeVirt gives Windows
// guests so that they run well under KVM.
func windowsFeatures() *kubevirtv1.FeatureHyperv {
	t := true
	on := &kubevirtv1.FeatureState{Enabled: &t}
	retries := uint32(hypervSpinlockRetries)
	return &kubevirtv1.FeatureHyperv{
		Relaxed: on, VAPIC: on, VPIndex: on, SyNIC: on, Reset: on, Frequencies: on,
		Spinlocks:  &kubevirtv1.FeatureSpinlocks{FeatureState: kubevirtv1.FeatureState{Enabled: &t}, Retries: &retries},
		SyNICTimer: &kubevirtv1.SyNICTimer{FeatureState: kubevirtv1.FeatureState{Enabled: &t}},
	}
}

// renderVM is the VirtualMachine for the recorded inventory and disks,
// with runStrategy Halted.
func (r *run) renderVM() (*kubevirtv1.VirtualMachine, error) {
	s, src := r.spec, r.rec().Source
	if src == nil {
		return nil, fmt.Errorf("no source inventory recorded")
	}
	disks, vols := renderDisks(s, r.rec().Disks)
	ifaces, nets, pod, err := renderNetworks(s, src)
	if err != nil {
		return nil, err
	}
	domain := r.renderDomain(src, disks, ifaces, pod)
	halted := kubevirtv1.RunStrategyHalted
	labels := s.labels()
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: s.Name, Labels: labels,
			Annotations: map[string]string{
				AnnotationSourceHost: r.rec().Identity.Host,
				AnnotationSourceVM:   r.rec().Identity.VMName,
			},
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: domain, Networks: nets, Volumes: vols,
				},
			},
		},
	}
	return vm, nil
}

// renderDisks is one disk and one DataVolume volume per migrated disk, in
// the source's order; the first boots.
func renderDisks(s Spec, evidence []record.DiskEvidence) ([]kubevirtv1.Disk, []kubevirtv1.Volume) {
	var disks []kubevirtv1.Disk
	var vols []kubevirtv1.Volume
	for i, d := range evidence {
		name := fmt.Sprintf("disk-%d", i)
		disk := kubevirtv1.Disk{Name: name, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBus(s.DiskBus)}}}
		if i == 0 {
			one := uint(1)
			disk.BootOrder = &one
		}
		disks = append(disks, disk)
		vols = append(vols, kubevirtv1.Volume{Name: name, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: d.DataVolume}}})
	}
	return disks, vols
}

// renderNetworks is one interface and network per source NIC, through the
// network map, keeping each NIC's MAC address. pod says whether one NIC
// is on the pod network (KubeVirt allows at most one).
func renderNetworks(s Spec, src *record.SourceInventory) (ifaces []kubevirtv1.Interface, nets []kubevirtv1.Network, pod bool, err error) {
	for i, n := range src.NICs {
		target, ok := s.NetworkMap[n.Network]
		if !ok {
			return nil, nil, false, fmt.Errorf("NIC %s on network %q has no entry in the network map", n.Device, n.Network)
		}
		name := fmt.Sprintf("nic-%d", i)
		iface := kubevirtv1.Interface{Name: name, MacAddress: strings.ToLower(n.MAC), Model: s.NICModel}
		net := kubevirtv1.Network{Name: name}
		if target == preflight.PodNetwork {
			if pod {
				return nil, nil, false, fmt.Errorf("more than one NIC is mapped to the pod network; KubeVirt allows one")
			}
			pod = true
			net.Pod = &kubevirtv1.PodNetwork{}
			if s.PodBinding == "bridge" {
				iface.Bridge = &kubevirtv1.InterfaceBridge{}
			} else {
				iface.Masquerade = &kubevirtv1.InterfaceMasquerade{}
			}
		} else {
			net.Multus = &kubevirtv1.MultusNetwork{NetworkName: target}
			iface.Bridge = &kubevirtv1.InterfaceBridge{}
		}
		ifaces = append(ifaces, iface)
		nets = append(nets, net)
	}
	return ifaces, nets, pod, nil
}

// renderDomain is the guest's hardware: CPU, memory, machine, clock,
// firmware and the features Windows and Secure Boot need.
func (r *run) renderDomain(src *record.SourceInventory, disks []kubevirtv1.Disk, ifaces []kubevirtv1.Interface, pod bool) kubevirtv1.DomainSpec {
	t, f := true, false
	mem := resource.NewQuantity(int64(src.MemoryMiB)<<20, resource.BinarySI)
	domain := kubevirtv1.DomainSpec{
		CPU:     cpuTopology(src),
		Memory:  &kubevirtv1.Memory{Guest: mem},
		Machine: &kubevirtv1.Machine{Type: MachineType},
		Devices: kubevirtv1.Devices{
			Disks: disks, Interfaces: ifaces,
		},
	}
	if src.VTPM {
		domain.Devices.TPM = &kubevirtv1.TPMDevice{}
	}
	// Linux keeps the hardware clock in UTC, Windows in local time.
	domain.Clock = &kubevirtv1.Clock{ClockOffset: kubevirtv1.ClockOffset{UTC: &kubevirtv1.ClockOffsetUTC{}}}
	var features kubevirtv1.Features
	if r.isWindows() {
		tz := kubevirtv1.ClockOffsetTimezone(r.spec.Timezone)
		domain.Clock = &kubevirtv1.Clock{ClockOffset: kubevirtv1.ClockOffset{Timezone: &tz},
			Timer: &kubevirtv1.Timer{Hyperv: &kubevirtv1.HypervTimer{}}}
		features.Hyperv = windowsFeatures()
	}
	if !pod {
		// Without a pod NIC, KubeVirt would add one of its own.
		domain.Devices.AutoattachPodInterface = &f
	}
	if src.Firmware == "efi" {
		sb := src.SecureBoot
		// KubeVirt defaults secureBoot to true for EFI: say it always.
		domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: &sb}}}
		if sb {
			features.SMM = &kubevirtv1.FeatureState{Enabled: &t}
		}
	} else {
		domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{BIOS: &kubevirtv1.BIOS{}}}
	}
	if features.SMM != nil || features.Hyperv != nil {
		domain.Features = &features
	}
	return domain
}
