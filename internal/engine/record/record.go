// Package record is a migration's durable record: the checkpoint it is
// in, the decisions taken and the evidence gathered (checksums, object
// names, timestamps, errors), and its JSON as the engine stores it in the
// destination cluster. It is a leaf: it knows no host, cluster or engine,
// so that every reader of a record (the engine, the provider, tests and
// tools) reads the same shape.
package record

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// Phase is a migration's checkpoint: what the engine is working to make
// true now, or the stop state it is in.
type Phase string

// Phases, in order, then the stop states.
const (
	PhasePending     Phase = "Pending"
	PhaseDiscovering Phase = "Discovering"
	PhaseValidated   Phase = "Validated"
	PhasePreparing   Phase = "Preparing"
	PhaseConverting  Phase = "Converting"
	PhaseImporting   Phase = "Importing"
	PhaseCreatingVM  Phase = "CreatingVM"
	PhaseStarting    Phase = "Starting"
	PhaseValidating  Phase = "Validating"
	PhaseCompleted   Phase = "Completed"

	// PhaseRetryable: a step failed in a way that may succeed on retry;
	// RetryPhase is resumed after a backoff.
	PhaseRetryable Phase = "Retryable"
	// PhaseManualInterventionRequired: a human must act; the next Run
	// re-enters RetryPhase.
	PhaseManualInterventionRequired Phase = "ManualInterventionRequired"
	// PhaseFailed is terminal until a human adds AnnotationReset.
	PhaseFailed Phase = "Failed"
)

// StopPhases are the states a migration waits in for a retry or a human.
var StopPhases = []Phase{PhaseRetryable, PhaseManualInterventionRequired, PhaseFailed}

// ConditionTypes lists the condition types in the order they are reached.
var ConditionTypes = []string{CondSourceDiscovered, CondValidated, CondSourcePoweredOff, CondDiskAcquired, CondDiskConverted,
	CondDiskImported, CondVMCreated, CondVMStarted, CondGuestReady, CondReady}

// PowerActions lists the values of PowerOff.Action.
var PowerActions = []string{PowerActionAlreadyOff, PowerActionGraceful, PowerActionHard, PowerActionUser}

// TimestampNames are the keys of Timestamps.Map, in the order reached.
var TimestampNames = []string{"created", "discovered", "validated", "sourcePoweredOff", "acquired", "converted",
	"imported", "vmCreated", "vmStarted", "completed"}

// Downtime is what users felt: from the source powered off to the
// migrated VM started. Zero until both happened; a source that was already
// off before the migration counts from when the migration found it off.
func (r Record) Downtime() time.Duration {
	t := r.Timestamps
	if t.SourcePoweredOff == nil || t.VMStarted == nil || t.VMStarted.Before(*t.SourcePoweredOff) {
		return 0
	}
	return t.VMStarted.Sub(*t.SourcePoweredOff)
}

// Condition types, named after observed state.
const (
	CondSourceDiscovered = "SourceDiscovered"
	CondValidated        = "Validated"
	CondSourcePoweredOff = "SourcePoweredOff"
	CondDiskAcquired     = "DiskAcquired"
	CondDiskConverted    = "DiskConverted"
	CondDiskImported     = "DiskImported"
	CondVMCreated        = "VMCreated"
	CondVMStarted        = "VMStarted"
	CondGuestReady       = "GuestReady"
	CondReady            = "Ready"
)

// Power-off actions recorded in PowerOff.Action.
const (
	PowerActionAlreadyOff = "already_off"
	PowerActionGraceful   = "graceful"
	PowerActionHard       = "hard"
	PowerActionUser       = "user"
)

// Where a migration's disk work runs (Record.Execution).
const (
	// ExecutionLocal copies, converts and uploads on the machine running
	// the provider.
	ExecutionLocal = "local"
	// ExecutionCluster copies and converts in Kubernetes Jobs that write
	// the DataVolumes' claims; the runner only decides, observes and
	// records.
	ExecutionCluster = "cluster"
)

// Executions lists the values of Record.Execution.
var Executions = []string{ExecutionLocal, ExecutionCluster}

// ExecutionOf is the execution a record says, local for records that
// predate the field.
func (r *Record) ExecutionOf() string {
	if r.Execution == "" {
		return ExecutionLocal
	}
	return r.Execution
}

// The digests a record's checksums can be (Record.DiskDigest).
const (
	// DigestTree1MiB is the disk digest of package diskdigest: the
	// SHA-256 of the SHA-256s of a file's 1 MiB blocks in order.
	DigestTree1MiB = diskdigest.Name
	// DigestPlainSHA256 is a plain SHA-256 of the whole file, what records
	// from before DigestTree1MiB hold.
	DigestPlainSHA256 = "sha256"
)

// DigestOf names the digest the record's checksums are.
func (r *Record) DigestOf() string {
	if r.DiskDigest == "" {
		return DigestPlainSHA256
	}
	return r.DiskDigest
}

// RecordVersion is the version of the record's JSON shape.
const RecordVersion = 1

// Record is a migration's durable checkpoint, stored as JSON in the
// destination cluster. It is the engine's memory across processes; every
// step re-observes the real systems before trusting it.
type Record struct {
	Version  int      `json:"version"`
	Identity Identity `json:"identity"`
	// Phase is the current checkpoint or stop state.
	Phase Phase `json:"phase"`
	// RetryPhase is the checkpoint a stop state (Retryable,
	// ManualInterventionRequired, Failed) resumes or stopped in.
	RetryPhase Phase `json:"retryPhase,omitempty"`
	// Attempts counts failed tries of the current checkpoint.
	Attempts int `json:"attempts"`
	// Reason and Message explain the stop state; Action says what to do.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Action  string `json:"action,omitempty"`

	Conditions []Condition `json:"conditions,omitempty"`
	Timestamps Timestamps  `json:"timestamps"`
	// PowerOff is the one power-off decision, never re-decided.
	PowerOff *PowerOff `json:"powerOff,omitempty"`
	// Warm is a warm migration's snapshots and copies (see prepare_warm.go).
	Warm *WarmEvidence `json:"warm,omitempty"`
	// Source is the inventory snapshot taken in Discovering.
	Source *SourceInventory `json:"source,omitempty"`
	// Preflight holds the Validated phase's checks.
	Preflight []CheckResult  `json:"preflight,omitempty"`
	Disks     []DiskEvidence `json:"disks,omitempty"`
	// StagingToken is the random folder name (32 hex digits) that makes
	// the http transport's image URLs unguessable; made once, before the
	// first image is written.
	StagingToken string      `json:"stagingToken,omitempty"`
	VM           *VMEvidence `json:"vm,omitempty"`
	// ConversionMode is the conversion the migration was asked for
	// (Spec.Conversion), so that an import reads it back; empty in
	// records from before conversions existed.
	ConversionMode string `json:"conversionMode,omitempty"`
	// Conversion is the guest conversion's evidence, once it ran.
	Conversion *ConversionEvidence `json:"conversion,omitempty"`
	// ConvertAttempt is, in cluster execution, the number of the VM's
	// conversion Job attempt (from 1), recorded before its Job is
	// created; ConvertJob and ConvertJobUID are the Job last created or
	// adopted for it.
	ConvertAttempt int    `json:"convertAttempt,omitempty"`
	ConvertJob     string `json:"convertJob,omitempty"`
	ConvertJobUID  string `json:"convertJobUID,omitempty"`
	// Execution is where the migration's disk work runs, ExecutionLocal
	// or ExecutionCluster: recorded when the migration is Validated and
	// never switched afterwards. Empty in records from before cluster
	// execution existed, which are local.
	Execution string `json:"execution,omitempty"`
	// JournalClaims says that, in cluster execution, each disk's copy
	// journal, chain state, delta copies and conversion overlay are kept
	// in a journal claim of their own, so that the DataVolume asks for
	// exactly the disk: recorded with Execution. Records from before the
	// field kept them beside disk.img in a Filesystem-mode claim (which
	// asked for that room too) and in journal claims for Block mode.
	JournalClaims bool `json:"journalClaims,omitempty"`
	// DiskDigest names the digest that every checksum of the record is
	// (source, guest, artifact, converted, upload and chain files):
	// DigestTree1MiB in records made since it was introduced; empty in
	// older records, whose checksums are plain SHA-256s of whole files
	// (DigestPlainSHA256).
	DiskDigest string `json:"diskDigest,omitempty"`
	// Validation holds the Validating phase's check results.
	Validation []CheckResult `json:"validation,omitempty"`
	// Errors is the history of failed attempts, interruptions and human
	// re-entries, oldest first: at most MaxErrorEntries, the first one and
	// the latest ones, each message at most MaxErrorMessageBytes.
	Errors []ErrorEntry `json:"errors,omitempty"`
	// ErrorsDropped counts the entries left out of Errors to keep it
	// bounded.
	ErrorsDropped int `json:"errorsDropped,omitempty"`
}

// Bounds of the error history, which lives in a ConfigMap (1 MiB at most
// for the whole record).
const (
	MaxErrorEntries      = 20
	MaxErrorMessageBytes = 1024
	// MaxStopMessageBytes bounds Record.Message and Record.Action.
	MaxStopMessageBytes = 4096
)

// AddError appends an entry to the history, shortening its message, and
// drops the oldest entries but the first beyond MaxErrorEntries.
func (r *Record) AddError(e ErrorEntry) {
	e.Message = TruncateMessage(e.Message, MaxErrorMessageBytes)
	r.Errors = append(r.Errors, e)
	if n := len(r.Errors); n > MaxErrorEntries {
		drop := n - MaxErrorEntries
		r.Errors = append(r.Errors[:1], r.Errors[1+drop:]...)
		r.ErrorsDropped += drop
	}
}

// TruncateMessage shortens s to at most limit bytes of valid UTF-8, saying
// how long it was.
func TruncateMessage(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	suffix := fmt.Sprintf("... (%d bytes in all)", len(s))
	cut := limit - len(suffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}

// Identity names the source and destination of a migration. It is fixed
// once discovered.
type Identity struct {
	Host      string `json:"host"`
	VMID      int    `json:"vmid,omitempty"`
	VMName    string `json:"vmName,omitempty"`
	VMXPath   string `json:"vmxPath,omitempty"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Condition is one observed fact about the migration.
type Condition struct {
	Type    string    `json:"type"`
	Status  bool      `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time"`
}

// Timestamps are set when a checkpoint's goal is first observed.
// SourcePoweredOff is set once and never changed.
type Timestamps struct {
	Created          *time.Time `json:"created,omitempty"`
	Discovered       *time.Time `json:"discovered,omitempty"`
	Validated        *time.Time `json:"validated,omitempty"`
	SourcePoweredOff *time.Time `json:"sourcePoweredOff,omitempty"`
	Acquired         *time.Time `json:"acquired,omitempty"`
	Converted        *time.Time `json:"converted,omitempty"`
	Imported         *time.Time `json:"imported,omitempty"`
	VMCreated        *time.Time `json:"vmCreated,omitempty"`
	VMStarted        *time.Time `json:"vmStarted,omitempty"`
	Completed        *time.Time `json:"completed,omitempty"`
}

// PowerOff is the power-off decision. It is written before the engine acts
// (Done false) and completed once the source is observed off, so that an
// interruption in between resumes the same decision instead of taking a
// new one.
type PowerOff struct {
	// Policy is the power-off policy in force when deciding.
	Policy string `json:"policy"`
	// Action is already_off, graceful, hard or user (a human powered it
	// off after the engine asked).
	Action string `json:"action"`
	// DecidedAt is when the decision was taken; Done and DoneAt when the
	// source was observed off.
	DecidedAt time.Time  `json:"decidedAt"`
	Done      bool       `json:"done"`
	DoneAt    *time.Time `json:"doneAt,omitempty"`
	// HardAfterGraceful is true when graceful_then_hard had to power off
	// hard.
	HardAfterGraceful bool `json:"hardAfterGraceful,omitempty"`
	// SeenOnAgain is set when the source was found running after the
	// power-off; the staged copies are then discarded once it is off again.
	SeenOnAgain bool   `json:"seenOnAgain,omitempty"`
	Note        string `json:"note,omitempty"`
}

// SourceInventory is what Discovering read about the source VM.
type SourceInventory struct {
	VMID            int          `json:"vmid"`
	Name            string       `json:"name"`
	VMXPath         string       `json:"vmxPath"`
	GuestOS         string       `json:"guestOS,omitempty"`
	HardwareVersion int          `json:"hardwareVersion,omitempty"`
	Firmware        string       `json:"firmware"`
	SecureBoot      bool         `json:"secureBoot"`
	CPUs            int          `json:"cpus"`
	CoresPerSocket  int          `json:"coresPerSocket,omitempty"`
	VTPM            bool         `json:"vtpm,omitempty"`
	MemoryMiB       int          `json:"memoryMiB"`
	PowerState      string       `json:"powerState"`
	ToolsRunning    bool         `json:"toolsRunning"`
	Disks           []SourceDisk `json:"disks"`
	NICs            []SourceNIC  `json:"nics"`
}

// SourceDisk is one source disk, in .vmx order.
type SourceDisk struct {
	Device         string `json:"device"`
	Bus            string `json:"bus"`
	DescriptorPath string `json:"descriptorPath"`
	DataPath       string `json:"dataPath"`
	CapacityBytes  int64  `json:"capacityBytes"`
	Thin           bool   `json:"thin"`
}

// SourceNIC is one source network adapter.
type SourceNIC struct {
	Device  string `json:"device"`
	Network string `json:"network"`
	MAC     string `json:"mac"`
	Adapter string `json:"adapter"`
}

// DiskEvidence is what the engine knows about one disk's journey.
type DiskEvidence struct {
	Index      int    `json:"index"`
	Device     string `json:"device"`
	SourcePath string `json:"sourcePath"`
	SizeBytes  int64  `json:"sizeBytes"`
	// SourceSHA256 is the SHA-256 of the source file, computed while it
	// streamed (transfer).
	SourceSHA256 string `json:"sourceSHA256,omitempty"`
	ZeroBytes    int64  `json:"zeroBytes,omitempty"`
	StagedPath   string `json:"stagedPath"`
	Acquired     bool   `json:"acquired"`
	// Chain lists the files of the snapshot chain the disk runs on (top
	// first), each with its SHA-256 once copied; empty for a disk without
	// snapshots.
	Chain []ChainFileEvidence `json:"chain,omitempty"`
	// GuestSHA256 is the SHA-256 of the guest-visible content of the
	// flattened chain; it is then also SourceSHA256, what the destination
	// must hold.
	GuestSHA256 string `json:"guestSHA256,omitempty"`

	ArtifactPath   string `json:"artifactPath,omitempty"`
	ArtifactFormat string `json:"artifactFormat,omitempty"`
	ArtifactSHA256 string `json:"artifactSHA256,omitempty"`
	ArtifactBytes  int64  `json:"artifactBytes,omitempty"`
	// ConvertedSHA256 is the SHA-256 of the image after the guest
	// conversion (then also ArtifactSHA256): what the destination must
	// hold. Empty when the guest was not converted.
	ConvertedSHA256 string `json:"convertedSHA256,omitempty"`
	// ArtifactURL is where CDI imports it from (http transport).
	ArtifactURL string `json:"artifactURL,omitempty"`

	DataVolume    string `json:"dataVolume"`
	DataVolumeUID string `json:"dataVolumeUID,omitempty"`
	// DataVolumePhase and Progress are the last observed status.
	DataVolumePhase string `json:"dataVolumePhase,omitempty"`
	Progress        string `json:"progress,omitempty"`
	// Uploaded is true once the upload of the current DataVolume (UID)
	// finished.
	Uploaded bool `json:"uploaded,omitempty"`
	// UploadFormat, UploadBytes and UploadSHA256 describe the file sent to
	// CDI's upload proxy (cdi_upload transport), recorded before it is
	// sent: a raw image goes as a qcow2 copy that carries its holes, so
	// UploadBytes follows the data, not the disk size. CDI writes it to
	// the claim as raw: the guest sees the same disk.
	UploadFormat string `json:"uploadFormat,omitempty"`
	UploadBytes  int64  `json:"uploadBytes,omitempty"`
	UploadSHA256 string `json:"uploadSHA256,omitempty"`
	// UploadRoute is the way the upload took to CDI's upload proxy: the
	// configured URL, the URL the cluster publishes, or a port-forward
	// through the API server to the proxy's pod.
	UploadRoute string `json:"uploadRoute,omitempty"`
	// DestinationSHA256 is the SHA-256 the destination reported receiving,
	// when it reports one.
	DestinationSHA256 string `json:"destinationSHA256,omitempty"`
	Imported          bool   `json:"imported"`

	// CopyAttempt is, in cluster execution, the number of the disk's copy
	// Job attempt (from 1), recorded before its Job is created so that a
	// runner that dies after creating it adopts that Job instead of
	// starting a second copy; CopyJob and CopyJobUID are the Job last
	// created or adopted for it.
	CopyAttempt int    `json:"copyAttempt,omitempty"`
	CopyJob     string `json:"copyJob,omitempty"`
	CopyJobUID  string `json:"copyJobUID,omitempty"`
}

// VMEvidence identifies the destination VirtualMachine.
type VMEvidence struct {
	Name        string `json:"name"`
	UID         string `json:"uid,omitempty"`
	RunStrategy string `json:"runStrategy,omitempty"`
	VMIPhase    string `json:"vmiPhase,omitempty"`
}

// CheckResult is the outcome of one check.
type CheckResult struct {
	ID       string    `json:"id"`
	Severity string    `json:"severity,omitempty"`
	Passed   bool      `json:"passed"`
	Message  string    `json:"message"`
	Time     time.Time `json:"time"`
}

// ErrorEntry is one entry of the error history.
type ErrorEntry struct {
	Time    time.Time `json:"time"`
	Phase   Phase     `json:"phase"`
	Class   string    `json:"class"`
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message"`
}

// Classes of the error history: the fault classes as they spell
// themselves, and the re-entries a human caused.
var (
	ClassTransient   = fault.Transient.String()
	ClassNeedsHuman  = fault.NeedsHuman.String()
	ClassPermanent   = fault.Permanent.String()
	ClassInterrupted = fault.Interrupted.String()
)

// ClassReentered marks a history entry of a run resumed after a stop.
const ClassReentered = "reentered"

// Condition returns the condition of type t, if set.
func (r *Record) Condition(t string) (Condition, bool) {
	for _, c := range r.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// SetCondition sets a condition, keeping its time when nothing changed.
func (r *Record) SetCondition(now time.Time, t string, status bool, reason, message string) {
	for i := range r.Conditions {
		c := &r.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status || c.Reason != reason || c.Message != message {
			*c = Condition{Type: t, Status: status, Reason: reason, Message: message, Time: now}
		}
		return
	}
	r.Conditions = append(r.Conditions, Condition{Type: t, Status: status, Reason: reason, Message: message, Time: now})
}

// Terminal reports whether the record is Completed or Failed.
func (r *Record) Terminal() bool { return r.Phase == PhaseCompleted || r.Phase == PhaseFailed }

// Map returns the timestamps that are set, by their JSON names.
func (t Timestamps) Map() map[string]time.Time {
	out := map[string]time.Time{}
	for i, p := range []*time.Time{t.Created, t.Discovered, t.Validated, t.SourcePoweredOff, t.Acquired,
		t.Converted, t.Imported, t.VMCreated, t.VMStarted, t.Completed} {
		if p != nil {
			out[TimestampNames[i]] = *p
		}
	}
	return out
}

// Kinds of ChainFileEvidence.
const (
	ChainFileDescriptor = "descriptor"
	ChainFileExtent     = "extent"
)

// ChainFileEvidence is one file of a disk's snapshot chain.
type ChainFileEvidence struct {
	// Link is the link's position, 0 for the descriptor the VM runs on,
	// the last for the base; Extent the extent's position in its link.
	Link   int `json:"link"`
	Extent int `json:"extent,omitempty"`
	// Kind is "descriptor" or "extent".
	Kind string `json:"kind"`
	// Format is the link's createType ("seSparse", "vmfsSparse", "vmfs").
	Format string `json:"format"`
	// SourcePath is the file on the host.
	SourcePath string `json:"sourcePath"`
	// CID and ParentCID are the descriptor's (descriptors only).
	CID       string `json:"cid,omitempty"`
	ParentCID string `json:"parentCID,omitempty"`
	// Bytes and SHA256 are the copied file's length and hex SHA-256.
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// OnChain reports a disk that runs on a snapshot chain.
func (d *DiskEvidence) OnChain() bool { return len(d.Chain) > 0 }

// ConversionEvidence is what a guest conversion saw and did.
type ConversionEvidence struct {
	// Tool and Version are the virt-v2v program that ran.
	Tool    string `json:"tool"`
	Version string `json:"version"`
	// Accelerator is what libguestfs's helper VM ran on ("kvm" or "tcg").
	Accelerator string `json:"accelerator"`
	// OS is the guest as virt-v2v inspected it.
	OS GuestOS `json:"os"`
	// Converted is virt-v2v's summary, e.g. "Converting 12.15 to run on KVM".
	Converted string `json:"converted,omitempty"`
	// Drivers and Warnings are virt-v2v's messages about them.
	Drivers  []string `json:"drivers,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Seconds is how long the conversion took.
	Seconds float64   `json:"seconds"`
	Time    time.Time `json:"time"`
	// Job is, in cluster execution, the conversion Job that converted
	// the guest in the claims.
	Job string `json:"job,omitempty"`
}

// GuestOS is an inspected guest operating system.
type GuestOS struct {
	// Type is "linux" or "windows"; Distro e.g. "debian", "rhel",
	// "windows"; Version "major.minor"; OSInfo the libosinfo ID
	// ("debian12", "win2k22").
	Type        string `json:"type"`
	Distro      string `json:"distro,omitempty"`
	Version     string `json:"version,omitempty"`
	OSInfo      string `json:"osinfo,omitempty"`
	Arch        string `json:"arch,omitempty"`
	ProductName string `json:"productName,omitempty"`
	// Firmware is "bios" or "uefi", as the disks show it.
	Firmware string `json:"firmware,omitempty"`
}

// String is how the OS is shown to users, e.g. "debian 12.15 (debian12)".
func (g GuestOS) String() string {
	s := strings.TrimSpace(g.Distro + " " + g.Version)
	if g.ProductName != "" && g.ProductName != g.Version {
		s = g.ProductName
	}
	if g.OSInfo != "" {
		s += " (" + g.OSInfo + ")"
	}
	return s
}

// WarmEvidence is what a warm migration did before and at cutover.
type WarmEvidence struct {
	// Rounds is the most precopy rounds the migration takes.
	Rounds int `json:"rounds"`
	// StopBytes is Spec.PrecopyStopBytes when the precopy began (0: every
	// round is taken); nil in records of precopies that began before it
	// existed, which take every round.
	StopBytes *int64 `json:"stopBytes,omitempty"`
	// Stopped is set, with the copy of the round it names, when the
	// precopy ended before Rounds.
	Stopped *WarmStop `json:"stopped,omitempty"`
	// Snapshots are the migration's own snapshots, by round.
	Snapshots []WarmSnapshot `json:"snapshots,omitempty"`
	// SkippedReason says why no snapshot was taken (the source was off).
	SkippedReason string `json:"skippedReason,omitempty"`
	// CutoverFiles and CutoverBytes are the chain files copied after the
	// power-off and their total size: the copy part of the downtime.
	CutoverFiles int   `json:"cutoverFiles,omitempty"`
	CutoverBytes int64 `json:"cutoverBytes,omitempty"`
	// CutoverStarted is when the source was found off for the cutover
	// copy; CutoverCopied when that copy was complete.
	CutoverStarted *time.Time `json:"cutoverStarted,omitempty"`
	CutoverCopied  *time.Time `json:"cutoverCopied,omitempty"`
	// Frozen are the descriptors of the links the precopy copied, with
	// their CIDs then.
	Frozen []WarmFrozenLink `json:"frozen,omitempty"`
}

// WarmStop records why the precopy ended before its last round.
type WarmStop struct {
	// Round is the last round taken; Bytes what it copied, at most Limit
	// (WarmEvidence.StopBytes).
	Round int   `json:"round"`
	Bytes int64 `json:"bytes"`
	Limit int64 `json:"limit"`
	// Reason says it in words, as the event did.
	Reason string `json:"reason"`
	// Renames move the copied chain files to the links the final chain
	// gives them; Renamed counts those done, in order.
	Renames []WarmRename `json:"renames,omitempty"`
	Renamed int          `json:"renamed,omitempty"`
}

// WarmRename moves disk Disk's copied files of link From to link To.
type WarmRename struct {
	Disk int `json:"disk"`
	From int `json:"from"`
	To   int `json:"to"`
}

// WarmSnapshot is one snapshot a warm migration takes on the source.
type WarmSnapshot struct {
	// Round is the precopy round (1 first).
	Round int `json:"round"`
	// Name is the snapshot's name on the host, derived from the migration.
	Name string `json:"name"`
	// IntendedAt is when the snapshot was decided, before vim-cmd ran.
	IntendedAt time.Time `json:"intendedAt"`
	// ID is the host's snapshot id once observed; CreatedAt when.
	ID        int        `json:"id,omitempty"`
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	// Copied is true once the files the snapshot froze were copied;
	// CopiedFiles and CopiedBytes are that round's extent files and bytes
	// read from the host.
	Copied      bool  `json:"copied,omitempty"`
	CopiedFiles int   `json:"copiedFiles,omitempty"`
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
	// Removed is true once the snapshot is gone from the source.
	Removed   bool       `json:"removed,omitempty"`
	RemovedAt *time.Time `json:"removedAt,omitempty"`
}

// Snapshot returns round k's record, or nil.
func (w *WarmEvidence) Snapshot(round int) *WarmSnapshot {
	for i := range w.Snapshots {
		if w.Snapshots[i].Round == round {
			return &w.Snapshots[i]
		}
	}
	return nil
}

// StopLimit is StopBytes, 0 when not recorded.
func (w *WarmEvidence) StopLimit() int64 {
	if w.StopBytes == nil {
		return 0
	}
	return *w.StopBytes
}

// Freeze records a precopied descriptor's CID (the first one seen).
func (w *WarmEvidence) Freeze(disk int, descriptor, cid string) {
	for _, f := range w.Frozen {
		if f.Disk == disk && f.Descriptor == descriptor {
			return
		}
	}
	w.Frozen = append(w.Frozen, WarmFrozenLink{Disk: disk, Descriptor: descriptor, CID: cid})
}

// WarmFrozenLink records the CID of each descriptor whose link the precopy
// copied, so that the cutover notices a link changed since (someone
// consolidated or reverted snapshots) and copies it again.
type WarmFrozenLink struct {
	Disk       int    `json:"disk"`
	Descriptor string `json:"descriptor"`
	CID        string `json:"cid"`
}
