package kubesim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// TestBootGuests boots VMIs in real QEMU from imported DataVolumes, with
// the VMware-style Debian guest:
//   - unconverted, on a virtio disk: its initramfs has no virtio driver, so
//     the guest agent never connects, and its serial console, read through
//     the API server's pods/log from the virt-launcher pod's
//     guest-console-log container, shows the initramfs giving up;
//   - a VM on a blank disk (firmware only): stopping it stops QEMU and
//     deletes the virt-launcher pod;
//   - Sim.Stop stops the guests still running.
func TestBootGuests(t *testing.T) {
	c := cluster.Get(t)
	ctx := t.Context()
	raw := testguest.Image(t)
	images := t.TempDir()
	if err := os.Symlink(raw, filepath.Join(images, "unconverted.raw")); err != nil {
		t.Fatal(err)
	}
	files := httptest.NewServer(http.FileServer(http.Dir(images)))
	defer files.Close()

	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	kc := kube.NewForRESTConfig(c.RESTConfig())
	ns := namespace(t, cl)
	opts := fast(c, ns)
	opts.Step, opts.Resync = 100*time.Millisecond, 100*time.Millisecond
	opts.BootGuests = true
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = s.Stop()
		}
	}()

	// bootVM imports the image served as file into a DataVolume and starts
	// a VM on it (virtio disk, default NIC model, 1 GiB, BIOS).
	bootVM := func(t *testing.T, name, file string, rs kubevirtv1.VirtualMachineRunStrategy) {
		t.Helper()
		dv := dataVolume(ns, name, "2Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: files.URL + "/" + file}})
		if err := cl.Create(ctx, dv); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "import of "+file, func() string {
			if dv := getDV(t, cl, ns, name); dv.Status.Phase != cdiv1.Succeeded {
				return fmt.Sprintf("phase %q progress %q", dv.Status.Phase, dv.Status.Progress)
			}
			return ""
		})
		if err := cl.Create(ctx, virtualMachine(ns, name, name, rs)); err != nil {
			t.Fatal(err)
		}
	}
	// running waits for the VMI to be Running with its QEMU.
	running := func(t *testing.T, name string) (*kubevirtv1.VirtualMachineInstance, *guestboot.Guest) {
		t.Helper()
		var vmi *kubevirtv1.VirtualMachineInstance
		eventuallyGuest(t, "VMI "+name+" Running", func() string {
			vmi, _ = getVMI(cl, ns, name)
			if vmi.Status.Phase != kubevirtv1.Running || s.Guest(ns, name) == nil {
				return fmt.Sprintf("phase %q, conditions %+v, sim: %v", vmi.Status.Phase, vmi.Status.Conditions, s.LastError())
			}
			return ""
		})
		return vmi, s.Guest(ns, name)
	}

	var leftRunning *guestboot.Guest
	t.Run("boots", func(t *testing.T) {
		t.Run("unconverted guest on virtio never connects its agent", func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			bootVM(t, "unconverted", "unconverted.raw", kubevirtv1.RunStrategyAlways)
			vmi, g := running(t, "unconverted")
			leftRunning = g
			if qemuPIDs(t, g) == nil {
				t.Fatalf("no QEMU process for the running VMI (args %q)", g.Args())
			}
			for _, want := range []string{"virtio-blk-pci,drive=disk0", "user,model=virtio-net-pci,restrict=on", "q35", "-snapshot"} {
				if !slices.ContainsFunc(g.Args(), func(a string) bool { return strings.Contains(a, want) }) {
					t.Errorf("QEMU args %q lack %q", g.Args(), want)
				}
			}
			launcher := launcherPod(t, cl, ns, vmi)
			if launcher.Spec.NodeName != NodeName || launcher.Labels[LabelKubeVirt] != "virt-launcher" ||
				launcher.Labels[LabelVMName] != "unconverted" || len(launcher.Spec.Containers) != 2 ||
				launcher.Spec.Containers[1].Name != ContainerConsoleLog {
				t.Errorf("virt-launcher pod: node %q labels %v containers %+v", launcher.Spec.NodeName, launcher.Labels, launcher.Spec.Containers)
			}

			var console string
			eventuallyGuest(t, "initramfs shell on the console through pods/log", func() string {
				var err error
				console, err = kc.GuestConsoleTail(ctx, ns, "unconverted", 60)
				if err != nil {
					return err.Error()
				}
				if !strings.Contains(console, "Dropping to a shell") {
					return "console so far:\n" + console
				}
				return ""
			})
			t.Logf("initramfs shell after %s; console tail:\n%s", time.Since(start).Round(time.Second), lastLines(console, 6))
			if n := strings.Count(strings.TrimSuffix(console, "\n"), "\n") + 1; n > 60 {
				t.Errorf("tailLines=60 gave %d lines", n)
			}
			// The sim saw the failed boot, and still reports no agent.
			time.Sleep(2 * time.Second)
			vmi, _ = getVMI(cl, ns, "unconverted")
			if vmi.Status.Phase != kubevirtv1.Running || findVMICondition(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected) != nil ||
				vmi.Status.GuestOSInfo.ID != "" {
				t.Errorf("VMI: phase %q conditions %+v guestOSInfo %+v, want Running without agent", vmi.Status.Phase, vmi.Status.Conditions, vmi.Status.GuestOSInfo)
			}
			for _, ni := range vmi.Status.Interfaces {
				if ni.IP != "" || len(ni.IPs) > 0 {
					t.Errorf("interface %+v has addresses without a guest agent", ni)
				}
			}
		})

		t.Run("a VM stopped stops its QEMU and deletes its virt-launcher pod", func(t *testing.T) {
			t.Parallel()
			// A blank disk: QEMU runs the firmware only, which is enough to
			// stop.
			blank := filepath.Join(images, "blank.raw")
			if err := os.WriteFile(blank, make([]byte, 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			bootVM(t, "stops", "blank.raw", kubevirtv1.RunStrategyAlways)
			vmi, g := running(t, "stops")
			if qemuPIDs(t, g) == nil {
				t.Fatalf("no QEMU process for the running VMI (args %q)", g.Args())
			}
			launcher := launcherPod(t, cl, ns, vmi)
			setRunStrategy(t, cl, ns, "stops", kubevirtv1.RunStrategyHalted)
			eventuallyGuest(t, "VM stopped: VMI, virt-launcher pod and QEMU gone", func() string {
				if _, ok := getVMI(cl, ns, "stops"); ok {
					return "VMI still there"
				}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(launcher), &corev1.Pod{}); err == nil {
					return "virt-launcher pod still there"
				}
				if p := qemuPIDs(t, g); p != nil {
					return fmt.Sprintf("QEMU still running: pids %v", p)
				}
				// The process is reaped a moment after it is gone.
				if !g.Exited() {
					return "QEMU gone but not yet reaped"
				}
				return ""
			})
			if !g.Exited() || s.Guest(ns, "stops") != nil {
				t.Errorf("after the VM stopped: guest exited %v, sim still has it %v", g.Exited(), s.Guest(ns, "stops") != nil)
			}
		})
	})

	if leftRunning == nil {
		return
	}
	if qemuPIDs(t, leftRunning) == nil {
		t.Fatal("the unconverted guest's QEMU is not running before Sim.Stop")
	}
	stopped = true
	if err := s.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if p := qemuPIDs(t, leftRunning); p != nil {
		t.Errorf("QEMU still running after Sim.Stop: pids %v", p)
	}
	if err := cl.Get(ctx, client.ObjectKey{Name: NodeName}, &corev1.Node{}); err == nil {
		t.Errorf("node %s still registered after Sim.Stop", NodeName)
	}
}

// TestBootGuestSlotsAndFailures runs guests that need no operating
// system: blank disks, on which QEMU runs the firmware only. With one guest
// slot the second VMI waits, Scheduled, until the first VM stops; a VMI
// whose QEMU cannot start fails, as does one whose QEMU is killed.
func TestBootGuestSlotsAndFailures(t *testing.T) {
	c := cluster.Get(t)
	ctx := t.Context()
	images := t.TempDir()
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", filepath.Join(images, "blank.qcow2"), "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	files := httptest.NewServer(http.FileServer(http.Dir(images)))
	defer files.Close()
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cl)
	opts := fast(c, ns)
	opts.BootGuests, opts.MaxGuests = true, 1
	s := startSim(t, opts)

	blankVM := func(name string, rs kubevirtv1.VirtualMachineRunStrategy) {
		t.Helper()
		dv := dataVolume(ns, name, "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: files.URL + "/blank.qcow2"}})
		if err := cl.Create(ctx, dv); err != nil {
			t.Fatal(err)
		}
		waitDVPhase(t, cl, ns, name, cdiv1.Succeeded)
		vm := virtualMachine(ns, name, name, rs)
		vm.Spec.Template.Spec.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("128Mi")
		if err := cl.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string) kubevirtv1.VirtualMachineInstancePhase {
		vmi, _ := getVMI(cl, ns, name)
		return vmi.Status.Phase
	}
	blankVM("first", kubevirtv1.RunStrategyAlways)
	eventuallyGuest(t, "first Running", func() string {
		if p := phase("first"); p != kubevirtv1.Running {
			return fmt.Sprintf("phase %q: %v", p, s.LastError())
		}
		return ""
	})
	first := s.Guest(ns, "first")
	if first == nil || !slices.ContainsFunc(first.Args(), func(a string) bool { return a == "128" }) {
		t.Fatalf("first guest: %v", first)
	}
	// The kubelet's container logs, through the API server: compute has
	// QEMU's command line; limitBytes and tailLines are honoured; an
	// unknown container is refused.
	firstVMI, _ := getVMI(cl, ns, "first")
	pod := launcherPod(t, cl, ns, firstVMI)
	for _, tc := range []struct {
		query string
		code  int
		check func(string) bool
	}{
		{"container=compute", http.StatusOK, func(b string) bool { return strings.Contains(b, "-machine q35") && strings.HasSuffix(b, "\n") }},
		{"container=compute&limitBytes=10", http.StatusOK, func(b string) bool { return len(b) == 10 }},
		{"container=compute&tailLines=0", http.StatusOK, func(b string) bool { return b == "" }},
		{"container=guest-console-log&tailLines=0", http.StatusOK, func(b string) bool { return b == "" }},
		{"container=nosuch", http.StatusBadRequest, func(string) bool { return true }},
	} {
		code, body := podLog(t, c.RESTConfig(), ns, pod.Name, tc.query)
		if code != tc.code || !tc.check(body) {
			t.Errorf("pods/log?%s: %d %q", tc.query, code, body)
		}
	}

	blankVM("second", kubevirtv1.RunStrategyOnce)
	eventually(t, 15*time.Second, "second Scheduled", func() string {
		if p := phase("second"); p != kubevirtv1.Scheduled {
			return fmt.Sprintf("phase %q", p)
		}
		return ""
	})
	time.Sleep(2 * time.Second)
	if p := phase("second"); p != kubevirtv1.Scheduled || s.Guest(ns, "second") != nil {
		t.Fatalf("second VMI with the only slot taken: phase %q, guest %v", p, s.Guest(ns, "second"))
	}
	setRunStrategy(t, cl, ns, "first", kubevirtv1.RunStrategyHalted)
	eventuallyGuest(t, "second Running once first stopped", func() string {
		if p := phase("second"); p != kubevirtv1.Running {
			return fmt.Sprintf("phase %q", p)
		}
		return ""
	})
	if qemuPIDs(t, first) != nil || !first.Exited() {
		t.Errorf("first guest's QEMU still runs after its VM stopped")
	}

	// QEMU killed under the running guest: the VMI fails (RunStrategy Once
	// keeps it).
	second := s.Guest(ns, "second")
	for _, pid := range qemuPIDs(t, second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	eventuallyGuest(t, "second Failed after QEMU was killed", func() string {
		vmi, _ := getVMI(cl, ns, "second")
		if c := findVMICondition(vmi, kubevirtv1.VirtualMachineInstanceReady); vmi.Status.Phase != kubevirtv1.Failed ||
			c == nil || c.Reason != ReasonGuestExited {
			return fmt.Sprintf("phase %q conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})

	// A VMI whose disk bus KubeVirt has but this sim cannot boot fails at
	// start, with the reason on its Ready condition.
	dv := dataVolume(ns, "usb", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: files.URL + "/blank.qcow2"}})
	if err := cl.Create(ctx, dv); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "usb", cdiv1.Succeeded)
	vm := virtualMachine(ns, "usb", "usb", kubevirtv1.RunStrategyOnce)
	vm.Spec.Template.Spec.Domain.Devices.Disks[0].Disk.Bus = kubevirtv1.DiskBusUSB
	if err := cl.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	eventuallyGuest(t, "usb Failed", func() string {
		vmi, _ := getVMI(cl, ns, "usb")
		if c := findVMICondition(vmi, kubevirtv1.VirtualMachineInstanceReady); vmi.Status.Phase != kubevirtv1.Failed ||
			c == nil || c.Reason != ReasonGuestStartFailed || !strings.Contains(c.Message, `"usb"`) {
			return fmt.Sprintf("phase %q conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})
}

// TestGuestSpec checks the QEMU VM rendered from a VMI spec against what
// KubeVirt renders: buses, boot order, NIC model, firmware (Secure Boot by
// default with EFI), memory and CPU topology.
func TestGuestSpec(t *testing.T) {
	dir := t.TempDir()
	s := &Sim{dir: dir, received: map[string]Received{}, opts: Options{QemuImg: "qemu-img"}}
	for _, name := range []string{"a", "b", "c"} {
		p := imagePath(dir, "ns", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", p, "1M").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	s.received["ns/a"] = Received{Path: imagePath(dir, "ns", "a"), Format: "raw"} // as recorded on arrival
	mem := resource.MustParse("2Gi")
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Namespace = "ns"
	vmi.Spec = kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			Memory:    &kubevirtv1.Memory{Guest: &mem},
			CPU:       &kubevirtv1.CPU{Sockets: 2, Cores: 3, Threads: 1},
			Firmware:  &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{}}},
			Devices: kubevirtv1.Devices{
				Disks: []kubevirtv1.Disk{
					{Name: "d0", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "sata"}}},
					{Name: "cloudinit", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "virtio"}}},
					{Name: "d1", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: "scsi"}}, BootOrder: ptr.To[uint](1)},
					{Name: "d2", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{}}},
				},
				Interfaces: []kubevirtv1.Interface{{Name: "default", Model: "e1000e"}},
			},
		},
		Volumes: []kubevirtv1.Volume{
			{Name: "d0", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "a"}}},
			{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: "#cloud-config"}}},
			{Name: "d1", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "b"}}}},
			{Name: "d2", VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "c"}}},
		},
	}
	got, err := s.guestSpec(context.Background(), vmi)
	if err != nil {
		t.Fatal(err)
	}
	want := []guestboot.Disk{
		{Path: imagePath(dir, "ns", "b"), Format: "qcow2", Bus: guestboot.BusSCSI}, // bootOrder 1 first
		{Path: imagePath(dir, "ns", "a"), Format: "raw", Bus: guestboot.BusSATA},
		{Path: imagePath(dir, "ns", "c"), Format: "qcow2", Bus: guestboot.BusVirtio},
	}
	if !slices.Equal(got.Disks, want) || got.NIC != guestboot.NICE1000E || got.Firmware != guestboot.FirmwareEFISecureBoot ||
		got.MemoryMiB != 2048 || got.Sockets != 2 || got.Cores != 3 || got.Threads != 1 || got.Machine != guestboot.MachineQ35 {
		t.Errorf("spec %+v", got)
	}

	// EFI without Secure Boot; memory from the request; no interfaces
	// means KubeVirt's default pod interface (virtio), unless turned off.
	vmi.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot = ptr.To(false)
	vmi.Spec.Domain.Memory = nil
	vmi.Spec.Domain.Devices.Interfaces = nil
	if got, err = s.guestSpec(context.Background(), vmi); err != nil || got.Firmware != guestboot.FirmwareEFI ||
		got.MemoryMiB != 1024 || got.NIC != guestboot.NICVirtio {
		t.Errorf("EFI without Secure Boot: %+v, %v", got, err)
	}
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	vmi.Spec.Domain.Firmware = &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{BIOS: &kubevirtv1.BIOS{}}}
	if got, err = s.guestSpec(context.Background(), vmi); err != nil || got.Firmware != guestboot.FirmwareBIOS || got.NIC != guestboot.NICNone {
		t.Errorf("BIOS, no pod interface: %+v, %v", got, err)
	}

	for name, mutate := range map[string]func(v *kubevirtv1.VirtualMachineInstance){
		"usb bus": func(v *kubevirtv1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Disk.Bus = "usb" },
		"rtl8139": func(v *kubevirtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "x", Model: "rtl8139"}}
		},
		"missing image": func(v *kubevirtv1.VirtualMachineInstance) { v.Spec.Volumes[0].DataVolume.Name = "nope" },
		"cdrom": func(v *kubevirtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].DiskDevice = kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{}}
		},
	} {
		v := vmi.DeepCopy()
		mutate(v)
		if _, err := s.guestSpec(context.Background(), v); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// podLog reads a pod's log through the API server with query.
func podLog(t *testing.T, cfg *rest.Config, ns, pod, query string) (int, string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(cfg.Host + "/api/v1/namespaces/" + ns + "/pods/" + pod + "/log?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// launcherPod returns the VMI's virt-launcher pod.
func launcherPod(t *testing.T, cl client.Client, ns string, vmi *kubevirtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cl.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{LabelCreatedBy: string(vmi.UID)}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("virt-launcher pods of %s: %d, %v", vmi.Name, len(pods.Items), err)
	}
	return &pods.Items[0]
}

// qemuPIDs returns the processes running the guest's QEMU, found by the
// path of its agent socket (unique to the guest) on their command line.
func qemuPIDs(t *testing.T, g *guestboot.Guest) []int {
	t.Helper()
	var sock string
	for _, a := range g.Args() {
		if strings.Contains(a, "qga.sock") {
			sock = a
		}
	}
	if sock == "" {
		t.Fatalf("no agent socket in QEMU's args %q", g.Args())
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		var pid int
		if _, err := fmt.Sscanf(d.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !slices.Contains(strings.Split(string(b), "\x00"), sock) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
			continue // a zombie is dead
		}
		pids = append(pids, pid)
	}
	return pids
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
