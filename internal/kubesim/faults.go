package kubesim

import "sync"

// SchedulingFailure is why the simulated scheduler cannot place a VMI's
// virt-launcher pod.
type SchedulingFailure int

const (
	// Schedulable means no failure: VMIs schedule.
	Schedulable SchedulingFailure = iota
	// InsufficientMemory is a capacity shortage: it goes away when
	// capacity returns (ClearSchedulingFailure), so it is worth retrying.
	InsufficientMemory
	// MissingKVM means no node offers /dev/kvm (devices.kubevirt.io/kvm):
	// someone must enable virtualization or emulation.
	MissingKVM
)

// Messages of the PodScheduled=False condition, as the scheduler writes
// them for a three-node cluster.
const (
	MessageInsufficientMemory = "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	MessageMissingKVM         = "0/3 nodes are available: 3 Insufficient devices.kubevirt.io/kvm. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)

func (f SchedulingFailure) message() string {
	switch f {
	case InsufficientMemory:
		return MessageInsufficientMemory
	case MissingKVM:
		return MessageMissingKVM
	}
	return ""
}

// DefaultTransientMessage is the message of an injected DataVolume failure
// when none is given: the transfer pod was evicted.
const DefaultTransientMessage = "The node was low on resource: ephemeral-storage. Container importer was using 4Gi, request is 0, has larger consumption of ephemeral-storage."

type dvFailure struct{ reason, message string }

type faults struct {
	mu         sync.Mutex
	dvFailures []dvFailure
	scheduling SchedulingFailure
	noAgent    map[string]bool
}

// FailNextDataVolumes makes the next n DataVolumes to be scheduled fail
// once: they go to phase Failed with the Running condition's reason and
// message (ReasonEvicted and DefaultTransientMessage when empty). A
// DataVolume recreated afterwards (new UID) proceeds normally.
func (s *Sim) FailNextDataVolumes(n int, reason, message string) {
	if reason == "" {
		reason = ReasonEvicted
	}
	if message == "" {
		message = DefaultTransientMessage
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	for range n {
		s.faults.dvFailures = append(s.faults.dvFailures, dvFailure{reason, message})
	}
}

func (s *Sim) takeDataVolumeFailure() (dvFailure, bool) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if len(s.faults.dvFailures) == 0 {
		return dvFailure{}, false
	}
	f := s.faults.dvFailures[0]
	s.faults.dvFailures = s.faults.dvFailures[1:]
	return f, true
}

// SetSchedulingFailure makes every VMI that is (or comes to be) in phase
// Scheduling stay there, with PodScheduled=False, reason Unschedulable and
// f's message, until ClearSchedulingFailure.
func (s *Sim) SetSchedulingFailure(f SchedulingFailure) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.scheduling = f
}

// ClearSchedulingFailure lets waiting VMIs schedule.
func (s *Sim) ClearSchedulingFailure() { s.SetSchedulingFailure(Schedulable) }

func (s *Sim) schedulingFailure() SchedulingFailure {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.scheduling
}

// GuestNeverReady makes the guest of the VM namespace/name run without a
// guest agent: the VMI reaches Running but AgentConnected never turns True
// (nor Ready, when the VMI has a readiness probe). The annotation
// AnnotationNoGuestAgent on the VM's template does the same.
func (s *Sim) GuestNeverReady(namespace, name string) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if s.faults.noAgent == nil {
		s.faults.noAgent = map[string]bool{}
	}
	s.faults.noAgent[namespace+"/"+name] = true
}

func (s *Sim) hasAgent(namespace, name string, annotations map[string]string) bool {
	if annotations[AnnotationNoGuestAgent] == "true" {
		return false
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return !s.faults.noAgent[namespace+"/"+name]
}
