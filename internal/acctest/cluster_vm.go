package acctest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// VM is what the tests check of a KubeVirt VirtualMachine.
type VM struct {
	Name, UID  string
	Generation int64
	// RunStrategy is spec.runStrategy, "" when unset.
	RunStrategy         string
	Labels, Annotations map[string]string
	// EFISecureBoot: the firmware boots by EFI with secure boot on.
	EFISecureBoot bool
	// SMM: the SMM feature is present in the domain.
	SMM bool
	// FirmwareUUID and FirmwareSerial are the guest's SMBIOS identity
	// (spec.template.spec.domain.firmware.uuid and serial).
	FirmwareUUID, FirmwareSerial string
	Disks                        []VMDisk
	Interfaces                   []VMInterface
	Networks                     []VMNetwork
	// DataVolumes names the DataVolume volumes, in order.
	DataVolumes []string
}

// VMDisk is one disk of the domain.
type VMDisk struct {
	Name string
	// Bus of a disk target ("virtio", "sata", ...); "" for other devices.
	Bus string
	// BootOrder is 0 when unset.
	BootOrder uint
}

// VMInterface is one network interface of the domain.
type VMInterface struct {
	Name, MAC string
}

// VMNetwork is one network of the VM: the pod network or a Multus one.
type VMNetwork struct {
	Name string
	Pod  bool
	// Multus is the NetworkAttachmentDefinition, "" when not Multus.
	Multus string
}

func vmFromKube(vm *kubevirtv1.VirtualMachine) VM {
	out := VM{Name: vm.Name, UID: string(vm.UID), Generation: vm.Generation, Labels: vm.Labels, Annotations: vm.Annotations}
	if vm.Spec.RunStrategy != nil {
		out.RunStrategy = string(*vm.Spec.RunStrategy)
	}
	if vm.Spec.Template == nil {
		return out
	}
	spec := vm.Spec.Template.Spec
	if fw := spec.Domain.Firmware; fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil &&
		fw.Bootloader.EFI.SecureBoot != nil && *fw.Bootloader.EFI.SecureBoot {
		out.EFISecureBoot = true
	}
	out.SMM = spec.Domain.Features != nil && spec.Domain.Features.SMM != nil
	if fw := spec.Domain.Firmware; fw != nil {
		out.FirmwareUUID, out.FirmwareSerial = string(fw.UUID), fw.Serial
	}
	for _, d := range spec.Domain.Devices.Disks {
		disk := VMDisk{Name: d.Name}
		if d.Disk != nil {
			disk.Bus = string(d.Disk.Bus)
		}
		if d.BootOrder != nil {
			disk.BootOrder = *d.BootOrder
		}
		out.Disks = append(out.Disks, disk)
	}
	for _, i := range spec.Domain.Devices.Interfaces {
		out.Interfaces = append(out.Interfaces, VMInterface{Name: i.Name, MAC: i.MacAddress})
	}
	for _, n := range spec.Networks {
		net := VMNetwork{Name: n.Name, Pod: n.Pod != nil}
		if n.Multus != nil {
			net.Multus = n.Multus.NetworkName
		}
		out.Networks = append(out.Networks, net)
	}
	for _, v := range spec.Volumes {
		if v.DataVolume != nil {
			out.DataVolumes = append(out.DataVolumes, v.DataVolume.Name)
		}
	}
	return out
}

func (c *Cluster) getVM(t testing.TB, namespace, name string) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, vm); err != nil {
		t.Fatalf("get VirtualMachine %s/%s: %v", namespace, name, err)
	}
	return vm
}

// VM reads a VirtualMachine; it fails the test when there is none.
func (c *Cluster) VM(t testing.TB, namespace, name string) VM {
	t.Helper()
	return vmFromKube(c.getVM(t, namespace, name))
}

// CreateVM creates a bare VirtualMachine (an empty domain, no disks) as
// somebody other than the provider would, with the given labels and run
// strategy ("" leaves it unset), and returns it as created.
func (c *Cluster) CreateVM(t testing.TB, namespace, name, runStrategy string, labels map[string]string) VM {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{}},
		}},
	}
	if runStrategy != "" {
		rs := kubevirtv1.VirtualMachineRunStrategy(runStrategy)
		vm.Spec.RunStrategy = &rs
	}
	if err := c.cl.Create(t.Context(), vm); err != nil {
		t.Fatalf("create VirtualMachine %s/%s: %v", namespace, name, err)
	}
	return vmFromKube(vm)
}

// ForeignVM describes a VirtualMachine and its DataVolumes as another
// migration tool leaves them (see kubesim.ForeignVM).
type ForeignVM struct {
	Namespace, Name, StorageClass string
	RunStrategy                   string
	Labels                        map[string]string
	Disks                         []kubesim.ForeignDisk
	NICs                          []kubesim.ForeignNIC
}

// CreateForeignVM creates the DataVolumes, then the VirtualMachine, of f.
func (c *Cluster) CreateForeignVM(t testing.TB, f ForeignVM) {
	t.Helper()
	vm, dvs := kubesim.ForeignVM(f.Namespace, f.Name, f.StorageClass, kubevirtv1.VirtualMachineRunStrategy(f.RunStrategy),
		f.Labels, f.Disks, f.NICs)
	for _, dv := range dvs {
		if err := c.cl.Create(t.Context(), dv); err != nil {
			t.Fatalf("create DataVolume %s/%s: %v", dv.Namespace, dv.Name, err)
		}
	}
	if err := c.cl.Create(t.Context(), vm); err != nil {
		t.Fatalf("create VirtualMachine %s/%s: %v", vm.Namespace, vm.Name, err)
	}
}

// SetRunStrategy changes a VirtualMachine's spec.runStrategy, as a user
// would outside Terraform.
func (c *Cluster) SetRunStrategy(t testing.TB, namespace, name, runStrategy string) {
	t.Helper()
	vm := c.getVM(t, namespace, name)
	rs := kubevirtv1.VirtualMachineRunStrategy(runStrategy)
	vm.Spec.RunStrategy = &rs
	if err := c.cl.Update(t.Context(), vm); err != nil {
		t.Fatalf("update VirtualMachine %s/%s: %v", namespace, name, err)
	}
}

// DeleteVM deletes a VirtualMachine.
func (c *Cluster) DeleteVM(t testing.TB, namespace, name string) {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.cl.Delete(t.Context(), vm); err != nil {
		t.Fatalf("delete VirtualMachine %s/%s: %v", namespace, name, err)
	}
}

// VMNames lists the VirtualMachines of a namespace carrying all labels.
func (c *Cluster) VMNames(t testing.TB, namespace string, labels map[string]string) []string {
	t.Helper()
	var l kubevirtv1.VirtualMachineList
	if err := c.cl.List(t.Context(), &l, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range l.Items {
		names = append(names, v.Name)
	}
	return names
}

// DataVolume is what the tests check of a CDI DataVolume.
type DataVolume struct {
	Name   string
	Labels map[string]string
	// StorageClass is spec.storage.storageClassName, "" when unset.
	StorageClass string
}

// DataVolume reads a DataVolume; it fails the test when there is none.
func (c *Cluster) DataVolume(t testing.TB, namespace, name string) DataVolume {
	t.Helper()
	dv := &cdiv1beta1.DataVolume{}
	if err := c.cl.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, dv); err != nil {
		t.Fatalf("get DataVolume %s/%s: %v", namespace, name, err)
	}
	out := DataVolume{Name: dv.Name, Labels: dv.Labels}
	if s := dv.Spec.Storage; s != nil && s.StorageClassName != nil {
		out.StorageClass = *s.StorageClassName
	}
	return out
}

// DataVolumeNames lists the DataVolumes of a namespace carrying all labels.
func (c *Cluster) DataVolumeNames(t testing.TB, namespace string, labels map[string]string) []string {
	t.Helper()
	var l cdiv1beta1.DataVolumeList
	if err := c.cl.List(t.Context(), &l, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range l.Items {
		names = append(names, d.Name)
	}
	return names
}

// DeleteDataVolume deletes a DataVolume.
func (c *Cluster) DeleteDataVolume(t testing.TB, namespace, name string) {
	t.Helper()
	dv := &cdiv1beta1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.cl.Delete(t.Context(), dv); err != nil {
		t.Fatalf("delete DataVolume %s/%s: %v", namespace, name, err)
	}
}
