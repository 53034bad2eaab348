package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// stepValidateGuest runs the read-only checks until they all pass or the
// validation timeout ends.
func (r *run) stepValidateGuest(ctx context.Context) error {
	rec := r.rec()
	now := r.now()
	if !r.spec.startsVM() {
		rec.Validation = []record.CheckResult{{ID: "vmi_running", Passed: true, Time: now, Message: "skipped: runStrategy " + r.spec.RunStrategy + " leaves the VM stopped"}}
		rec.SetCondition(now, record.CondGuestReady, false, "NotStarted", "the VM is not running, so the guest was not checked")
		return nil
	}
	deadline := time.Now().Add(r.spec.Validation.Timeout)
	var results []record.CheckResult
	var lastConsole time.Time
	// Where the cluster does not log the console, a guest that cannot
	// boot is only found when the checks time out: say so in the evidence
	// rather than watch nothing.
	noConsole := r.consoleNotLogged(ctx)
	// The VirtualMachineInstance's change (its agent connected, an
	// address reported) ends the wait at once.
	vmiChanges := r.e.wake.follow(kube.WatchVMIs, r.spec.Namespace, r.spec.Name)
	defer vmiChanges.stop()
	wait := r.pollerWaking(vmiChanges)
	for {
		results = r.checkGuest(ctx)
		failed := ""
		for _, c := range results {
			if !c.Passed {
				failed = c.ID + " (" + c.Message + ")"
				break
			}
		}
		if failed == "" {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		timedOut := time.Now().After(deadline)
		if timedOut && noConsole != nil {
			return r.guestNotReady(append(results, *noConsole), failed, "", "")
		}
		if noConsole == nil && (timedOut || time.Since(lastConsole) >= consoleReadInterval) {
			// The guest's console says why it does not come up, and a
			// guest stuck in its initramfs never will: stop at once.
			lastConsole = time.Now()
			tail, bootFailed := r.guestConsole(ctx)
			if timedOut || bootFailed != "" {
				return r.guestNotReady(results, failed, tail, bootFailed)
			}
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
	n := len(results)
	if noConsole != nil {
		results = append(results, *noConsole)
	}
	rec.Validation = results
	rec.SetCondition(r.now(), record.CondGuestReady, true, "ChecksPassed", fmt.Sprintf("%d check(s) passed", n))
	return nil
}

// CheckConsoleLog is the validation evidence that the cluster does not log
// the guest's serial console, so boot failures cannot be seen.
const CheckConsoleLog = "console_log"

// consoleNotLogged returns a warning for the evidence when the cluster
// does not log the guest's serial console: KubeVirt's
// disableSerialConsoleLog (cluster-wide in the KubeVirt CR's
// spec.configuration.virtualMachineOptions) or the VM's
// spec.domain.devices.logSerialConsole=false leave its virt-launcher pod
// without a guest-console-log container. Nil when it is logged, or when
// that cannot be told now (the console is then read as usual).
func (r *run) consoleNotLogged(ctx context.Context) *record.CheckResult {
	_, err := r.e.deps.Kube.GuestConsoleTail(ctx, r.spec.Namespace, r.spec.Name, 1)
	if !errors.Is(err, kube.ErrConsoleNotLogged) {
		return nil
	}
	msg := fmt.Sprintf("the cluster does not log the guest's serial console (%v): a guest that cannot boot is not recognised from its console, "+
		"only when the checks time out after %s. To have boot failures found at once, set spec.domain.devices.logSerialConsole: true on the VM "+
		"or remove disableSerialConsoleLog from the KubeVirt CR's spec.configuration.virtualMachineOptions", err, r.spec.Validation.Timeout)
	r.report(ctx, Event{Kind: EventInfo, Message: "warning: " + msg})
	return &record.CheckResult{ID: CheckConsoleLog, Severity: "warning", Passed: false, Message: record.TruncateMessage(msg, record.MaxErrorMessageBytes), Time: r.now()}
}

// consoleReadInterval is how often Validating reads a guest's console while
// its checks fail.
const consoleReadInterval = 5 * time.Second

// consoleTailLines is how much of a guest's console is kept as evidence;
// consoleReadLines how much is read to look for a failed boot (the
// cluster returns at most 16 KiB of it: about 200 lines).
const (
	consoleTailLines = 15
	consoleReadLines = 100
)

// guestConsole reads the end of the guest's serial console, where the
// cluster logs it, and the first line of it that shows the guest cannot
// boot (the initramfs shell, a kernel panic, no bootable disk).
func (r *run) guestConsole(ctx context.Context) (tail, bootFailed string) {
	text, err := r.e.deps.Kube.GuestConsoleTail(ctx, r.spec.Namespace, r.spec.Name, consoleReadLines)
	if err != nil {
		return "", ""
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for _, l := range lines {
		if guestboot.BootFailure(l) {
			bootFailed = strings.TrimSpace(l)
			break
		}
	}
	if len(lines) > consoleTailLines {
		lines = lines[len(lines)-consoleTailLines:]
	}
	return strings.Join(lines, "\n"), bootFailed
}

// guestNotReady stops Validating: the checks did not pass in time, or the
// console shows the guest cannot boot. The console's end is the evidence.
func (r *run) guestNotReady(results []record.CheckResult, failed, tail, bootFailed string) error {
	rec := r.rec()
	now := r.now()
	if tail != "" {
		results = append(results, record.CheckResult{ID: "guest_console", Passed: bootFailed == "", Time: now,
			Message: record.TruncateMessage(tail, record.MaxErrorMessageBytes)})
	}
	rec.Validation = results
	msg := fmt.Sprintf("the VM runs but %s failed within %s", failed, r.spec.Validation.Timeout)
	action := "check the guest (for example with virtctl console " + r.spec.Name + " -n " + r.spec.Namespace + "), fix it, then run apply again to validate again"
	if bootFailed != "" {
		msg = fmt.Sprintf("the guest does not boot: its console shows %q", bootFailed)
		if r.spec.Conversion == ConversionNone {
			action = fmt.Sprintf("the guest has no drivers for the %s disks and %s network interfaces it was given: set conversion = %q (which migrates it again, "+
				"installing the virtio drivers) or destination.disk_bus to a bus it can drive, then run apply again", r.spec.DiskBus, r.spec.NICModel, ConversionVirtV2V)
		} else {
			action = "the converted guest does not boot: check its console (virtctl console " + r.spec.Name + " -n " + r.spec.Namespace +
				") and the conversion evidence, fix the guest or the source, then run apply again"
		}
	}
	if tail != "" {
		msg += "; the end of its console:\n" + tail
	}
	for _, c := range results {
		if c.ID == CheckConsoleLog {
			msg += "; " + c.Message
		}
	}
	rec.SetCondition(now, record.CondGuestReady, false, "ChecksFailed", record.TruncateMessage(msg, record.MaxErrorMessageBytes))
	return needsHuman("ValidationFailed", msg, action, nil)
}

// checkGuest runs every configured check once.
func (r *run) checkGuest(ctx context.Context) []record.CheckResult {
	now := r.now()
	v := r.spec.Validation
	var out []record.CheckResult
	add := func(id string, ok bool, msg string) {
		out = append(out, record.CheckResult{ID: id, Passed: ok, Message: msg, Time: now})
	}
	vmi, err := r.e.deps.Kube.GetVirtualMachineInstance(ctx, r.spec.Namespace, r.spec.Name)
	if err != nil {
		add("vmi_running", false, "cannot read the VirtualMachineInstance: "+err.Error())
		return out
	}
	add("vmi_running", vmi.Status.Phase == kubevirtv1.Running, "the VirtualMachineInstance is "+string(vmi.Status.Phase))
	if v.GuestAgent {
		c, ok := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected)
		if ok && c.Status == corev1.ConditionTrue {
			add("guest_agent", true, "the guest agent is connected")
		} else {
			add("guest_agent", false, "the guest agent is not connected")
		}
	}
	if v.IPReported {
		var ips []string
		for _, i := range vmi.Status.Interfaces {
			if i.IP != "" {
				ips = append(ips, i.IP)
			}
		}
		if len(ips) > 0 {
			add("ip_reported", true, "the VM reports "+strings.Join(ips, ", "))
		} else {
			add("ip_reported", false, "the VM reports no IP address")
		}
	}
	for _, a := range v.TCP {
		d := net.Dialer{Timeout: 3 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			add("tcp:"+a, false, "cannot connect: "+err.Error())
			continue
		}
		_ = conn.Close()
		add("tcp:"+a, true, "accepts connections")
	}
	for _, u := range v.HTTP {
		add(httpCheck(ctx, u))
	}
	return out
}

func httpCheck(ctx context.Context, u string) (string, bool, string) {
	id := "http:" + u
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return id, false, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return id, false, "GET failed: " + err.Error()
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return id, false, "GET answered " + resp.Status
	}
	return id, true, "GET answered " + resp.Status
}
