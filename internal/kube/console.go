package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirt's names for a VMI's virt-launcher pod and its serial console log.
const (
	// LabelLauncherCreatedBy is the VMI's UID on its virt-launcher pod.
	LabelLauncherCreatedBy = "kubevirt.io/created-by"
	// LabelLauncherVMName is the VMI's name on its virt-launcher pod.
	LabelLauncherVMName = "vm.kubevirt.io/name"
	// ContainerGuestConsoleLog is the virt-launcher container that streams
	// the serial console to its log (KubeVirt >= 1.1 with logSerialConsole).
	ContainerGuestConsoleLog = "guest-console-log"
	// ConsoleTailMaxBytes bounds what GuestConsoleTail reads.
	ConsoleTailMaxBytes = 16 << 10
)

// ErrConsoleNotLogged: the VMI's serial console is not logged (its
// virt-launcher pod has no guest-console-log container: KubeVirt older than
// 1.1, disableSerialConsoleLog in the KubeVirt CR, or logSerialConsole
// false on the VMI).
var ErrConsoleNotLogged = errors.New("the serial console of this VMI is not logged by the cluster")

// ErrNoLauncherPod: the VMI has no virt-launcher pod (yet, or any more), so
// whether its console is logged cannot be told.
var ErrNoLauncherPod = errors.New("the VMI has no virt-launcher pod")

// GuestConsoleTail returns the last lines of the serial console of the VMI
// namespace/vmiName, read from its virt-launcher pod's guest-console-log
// container through the API server (pods/log, as `kubectl logs`). The text
// comes from the guest and is not trusted: at most ConsoleTailMaxBytes are
// read, and control characters other than newline and tab are removed.
// When the cluster does not log the console it returns "" and an error
// wrapping ErrConsoleNotLogged; without a virt-launcher pod, one wrapping
// ErrNoLauncherPod.
func (c *Client) GuestConsoleTail(ctx context.Context, namespace, vmiName string, lines int) (string, error) {
	if lines <= 0 {
		lines = 100
	}
	vmi, err := c.GetVirtualMachineInstance(ctx, namespace, vmiName)
	if err != nil {
		return "", err
	}
	cl, err := c.raw()
	if err != nil {
		return "", wrap("list", "Pod", namespace, "", err)
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{LabelLauncherCreatedBy: string(vmi.UID)}); err != nil {
		return "", wrap("list", "Pod", namespace, "", err)
	}
	if len(pods.Items) == 0 {
		// Older KubeVirt releases label by VM name only.
		if err := cl.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{LabelLauncherVMName: vmiName}); err != nil {
			return "", wrap("list", "Pod", namespace, "", err)
		}
	}
	pod := newestLauncher(pods.Items, vmiName)
	if pod == nil {
		return "", fmt.Errorf("VirtualMachineInstance %s/%s: %w", namespace, vmiName, ErrNoLauncherPod)
	}
	if !hasContainer(pod, ContainerGuestConsoleLog) {
		return "", fmt.Errorf("virt-launcher pod %s/%s has no %s container: %w", namespace, pod.Name, ContainerGuestConsoleLog, ErrConsoleNotLogged)
	}
	b, err := c.podLog(ctx, namespace, pod.Name, ContainerGuestConsoleLog, lines, ConsoleTailMaxBytes)
	if err != nil {
		return "", wrap("read log of", "Pod", namespace, pod.Name, err)
	}
	return cleanConsole(b), nil
}

// newestLauncher picks the virt-launcher pod of a VMI (the newest, when a
// previous one is still being deleted).
func newestLauncher(pods []corev1.Pod, vmiName string) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels["kubevirt.io"] != "virt-launcher" && !strings.HasPrefix(p.Name, "virt-launcher-"+vmiName+"-") {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) {
			best = p
		}
	}
	return best
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// podLog reads GET .../pods/{pod}/log?container=&tailLines=&limitBytes=,
// never more than limit bytes whatever the server sends.
func (c *Client) podLog(ctx context.Context, namespace, pod, container string, lines, limit int) ([]byte, error) {
	if _, err := c.raw(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	cfg := rest.CopyConfig(c.cfg)
	c.mu.Unlock()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	base, err := url.Parse(strings.TrimSuffix(cfg.Host, "/"))
	if err != nil {
		return nil, err
	}
	u := base.JoinPath(cfg.APIPath, "api/v1/namespaces", namespace, "pods", pod, "log")
	u.RawQuery = url.Values{
		"container":  {container},
		"tailLines":  {strconv.Itoa(lines)},
		"limitBytes": {strconv.Itoa(limit)},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.StatusCode, b)
	}
	return b, nil
}

// statusError turns an API server error reply (a metav1.Status, or plain
// text) into an API error Classify understands.
func statusError(code int, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Code != 0 {
		return &apierrors.StatusError{ErrStatus: st}
	}
	msg := strings.TrimSpace(cleanConsole(body))
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return apierrors.NewGenericServerResponse(code, "get", schema.GroupResource{Resource: "pods/log"}, "", msg, 0, false)
}

// ansiEscape matches terminal escape sequences (CSI, and two-byte ESC
// sequences) that firmware, GRUB and the kernel write to a serial console.
var ansiEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|[0-~])`)

// cleanConsole makes untrusted console bytes printable text: terminal
// escape sequences, invalid UTF-8 and control characters other than
// newline and tab are removed.
func cleanConsole(b []byte) string {
	b = ansiEscape.ReplaceAll(b, nil)
	var out strings.Builder
	out.Grow(len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r == utf8.RuneError && n <= 1:
		case r == '\n' || r == '\t':
			out.WriteRune(r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
		default:
			out.WriteRune(r)
		}
	}
	return out.String()
}
