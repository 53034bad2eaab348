package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// realGuestName is the demo VM with a real operating system: a Debian 12
// guest installed the way VMware guests are (an initramfs with only the
// ata and pvscsi drivers), which boots on KubeVirt only once converted.
const realGuestName = "debian-web"

// guestMarker is what the guest prints on its console once booted.
const guestMarker = "VMMIGRATION-GUEST-BOOTED"

// addRealGuest builds the guest image (cached in .testbin/guest, like the
// tests' guest) and registers a VM on the simulated host whose disk holds
// it. It returns the disk's flat file.
func addRealGuest(ctx context.Context, root string, esxi *esxisim.Server) (string, error) {
	step("building the real Debian 12 guest (cached after the first run)")
	out, err := exec.CommandContext(ctx, filepath.Join(root, "tools", "guest", "build.sh"), "bios").Output()
	if err != nil {
		return "", fmt.Errorf("building the guest with tools/guest/build.sh (needs root and scripts/ensure-guest-deps.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	img := lines[len(lines)-1]
	fi, err := os.Stat(img)
	if err != nil {
		return "", err
	}
	id, files, err := esxi.AddVM(esxisim.VMSpec{Name: realGuestName, GuestOS: "debian12-64", CPUs: 2, MemoryMiB: 1024,
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning,
		Disks: []esxisim.DiskSpec{{CapacityBytes: fi.Size(), Thin: true, Controller: "scsi0:0", Content: []esxisim.Extent{}}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", Adapter: "vmxnet3"}}})
	if err != nil {
		return "", err
	}
	if err := convert.CopySparse(img, files.Disks[0].LocalFlat); err != nil {
		return "", err
	}
	fmt.Printf("    Vmid %d  %-20s 1 disk(s), a real guest\n", id, realGuestName)
	return files.Disks[0].LocalFlat, nil
}

// showRealGuest prints what proves the real guest booted on KubeVirt's
// devices: what virt-v2v did, the agent's answers and the console.
func showRealGuest(ctx context.Context, c *testcluster.Cluster) error {
	cl := c.AdminClient()
	rec, err := readRecord(ctx, cl, realGuestName)
	if err != nil {
		return err
	}
	if rec.Phase != record.PhaseCompleted || rec.Conversion == nil {
		return fmt.Errorf("%s is %s (conversion %v): the real guest was not migrated", realGuestName, rec.Phase, rec.Conversion)
	}
	cv := rec.Conversion
	where := ""
	if cv.Job != "" {
		where = " in conversion Job " + cv.Job
	}
	fmt.Printf("    %-20s converted by %s %s%s on %s in %.0f s: %s\n", realGuestName, cv.Tool, cv.Version, where, cv.Accelerator, cv.Seconds, cv.OS)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: realGuestName}, vmi); err != nil {
		return err
	}
	var ips []string
	for _, i := range vmi.Status.Interfaces {
		if i.IP != "" {
			ips = append(ips, i.IP)
		}
	}
	bus := ""
	if ds := vmi.Spec.Domain.Devices.Disks; len(ds) > 0 && ds[0].Disk != nil {
		bus = string(ds[0].Disk.Bus)
	}
	fmt.Printf("    %-20s booted on a %s disk; its guest agent reports %s, addresses %s\n", realGuestName, bus,
		vmi.Status.GuestOSInfo.PrettyName, strings.Join(ips, ", "))
	// The marker follows the agent's start by a moment.
	kc := kube.NewForRESTConfig(c.RESTConfig())
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		console, err := kc.GuestConsoleTail(ctx, demoNamespace, realGuestName, 60)
		if err != nil {
			return err
		}
		if strings.Contains(console, guestMarker) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the console does not show the boot marker %s:\n%s", realGuestName, guestMarker, console)
		}
	}
	fmt.Printf("    %-20s console shows %s\n", realGuestName, guestMarker)
	return nil
}

func readRecord(ctx context.Context, cl client.Client, name string) (record.Record, error) {
	var rec record.Record
	cm := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: coord.RecordName(name)}, cm); err != nil {
		return rec, err
	}
	return rec, json.Unmarshal([]byte(cm.Data[coord.RecordKey]), &rec)
}
