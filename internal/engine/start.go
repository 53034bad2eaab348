package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

func runStrategyOf(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.RunStrategy != nil {
		return string(*vm.Spec.RunStrategy)
	}
	if vm.Spec.Running != nil && *vm.Spec.Running { //nolint:staticcheck // legacy spelling of Always
		return string(kubevirtv1.RunStrategyAlways)
	}
	return string(kubevirtv1.RunStrategyHalted)
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) (kubevirtv1.VirtualMachineInstanceCondition, bool) {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return kubevirtv1.VirtualMachineInstanceCondition{}, false
}

// stepStart applies the requested run strategy and, when it runs the VM,
// waits for the VMI to be Running.
func (r *run) stepStart(ctx context.Context) error {
	kc := r.e.deps.Kube
	ns, name := r.spec.Namespace, r.spec.Name
	vm, err := kc.GetVirtualMachine(ctx, ns, name)
	if kube.IsNotFound(err) {
		return &backTo{phase: PhaseCreatingVM, reason: "the VirtualMachine " + ns + "/" + name + " is gone"}
	}
	if err != nil {
		return err
	}
	if !isOurs(vm.Labels, name) {
		return needsHuman("VMNotOurs", fmt.Sprintf("VirtualMachine %s/%s is no longer labelled as this migration's", ns, name),
			"restore the label "+kube.LabelMigration+"="+name+" if it is ours, then run apply again", nil)
	}
	rec := r.rec()
	if runStrategyOf(vm) != r.spec.RunStrategy {
		// KubeVirt's controller writes the VM too: a conflict is retried on
		// a fresh read rather than spending the phase's retry budget.
		if err := kc.UpdateVirtualMachineRunStrategyAndLabels(ctx, ns, name, r.spec.RunStrategy, nil, nil); err != nil {
			return err
		}
		if vm, err = kc.GetVirtualMachine(ctx, ns, name); err != nil {
			return err
		}
		r.emit(Event{Kind: EventInfo, Message: "set runStrategy " + r.spec.RunStrategy + " on VirtualMachine " + ns + "/" + name})
	}
	if rec.VM == nil {
		rec.VM = &VMEvidence{Name: name}
	}
	rec.VM.UID, rec.VM.RunStrategy = string(vm.UID), r.spec.RunStrategy
	now := r.now()
	if !r.spec.startsVM() {
		rec.setCondition(now, CondVMStarted, false, "NotStarted", "runStrategy "+r.spec.RunStrategy+" leaves the VM stopped")
		return nil
	}
	deadline := time.Now().Add(r.spec.StartTimeout)
	lastPhase := ""
	wait := r.poller()
	for {
		vmi, err := kc.GetVirtualMachineInstance(ctx, ns, name)
		switch {
		case kube.IsNotFound(err):
		case err != nil:
			return err
		default:
			phase := string(vmi.Status.Phase)
			rec.VM.VMIPhase = phase
			if phase != lastPhase {
				lastPhase = phase
				r.emit(Event{Kind: EventInfo, Message: "VirtualMachineInstance " + ns + "/" + name + " is " + phase})
			}
			switch vmi.Status.Phase {
			case kubevirtv1.Running:
				now := r.now()
				stamp(&rec.Timestamps.VMStarted, now)
				rec.setCondition(now, CondVMStarted, true, "Running", "the VirtualMachineInstance is Running on node "+vmi.Status.NodeName)
				return nil
			case kubevirtv1.Failed, kubevirtv1.Succeeded:
				return transient("VMIStopped", fmt.Sprintf("the VirtualMachineInstance %s/%s is %s", ns, name, phase), nil)
			}
			if c, ok := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); ok &&
				c.Status == corev1.ConditionFalse && c.Reason == "Unschedulable" {
				if strings.Contains(c.Message, "devices.kubevirt.io/kvm") {
					return needsHuman("NoKVM", fmt.Sprintf("the VM cannot be scheduled: no node offers /dev/kvm (%s)", c.Message),
						"enable hardware virtualization on the nodes (devices.kubevirt.io/kvm), or KubeVirt's software emulation, then run apply again", nil)
				}
				return transient("Unschedulable", fmt.Sprintf("the VM cannot be scheduled yet: %s", c.Message), nil)
			}
		}
		if time.Now().After(deadline) {
			return transient("StartTimeout", fmt.Sprintf("the VirtualMachineInstance %s/%s did not reach Running within %s (last phase %q)", ns, name, r.spec.StartTimeout, lastPhase), nil)
		}
		if err := wait(ctx); err != nil {
			return err
		}
	}
}

// stepValidateGuest runs the read-only checks until they all pass or the
// validation timeout ends.
func (r *run) stepValidateGuest(ctx context.Context) error {
	rec := r.rec()
	now := r.now()
	if !r.spec.startsVM() {
		rec.Validation = []CheckResult{{ID: "vmi_running", Passed: true, Time: now, Message: "skipped: runStrategy " + r.spec.RunStrategy + " leaves the VM stopped"}}
		rec.setCondition(now, CondGuestReady, false, "NotStarted", "the VM is not running, so the guest was not checked")
		return nil
	}
	deadline := time.Now().Add(r.spec.Validation.Timeout)
	var results []CheckResult
	var lastConsole time.Time
	wait := r.poller()
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
		if timedOut || time.Since(lastConsole) >= consoleReadInterval {
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
	rec.Validation = results
	rec.setCondition(r.now(), CondGuestReady, true, "ChecksPassed", fmt.Sprintf("%d check(s) passed", len(results)))
	return nil
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
func (r *run) guestNotReady(results []CheckResult, failed, tail, bootFailed string) error {
	rec := r.rec()
	now := r.now()
	if tail != "" {
		results = append(results, CheckResult{ID: "guest_console", Passed: bootFailed == "", Time: now,
			Message: truncateMessage(tail, MaxErrorMessageBytes)})
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
	rec.setCondition(now, CondGuestReady, false, "ChecksFailed", truncateMessage(msg, MaxErrorMessageBytes))
	return needsHuman("ValidationFailed", msg, action, nil)
}

// checkGuest runs every configured check once.
func (r *run) checkGuest(ctx context.Context) []CheckResult {
	now := r.now()
	v := r.spec.Validation
	var out []CheckResult
	add := func(id string, ok bool, msg string) {
		out = append(out, CheckResult{ID: id, Passed: ok, Message: msg, Time: now})
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

// stepComplete removes this migration's staging files.
func (r *run) stepComplete(context.Context) error {
	if err := r.removeStaging(); err != nil {
		return transient("CleanupFailed", "cannot remove the staging files", err)
	}
	return nil
}

// removeStaging deletes the staged copies and artifacts of this migration
// and their folders, at the paths the spec derives (never the record's).
// Missing files are fine.
func (r *run) removeStaging() error {
	var errs []string
	for i := range r.rec().Disks {
		staged, art := r.spec.stagedPath(i), r.spec.artifactPath(i)
		if err := transfer.Remove(staged); err != nil {
			errs = append(errs, err.Error())
		}
		if art != staged {
			if err := convert.Remove(art); err != nil {
				errs = append(errs, err.Error())
			}
		}
		conv := r.spec.convertedPath(i)
		for _, p := range []string{conv, conv + convert.TmpSuffix} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err.Error())
			}
		}
	}
	for _, d := range r.spec.stagingFolders() {
		if _, err := removeFolder(d); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
