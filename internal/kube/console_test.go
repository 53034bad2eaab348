package kube

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestGuestConsoleTail reads a VMI's serial console the way KubeVirt
// exposes it, through the real API server's pods/log, which dials the
// node's kubelet (here a TLS server on 127.0.0.1 standing in for it): the
// request names the guest-console-log container with tailLines and a byte
// limit, the guest's control characters are removed, an oversized reply is
// cut, a VMI whose console is not logged gives ErrConsoleNotLogged, and
// one without a virt-launcher pod ErrNoLauncherPod.
func TestGuestConsoleTail(t *testing.T) {
	ctx := t.Context()
	c := clusterClient(t)
	raw, err := c.raw()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "console"
	if err := raw.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		reqs    []string
		console = "SeaBIOS\x1b[2J\r\nLoading Linux\x07 ...\r\n\x00Gave up waiting for root file system device.\n\tALERT! UUID=6d1c does not exist.  Dropping to a shell!\n(initramfs) \u202e"
	)
	kubelet := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		switch r.URL.Path {
		case "/containerLogs/console/virt-launcher-vm1-abcde/guest-console-log":
			_, _ = w.Write([]byte(console))
		case "/containerLogs/console/virt-launcher-vm2-abcde/guest-console-log":
			// A kubelet that ignores limitBytes, a guest that floods.
			_, _ = w.Write([]byte(strings.Repeat("x", 100<<10)))
		default:
			http.NotFound(w, r)
		}
	}))
	defer kubelet.Close()
	port, err := strconv.Atoi(kubelet.URL[strings.LastIndex(kubelet.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "console-test-node"}}
	if err := raw.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if err := raw.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Delete(ctx, node) })

	launcher := func(vmi, uid string, containers ...string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-" + vmi + "-abcde", Labels: map[string]string{
				"kubevirt.io": "virt-launcher", LabelLauncherCreatedBy: uid, LabelLauncherVMName: vmi,
			}},
			Spec: corev1.PodSpec{NodeName: node.Name},
		}
		for _, name := range containers {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: name, Image: "virt-launcher"})
		}
		if err := raw.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	vmi := func(name string) string {
		t.Helper()
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := raw.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		return string(v.UID)
	}
	launcher("vm1", vmi("vm1"), "compute", ContainerGuestConsoleLog)
	launcher("vm2", vmi("vm2"), "compute", ContainerGuestConsoleLog)
	launcher("vm3", vmi("vm3"), "compute") // KubeVirt without logSerialConsole
	vmi("vm4")                             // no pod at all

	got, err := c.GuestConsoleTail(ctx, ns, "vm1", 7)
	if err != nil {
		t.Fatalf("GuestConsoleTail: %v", err)
	}
	want := "SeaBIOS\nLoading Linux ...\nGave up waiting for root file system device.\n\tALERT! UUID=6d1c does not exist.  Dropping to a shell!\n(initramfs) "
	if got != want {
		t.Errorf("console:\n got %q\nwant %q", got, want)
	}
	mu.Lock()
	if len(reqs) != 1 || reqs[0] != "/containerLogs/console/virt-launcher-vm1-abcde/guest-console-log?limitBytes=16384&tailLines=7" {
		t.Errorf("kubelet requests: %q", reqs)
	}
	mu.Unlock()

	got, err = c.GuestConsoleTail(ctx, ns, "vm2", 50)
	if err != nil || len(got) != ConsoleTailMaxBytes {
		t.Errorf("flooding console: %d bytes, %v; want %d", len(got), err, ConsoleTailMaxBytes)
	}

	if got, err := c.GuestConsoleTail(ctx, ns, "vm3", 10); got != "" || !errors.Is(err, ErrConsoleNotLogged) {
		t.Errorf("vm3: %q, %v; want ErrConsoleNotLogged", got, err)
	}
	// Without a pod it cannot be told whether the console is logged.
	if got, err := c.GuestConsoleTail(ctx, ns, "vm4", 10); got != "" || !errors.Is(err, ErrNoLauncherPod) || errors.Is(err, ErrConsoleNotLogged) {
		t.Errorf("vm4: %q, %v; want ErrNoLauncherPod", got, err)
	}
	if _, err := c.GuestConsoleTail(ctx, ns, "nosuchvmi", 10); !IsNotFound(err) {
		t.Errorf("missing VMI: %v, want not found", err)
	}
}

func TestCleanConsole(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain\n", "plain\n"},
		{"a\tb\r\n", "a\tb\n"},
		{"\x1b[0;1mbold\x1b[0m\x1bc", "bold"},
		{"lone \x1b escape", "lone  escape"},
		{"bell\x07nul\x00del\x7f", "bellnuldel"},
		{"bad \xff\xfe utf8", "bad  utf8"},
		{"über ✓", "über ✓"},
		{"rtl \u202eevil\u2029", "rtl evil"},
	} {
		if got := cleanConsole([]byte(tc.in)); got != tc.want {
			t.Errorf("cleanConsole(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
