package kubesim

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// ForeignDisk is one disk of a VM that another migration tool made.
type ForeignDisk struct {
	// Name of the DataVolume (and its PVC).
	Name      string
	SizeBytes int64
	// PVCSpec sizes the DataVolume with spec.pvc, as older tools do,
	// instead of spec.storage.
	PVCSpec bool
}

// ForeignNIC is one interface of such a VM.
type ForeignNIC struct {
	MAC string
	// Multus names a NetworkAttachmentDefinition; empty means the pod
	// network.
	Multus string
}

// ForeignVM returns a VirtualMachine and its blank DataVolumes as a
// migration tool other than this provider leaves them: no vmmigration
// labels, the tool's own labels, volumes and interfaces named its way.
// The simulated CDI completes blank DataVolumes like any other.
func ForeignVM(namespace, name, storageClass string, runStrategy kubevirtv1.VirtualMachineRunStrategy, labels map[string]string,
	disks []ForeignDisk, nics []ForeignNIC) (*kubevirtv1.VirtualMachine, []*cdiv1.DataVolume) {
	var dvs []*cdiv1.DataVolume
	var vdisks []kubevirtv1.Disk
	var vols []kubevirtv1.Volume
	for i, d := range disks {
		q := *resource.NewQuantity(d.SizeBytes, resource.BinarySI)
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: d.Name, Labels: map[string]string{"migrated-by": "other-tool"}},
			Spec:       cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}},
		}
		req := corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}}
		sc := storageClass
		if d.PVCSpec {
			dv.Spec.PVC = &corev1.PersistentVolumeClaimSpec{StorageClassName: &sc, Resources: req,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
		} else {
			dv.Spec.Storage = &cdiv1.StorageSpec{StorageClassName: &sc, Resources: req,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
		}
		dvs = append(dvs, dv)
		vname := fmt.Sprintf("vol%d", i)
		vdisks = append(vdisks, kubevirtv1.Disk{Name: vname, DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}})
		vols = append(vols, kubevirtv1.Volume{Name: vname, VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: d.Name}}})
	}
	var ifaces []kubevirtv1.Interface
	var nets []kubevirtv1.Network
	for i, n := range nics {
		iname := fmt.Sprintf("net%d", i)
		iface := kubevirtv1.Interface{Name: iname, MacAddress: n.MAC, Model: "virtio"}
		net := kubevirtv1.Network{Name: iname}
		if n.Multus == "" {
			iface.Masquerade = &kubevirtv1.InterfaceMasquerade{}
			net.Pod = &kubevirtv1.PodNetwork{}
		} else {
			iface.Bridge = &kubevirtv1.InterfaceBridge{}
			net.Multus = &kubevirtv1.MultusNetwork{NetworkName: n.Multus}
		}
		ifaces = append(ifaces, iface)
		nets = append(nets, net)
	}
	rs := runStrategy
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &rs,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						Memory:  &kubevirtv1.Memory{Guest: resource.NewQuantity(1<<30, resource.BinarySI)},
						Devices: kubevirtv1.Devices{Disks: vdisks, Interfaces: ifaces},
					},
					Networks: nets, Volumes: vols,
				},
			},
		},
	}
	return vm, dvs
}
