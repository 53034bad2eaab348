package kubesim

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationNoGuestAgent on a VM's template (or a VMI) set to "true" means
// its guest has no agent: AgentConnected never turns True.
const AnnotationNoGuestAgent = "kubesim.vmmigration.io/no-guest-agent"

// NodeName is the node every simulated VMI runs on.
const NodeName = "kubesim-node-0"

// Condition reasons the sim writes on VMs and VMIs, after KubeVirt's.
const (
	ReasonVMINotExists       = "VMINotExists"
	ReasonGuestNotRunning    = "GuestNotRunning"
	ReasonContainersNotReady = "ContainersNotReady"
	ReasonUnschedulable      = "Unschedulable"
	ReasonFailedPvcNotFound  = "FailedPvcNotFound"
	ReasonDataVolumeFailed   = "FailedDataVolumeImport"
	ReasonDataVolumeNotReady = "DataVolumeNotReady"
)

func (s *Sim) reconcileVirtualMachines(ctx context.Context) error {
	var vms kubevirtv1.VirtualMachineList
	if err := s.cl.List(ctx, &vms); err != nil {
		return fmt.Errorf("listing VirtualMachines: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.cl.List(ctx, &vmis); err != nil {
		return fmt.Errorf("listing VirtualMachineInstances: %w", err)
	}
	byKey := map[types.NamespacedName]*kubevirtv1.VirtualMachineInstance{}
	for i := range vmis.Items {
		v := &vmis.Items[i]
		byKey[types.NamespacedName{Namespace: v.Namespace, Name: v.Name}] = v
	}
	var errs []error
	live := map[types.UID]bool{}
	var deleting []*kubevirtv1.VirtualMachineInstance
	vmUIDs := map[types.UID]bool{}
	for i := range vms.Items {
		vm := &vms.Items[i]
		if !s.watched(vm.Namespace) {
			continue
		}
		vmUIDs[vm.UID] = true
		key := types.NamespacedName{Namespace: vm.Namespace, Name: vm.Name}
		vmi := byKey[key]
		if vmi != nil && !metav1.IsControlledBy(vmi, vm) {
			vmi = nil // someone else's VMI of the same name: leave it
		}
		if err := s.reconcileVM(ctx, vm, vmi); err != nil {
			errs = append(errs, fmt.Errorf("VirtualMachine %s: %w", key, err))
		}
	}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if !s.watched(vmi.Namespace) {
			continue
		}
		if owner := metav1.GetControllerOf(vmi); owner != nil && owner.Kind == "VirtualMachine" && !vmUIDs[owner.UID] && vmi.DeletionTimestamp == nil {
			// The garbage collector's job: there is no controller-manager.
			if err := s.cl.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
			s.forget(vmi.UID)
			continue
		}
		if vmi.DeletionTimestamp != nil {
			deleting = append(deleting, vmi)
			continue
		}
		live[vmi.UID] = true
		before := vmi.Status.DeepCopy()
		if err := s.stepVMI(ctx, vmi); err != nil {
			errs = append(errs, err)
			continue
		}
		if !equality.Semantic.DeepEqual(*before, vmi.Status) {
			if err := s.cl.Status().Update(ctx, vmi); err != nil {
				errs = append(errs, fmt.Errorf("VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err))
			}
		}
	}
	if s.opts.BootGuests {
		// Guests of VMIs that are gone or going (deleted, their VM stopped)
		// are stopped, and their virt-launcher pods deleted.
		errs = append(errs, s.sweepGuests(ctx, live))
	}
	for _, vmi := range deleting {
		errs = append(errs, s.finalizeVMI(ctx, vmi))
	}
	return errors.Join(errs...)
}

// finalizeVMI removes the finalizer KubeVirt's VMI mutator puts on every
// VMI (foregroundDeleteVirtualMachine) from a deleted one once its guest
// is stopped and its virt-launcher pod deleted, as the VMI controller does
// (pkg/virt-controller/watch/vmi/lifecycle.go, v1.7.0: once all pods are
// deleted); until then the VMI stays,
// with its deletionTimestamp.
func (s *Sim) finalizeVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	if !slices.Contains(vmi.Finalizers, kubevirtv1.VirtualMachineInstanceFinalizer) {
		return nil
	}
	s.mu.Lock()
	_, running := s.boots[vmi.UID]
	s.mu.Unlock()
	if running {
		return nil
	}
	orig := vmi.DeepCopy()
	vmi.Finalizers = slices.DeleteFunc(vmi.Finalizers, func(f string) bool { return f == kubevirtv1.VirtualMachineInstanceFinalizer })
	err := s.cl.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("VirtualMachineInstance %s/%s: removing its finalizer: %w", vmi.Namespace, vmi.Name, err)
	}
	s.forget(vmi.UID)
	return nil
}

// runStrategy is the VM's effective run strategy (spec.running is the
// legacy spelling of Always/Halted).
func runStrategy(vm *kubevirtv1.VirtualMachine) kubevirtv1.VirtualMachineRunStrategy {
	switch {
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return kubevirtv1.RunStrategyAlways
	}
	return kubevirtv1.RunStrategyHalted
}

// reconcileVM creates or deletes the VM's VMI per its run strategy and
// writes the VM's status.
func (s *Sim) reconcileVM(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vm.DeletionTimestamp != nil {
		if vmi != nil {
			return client.IgnoreNotFound(s.cl.Delete(ctx, vmi))
		}
		return nil
	}
	if err := s.syncFirmwareUUID(ctx, vm); err != nil {
		return err
	}
	rs := runStrategy(vm)
	finished := vmi != nil && (vmi.Status.Phase == kubevirtv1.Failed || vmi.Status.Phase == kubevirtv1.Succeeded)
	want, requestsDone := false, false
	switch rs {
	case kubevirtv1.RunStrategyAlways:
		want = true
	case kubevirtv1.RunStrategyRerunOnFailure:
		want = vmi == nil || vmi.Status.Phase != kubevirtv1.Succeeded
	case kubevirtv1.RunStrategyOnce:
		want = vmi == nil && !vm.Status.Created || vmi != nil
	case kubevirtv1.RunStrategyManual:
		// Manual: only start/stop requests (virtctl start/stop) act.
		want = vmi != nil && !finished
		for _, r := range vm.Status.StateChangeRequests {
			want = r.Action == kubevirtv1.StartRequest
		}
		requestsDone = len(vm.Status.StateChangeRequests) > 0
	}
	switch {
	case vmi != nil && (!want || finished && rs != kubevirtv1.RunStrategyOnce && rs != kubevirtv1.RunStrategyManual):
		if err := s.cl.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		s.forget(vmi.UID)
		vmi = nil
	case vmi == nil && want:
		created, err := s.createVMI(ctx, vm)
		if err != nil {
			return err
		}
		vmi = created
		vm.Status.ObservedGeneration, vm.Status.DesiredGeneration = vm.Generation, vm.Generation
	}

	st := vm.DeepCopy().Status
	if requestsDone {
		st.StateChangeRequests = nil
	}
	st.RunStrategy = rs
	st.Created = vmi != nil
	st.Ready = vmi != nil && vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady) == corev1.ConditionTrue
	st.PrintableStatus = s.printableStatus(ctx, vm, vmi)
	if vmi == nil {
		setVMCondition(&st, kubevirtv1.VirtualMachineReady, corev1.ConditionFalse, ReasonVMINotExists, "VMI does not exist")
		removeVMCondition(&st, kubevirtv1.VirtualMachineConditionType(corev1.PodScheduled))
		removeVMCondition(&st, kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceAgentConnected))
	} else {
		for _, t := range []kubevirtv1.VirtualMachineInstanceConditionType{
			kubevirtv1.VirtualMachineInstanceReady,
			kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
			kubevirtv1.VirtualMachineInstanceAgentConnected,
		} {
			if c := findVMICondition(vmi, t); c != nil {
				setVMCondition(&st, kubevirtv1.VirtualMachineConditionType(t), c.Status, c.Reason, c.Message)
			} else if t == kubevirtv1.VirtualMachineInstanceReady {
				setVMCondition(&st, kubevirtv1.VirtualMachineReady, corev1.ConditionFalse, ReasonGuestNotRunning, "Guest VM is not reported as running")
			} else {
				removeVMCondition(&st, kubevirtv1.VirtualMachineConditionType(t))
			}
		}
	}
	if equality.Semantic.DeepEqual(st, vm.Status) {
		return nil
	}
	vm.Status = st
	return s.cl.Status().Update(ctx, vm)
}

func (s *Sim) createVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: vm.Namespace,
			Name:      vm.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine",
				Name: vm.Name, UID: vm.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
	}
	if vm.Spec.Template != nil {
		vmi.Labels = vm.Spec.Template.ObjectMeta.Labels
		vmi.Annotations = vm.Spec.Template.ObjectMeta.Annotations
		vmi.Spec = *vm.Spec.Template.Spec.DeepCopy()
	}
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels["vm.kubevirt.io/name"] = vm.Name
	if err := s.cl.Create(ctx, vmi); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("VMI exists but is not this VM's: %w", err)
		}
		return nil, err
	}
	return vmi, nil
}

// printableStatus is what `kubectl get vm` shows in STATUS.
func (s *Sim) printableStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) kubevirtv1.VirtualMachinePrintableStatus {
	if vmi == nil {
		return kubevirtv1.VirtualMachineStatusStopped
	}
	switch vmi.Status.Phase {
	case kubevirtv1.Running:
		return kubevirtv1.VirtualMachineStatusRunning
	case kubevirtv1.Succeeded, kubevirtv1.Failed:
		return kubevirtv1.VirtualMachineStatusStopped
	case kubevirtv1.Scheduling:
		if c := findVMICondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil && c.Reason == ReasonUnschedulable {
			return kubevirtv1.VirtualMachineStatusUnschedulable
		}
	case "", kubevirtv1.Pending:
		if p, _, _ := s.volumeProblem(ctx, vmi); p != "" {
			return p
		}
	}
	return kubevirtv1.VirtualMachineStatusStarting
}

// volumeProblem says what keeps the VMI's volumes from being usable:
// a missing DataVolume or PVC, a failed DataVolume, or one not yet
// Succeeded. Empty when all are fine.
func (s *Sim) volumeProblem(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (kubevirtv1.VirtualMachinePrintableStatus, string, string) {
	for _, v := range vmi.Spec.Volumes {
		var name string
		isDV := false
		switch {
		case v.DataVolume != nil:
			name, isDV = v.DataVolume.Name, true
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		default:
			continue
		}
		dv := &cdiv1.DataVolume{}
		err := s.cl.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, dv)
		switch {
		case err == nil:
			switch dv.Status.Phase {
			case cdiv1.Succeeded:
				continue
			case cdiv1.Failed:
				msg := fmt.Sprintf("DataVolume %s/%s failed", vmi.Namespace, name)
				for _, c := range dv.Status.Conditions {
					if c.Type == cdiv1.DataVolumeRunning && c.Message != "" {
						msg += ": " + c.Message
					}
				}
				return kubevirtv1.VirtualMachineStatusDataVolumeError, ReasonDataVolumeFailed, msg
			default:
				return kubevirtv1.VirtualMachineStatusProvisioning, ReasonDataVolumeNotReady,
					fmt.Sprintf("DataVolume %s/%s is not ready (phase %q)", vmi.Namespace, name, dv.Status.Phase)
			}
		case !apierrors.IsNotFound(err):
			return "", "", "" // cannot tell now; the next pass will
		}
		if !isDV {
			pvc := &corev1.PersistentVolumeClaim{}
			err := s.cl.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, pvc)
			if err == nil || !apierrors.IsNotFound(err) {
				continue
			}
			return kubevirtv1.VirtualMachineStatusPvcNotFound, ReasonFailedPvcNotFound,
				fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, name)
		}
		return kubevirtv1.VirtualMachineStatusPvcNotFound, ReasonFailedPvcNotFound,
			fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, name)
	}
	return "", "", ""
}

// stepVMI moves a VMI through Pending, Scheduling, Scheduled and Running,
// as virt-controller, the scheduler and virt-handler would.
func (s *Sim) stepVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	st := &vmi.Status
	podScheduled := kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
	synchronized := kubevirtv1.VirtualMachineInstanceSynchronized
	setPhase := func(p kubevirtv1.VirtualMachineInstancePhase) { setVMIPhase(st, p) }
	if s.bootsGuest(vmi) && (st.Phase == kubevirtv1.Scheduled || st.Phase == kubevirtv1.Running) {
		return s.stepBootedVMI(ctx, vmi)
	}
	switch st.Phase {
	case "":
		setPhase(kubevirtv1.Pending)
		setVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, ReasonGuestNotRunning, "Guest VM is not reported as running")
	case kubevirtv1.Pending:
		_, reason, msg := s.volumeProblem(ctx, vmi)
		if reason != "" {
			setVMICondition(st, synchronized, corev1.ConditionFalse, reason, msg)
			return nil
		}
		removeVMICondition(st, synchronized)
		if s.due(vmi.UID, string(kubevirtv1.Pending), s.opts.Step) {
			setPhase(kubevirtv1.Scheduling)
		}
	case kubevirtv1.Scheduling:
		if f := s.schedulingFailure(); f != Schedulable {
			setVMICondition(st, podScheduled, corev1.ConditionFalse, ReasonUnschedulable, f.message())
			return nil
		}
		if s.due(vmi.UID, string(kubevirtv1.Scheduling), s.opts.Step) {
			setVMICondition(st, podScheduled, corev1.ConditionTrue, "", "")
			st.NodeName = NodeName
			setPhase(kubevirtv1.Scheduled)
		}
	case kubevirtv1.Scheduled:
		if s.due(vmi.UID, string(kubevirtv1.Scheduled), s.opts.Step) {
			setPhase(kubevirtv1.Running)
			st.GuestOSInfo = kubevirtv1.VirtualMachineInstanceGuestOSInfo{}
			st.Interfaces = interfaces(vmi, false)
			s.setReady(vmi, false)
		}
	case kubevirtv1.Running:
		agent := s.hasAgent(vmi.Namespace, vmi.Name, vmi.Annotations) &&
			s.due(vmi.UID, string(kubevirtv1.Running), s.opts.AgentDelay)
		if agent {
			setVMICondition(st, kubevirtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, "", "")
			st.GuestOSInfo = kubevirtv1.VirtualMachineInstanceGuestOSInfo{Name: "kubesim guest", ID: "kubesim", KernelRelease: "6.1.0-kubesim"}
		}
		st.Interfaces = interfaces(vmi, agent)
		s.setReady(vmi, agent)
	}
	return nil
}

func setVMIPhase(st *kubevirtv1.VirtualMachineInstanceStatus, p kubevirtv1.VirtualMachineInstancePhase) {
	st.Phase = p
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		Phase: p, PhaseTransitionTimestamp: metav1.NewTime(time.Now().Truncate(time.Second)),
	})
}

// setReady sets the VMI's Ready condition: ready once running, or, with a
// readiness probe, once the guest (its agent) answers.
func (s *Sim) setReady(vmi *kubevirtv1.VirtualMachineInstance, agent bool) {
	if vmi.Spec.ReadinessProbe != nil && !agent {
		setVMICondition(&vmi.Status, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [compute]")
		return
	}
	setVMICondition(&vmi.Status, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "")
}

// interfaces reports the VMI's NICs: MACs from the spec (or made up,
// locally administered), addresses from documentation ranges (never
// contacted): pod-network addresses always, others once the guest agent
// reports them.
func interfaces(vmi *kubevirtv1.VirtualMachineInstance, agent bool) []kubevirtv1.VirtualMachineInstanceNetworkInterface {
	ifaces := vmi.Spec.Domain.Devices.Interfaces
	if len(ifaces) == 0 {
		ifaces = []kubevirtv1.Interface{{Name: "default"}}
	}
	pod := map[string]bool{"default": len(vmi.Spec.Networks) == 0}
	for _, n := range vmi.Spec.Networks {
		pod[n.Name] = n.Pod != nil
	}
	var out []kubevirtv1.VirtualMachineInstanceNetworkInterface
	for i, iface := range ifaces {
		sum := sha256.Sum256([]byte(string(vmi.UID) + "/" + iface.Name))
		mac := iface.MacAddress
		if mac == "" {
			mac = net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}.String()
		}
		ni := kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: iface.Name, MAC: mac, InfoSource: "domain"}
		var ip string
		switch {
		case pod[iface.Name]:
			ip = net.IPv4(192, 0, 2, 1+sum[5]%250).String() // TEST-NET-1
			ni.PodInterfaceName = "eth0"
		case agent:
			ip = net.IPv4(198, 51, 100, 1+sum[5]%250).String() // TEST-NET-2
		}
		if agent {
			ni.InfoSource = "domain, guest-agent"
			ni.InterfaceName = fmt.Sprintf("eth%d", i)
			ni.LinkState = "up"
		}
		if ip != "" {
			ni.IP, ni.IPs = ip, []string{ip}
		}
		out = append(out, ni)
	}
	return out
}

func findVMICondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) corev1.ConditionStatus {
	if c := findVMICondition(vmi, t); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

func setVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, t kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, message string) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == t {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message = status, reason, message
			return
		}
	}
	st.Conditions = append(st.Conditions, kubevirtv1.VirtualMachineInstanceCondition{
		Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now,
	})
}

func removeVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, t kubevirtv1.VirtualMachineInstanceConditionType) {
	out := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}

func setVMCondition(st *kubevirtv1.VirtualMachineStatus, t kubevirtv1.VirtualMachineConditionType, status corev1.ConditionStatus, reason, message string) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == t {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message = status, reason, message
			return
		}
	}
	st.Conditions = append(st.Conditions, kubevirtv1.VirtualMachineCondition{
		Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now,
	})
}

func removeVMCondition(st *kubevirtv1.VirtualMachineStatus, t kubevirtv1.VirtualMachineConditionType) {
	out := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	st.Conditions = out
}
