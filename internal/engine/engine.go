package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// DefaultHostLimit is how many migrations may be in the host-reading
// phases (Discovering through Preparing) at once per host when
// Deps.HostLimits does not name the host.
const DefaultHostLimit = 2

// DefaultPollInterval is how often the engine re-observes objects it waits
// for.
const DefaultPollInterval = 2 * time.Second

// Clock tells the time for timestamps and lease expiry.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Deps are the engine's collaborators.
type Deps struct {
	// ESXi holds the clients of the configured hosts, by name.
	ESXi *esxi.Registry
	// Kube is the destination cluster.
	Kube *kube.Client
	// Uploader sends images through CDI's upload proxy (transport
	// cdi_upload). Nil means NewCDIUploader.
	Uploader Uploader
	// HostLimits bounds, per host name, how many migrations may be in the
	// phases that read the host (Discovering..Preparing) at once;
	// DefaultHostLimit for hosts it does not name.
	HostLimits map[string]int
	// Clock defaults to the system clock.
	Clock Clock
	// Progress, if set, receives phase changes, disk progress, retries and
	// stops. It must be safe for concurrent use and must not block.
	Progress func(Event)
	// QemuImg is the qemu-img binary (convert.DefaultBinary from PATH if
	// empty).
	QemuImg string
	// VirtioWin is where guest conversions find the Windows virtio-win
	// drivers (a folder or ISO); $VIRTIO_WIN, else
	// convert.DefaultVirtioWin, when empty.
	VirtioWin string
	// ConversionStallTimeout is how long virt-v2v may print nothing before
	// it is killed and the conversion retried;
	// convert.DefaultV2VStallTimeout when zero.
	ConversionStallTimeout time.Duration
	// LeaseDuration defaults to coord.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
	// Identity names this process as lease holder; random if empty.
	Identity string
	// ClaimNamespace holds the claims that keep two migrations from moving
	// one source VM (coord.DefaultClaimNamespace when empty), and the host
	// slots of cluster execution's copy Jobs.
	ClaimNamespace string
	// WorkerImage is the image cluster execution's Jobs run (the
	// provider's worker_image, pinned by digest); cluster execution is
	// refused by the pre-flight checks without it.
	WorkerImage string
	// MaxConcurrentConversions bounds the conversion Jobs of cluster
	// execution running at once in the cluster, across every runner
	// (DefaultMaxConcurrentConversions when zero).
	MaxConcurrentConversions int
	// SlotGrace is how long a host slot taken for a copy Job whose Job
	// does not exist yet stays its holder's (DefaultSlotGrace when zero).
	SlotGrace time.Duration
}

// EventKind says what an Event reports.
type EventKind string

// Event kinds.
const (
	EventPhase    EventKind = "phase"
	EventProgress EventKind = "progress"
	EventRetry    EventKind = "retry"
	EventStop     EventKind = "stop"
	EventInfo     EventKind = "info"
)

// TransferKind says what a transfer does with a disk's bytes.
type TransferKind string

// Transfer kinds.
const (
	// TransferCopy reads a disk, or one file of its snapshot chain, from
	// the ESXi host into the staging folder.
	TransferCopy TransferKind = "copy"
	// TransferFlatten flattens a disk's snapshot chain into its staged
	// copy.
	TransferFlatten TransferKind = "flatten"
	// TransferImage makes, from the staged copy, the image a DataVolume
	// receives.
	TransferImage TransferKind = "image"
	// TransferUpload sends an image through CDI's upload proxy.
	TransferUpload TransferKind = "upload"
	// TransferImport is CDI filling a DataVolume.
	TransferImport TransferKind = "import"
)

// Transfer names what a progress event measures. With the event's Phase
// and Disk it identifies one transfer: successive progress events with the
// same identity report the same transfer, whose throughput is measured
// from its first report.
type Transfer struct {
	Kind TransferKind
	// File is the snapshot chain file a copy reads, "" when the transfer
	// is of a whole disk.
	File string
}

// Event is one progress report, for the provider's logs. Reports with a
// Reason are also recorded as Kubernetes Events on the migration's record
// ConfigMap.
type Event struct {
	Time      time.Time
	Kind      EventKind
	Namespace string
	Name      string
	Phase     record.Phase
	// Disk is the disk index of a progress event, -1 otherwise (and for
	// the snapshot chain files of a warm precopy round, which span disks).
	Disk int
	// Transfer names what a progress event measures; zero for other kinds.
	Transfer Transfer
	// Reason is the reason of the Kubernetes Event the report was recorded
	// as ("PhaseImporting", "Retrying", "Progress", ...), "" when it was
	// not recorded.
	Reason     string
	BytesDone  int64
	BytesTotal int64
	Percent    float64
	// BytesPerSecond and ETA are the transfer's throughput since its first
	// report and the time left at that rate; zero until it has run for a
	// second (see RateText).
	BytesPerSecond float64
	ETA            time.Duration
	// Stages is, for a disk copy's progress, where the copy has spent its
	// time so far (transfer.Stages): what a slow copy is waiting for.
	Stages transfer.Stages
	// Attempt is the failed attempt of a retry event; Backoff its wait.
	Attempt int
	Backoff time.Duration
	Message string
	// recorded is the Kubernetes Event's message where it words the
	// report differently from Message; "" means Message.
	recorded string
}

// Engine drives migrations. It is safe for concurrent use by several
// migrations (of distinct destination names).
type Engine struct {
	deps     Deps
	identity string
	limiter  *hostLimiter
	tool     *convert.Tool
	v2v      *v2vState
	// inventories shares host inventory reads (see Inventory).
	inventories inventoryCache
	// slotBoard shares between this engine's waiting copies and
	// conversions what they learned of full slots (coord.SlotBoard).
	slotBoard *coord.SlotBoard
	// wake ends waits on Jobs and VMs when they change (wakeups.go).
	wake *wakeups
}

// New returns an engine for deps.
func New(deps Deps) (*Engine, error) {
	if deps.ESXi == nil || deps.Kube == nil {
		return nil, errors.New("engine: Deps.ESXi and Deps.Kube are required")
	}
	if deps.Clock == nil {
		deps.Clock = realClock{}
	}
	if deps.LeaseDuration <= 0 {
		deps.LeaseDuration = coord.DefaultLeaseDuration
	}
	if deps.PollInterval <= 0 {
		deps.PollInterval = DefaultPollInterval
	}
	id := deps.Identity
	if id == "" {
		host, _ := os.Hostname()
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		id = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if deps.Uploader == nil {
		deps.Uploader = NewCDIUploader(deps.Kube)
	}
	return &Engine{
		deps:     deps,
		identity: id,
		limiter:  newHostLimiter(deps.HostLimits),
		tool:     &convert.Tool{Path: deps.QemuImg},
		v2v:      &v2vState{tool: convert.V2V{VirtioWin: deps.VirtioWin, Accel: guestboot.ProbeAccel(), StallTimeout: deps.ConversionStallTimeout}},
		// One cluster ask per poll for all of a full host's waiters.
		slotBoard: &coord.SlotBoard{FreshFor: deps.PollInterval},
		wake:      &wakeups{kc: deps.Kube},
	}, nil
}

// Identity returns the engine's lease holder identity.
func (e *Engine) Identity() string { return e.identity }

// MaxConcurrent returns the largest number of migrations that were in the
// host-reading phases of host at the same time.
func (e *Engine) MaxConcurrent(host string) int { return e.limiter.maxSeen(host) }

func (e *Engine) now() time.Time { return e.deps.Clock.Now().UTC().Truncate(time.Millisecond) }

// store is where the records of migrations are, and their Events go.
func (e *Engine) store() coord.Store { return coord.Store{Kube: e.deps.Kube, Now: e.now} }

// leases are the Leases this engine holds while it drives a migration.
func (e *Engine) leases() coord.Leases {
	return coord.Leases{Kube: e.deps.Kube, Holder: e.identity, Duration: e.deps.LeaseDuration, Now: e.now}
}

// acquireLeaseWaiting takes the migration's Lease for Run and Forget,
// waiting once for one that a killed run left behind to expire (see
// coord.Leases.AcquireWaiting), and saying so on the progress callback.
func (e *Engine) acquireLeaseWaiting(ctx context.Context, namespace, name string) (*coord.Lease, context.Context, error) {
	return e.leases().AcquireWaiting(ctx, namespace, name, func(held *coord.LeaseHeldError) {
		e.emit(Event{Time: e.now(), Kind: EventInfo, Namespace: namespace, Name: name, Disk: -1,
			Message: fmt.Sprintf("waiting until %s for the lease of %s, which stopped renewing it (a run that was killed?)",
				held.Expires.Format(time.RFC3339), held.Holder)})
	})
}

func (e *Engine) emit(ev Event) {
	if e.deps.Progress == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	e.deps.Progress(ev)
}

// hostLimiter is a counting semaphore per host name that remembers the
// highest concurrency it allowed.
type hostLimiter struct {
	limits map[string]int
	mu     sync.Mutex
	cur    map[string]int
	peak   map[string]int
	wake   chan struct{}
}

func newHostLimiter(limits map[string]int) *hostLimiter {
	return &hostLimiter{limits: limits, cur: map[string]int{}, peak: map[string]int{}, wake: make(chan struct{})}
}

func (l *hostLimiter) limit(host string) int {
	if n, ok := l.limits[host]; ok && n > 0 {
		return n
	}
	return DefaultHostLimit
}

func (l *hostLimiter) tryAcquire(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur[host] >= l.limit(host) {
		return false
	}
	l.cur[host]++
	l.peak[host] = max(l.peak[host], l.cur[host])
	return true
}

func (l *hostLimiter) acquire(ctx context.Context, host string) error {
	for {
		l.mu.Lock()
		if l.cur[host] < l.limit(host) {
			l.cur[host]++
			l.peak[host] = max(l.peak[host], l.cur[host])
			l.mu.Unlock()
			return nil
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

func (l *hostLimiter) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur[host]--
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *hostLimiter) maxSeen(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak[host]
}
