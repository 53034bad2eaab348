// The record is its own package (record/): these names keep the
// engine's API, which the provider and tests use, as it was.
package engine

import "github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"

type (
	Phase              = record.Phase
	Record             = record.Record
	Identity           = record.Identity
	Condition          = record.Condition
	Timestamps         = record.Timestamps
	PowerOff           = record.PowerOff
	SourceInventory    = record.SourceInventory
	SourceDisk         = record.SourceDisk
	SourceNIC          = record.SourceNIC
	DiskEvidence       = record.DiskEvidence
	VMEvidence         = record.VMEvidence
	CheckResult        = record.CheckResult
	ErrorEntry         = record.ErrorEntry
	ChainFileEvidence  = record.ChainFileEvidence
	ConversionEvidence = record.ConversionEvidence
	GuestOS            = record.GuestOS
	WarmEvidence       = record.WarmEvidence
	WarmStop           = record.WarmStop
	WarmRename         = record.WarmRename
	WarmSnapshot       = record.WarmSnapshot
	WarmFrozenLink     = record.WarmFrozenLink
)

const (
	PhasePending                    = record.PhasePending
	PhaseDiscovering                = record.PhaseDiscovering
	PhaseValidated                  = record.PhaseValidated
	PhasePreparing                  = record.PhasePreparing
	PhaseConverting                 = record.PhaseConverting
	PhaseImporting                  = record.PhaseImporting
	PhaseCreatingVM                 = record.PhaseCreatingVM
	PhaseStarting                   = record.PhaseStarting
	PhaseValidating                 = record.PhaseValidating
	PhaseCompleted                  = record.PhaseCompleted
	PhaseRetryable                  = record.PhaseRetryable
	PhaseManualInterventionRequired = record.PhaseManualInterventionRequired
	PhaseFailed                     = record.PhaseFailed
	CondSourceDiscovered            = record.CondSourceDiscovered
	CondValidated                   = record.CondValidated
	CondSourcePoweredOff            = record.CondSourcePoweredOff
	CondDiskAcquired                = record.CondDiskAcquired
	CondDiskConverted               = record.CondDiskConverted
	CondDiskImported                = record.CondDiskImported
	CondVMCreated                   = record.CondVMCreated
	CondVMStarted                   = record.CondVMStarted
	CondGuestReady                  = record.CondGuestReady
	CondReady                       = record.CondReady
	PowerActionAlreadyOff           = record.PowerActionAlreadyOff
	PowerActionGraceful             = record.PowerActionGraceful
	PowerActionHard                 = record.PowerActionHard
	PowerActionUser                 = record.PowerActionUser
	MaxErrorEntries                 = record.MaxErrorEntries
	MaxErrorMessageBytes            = record.MaxErrorMessageBytes
	MaxStopMessageBytes             = record.MaxStopMessageBytes
	ChainFileDescriptor             = record.ChainFileDescriptor
	ChainFileExtent                 = record.ChainFileExtent
	RecordVersion                   = record.RecordVersion
	ClassReentered                  = record.ClassReentered
)

var (
	ClassTransient   = record.ClassTransient
	ClassNeedsHuman  = record.ClassNeedsHuman
	ClassPermanent   = record.ClassPermanent
	ClassInterrupted = record.ClassInterrupted
	StopPhases       = record.StopPhases
	ConditionTypes   = record.ConditionTypes
	PowerActions     = record.PowerActions
	TimestampNames   = record.TimestampNames
)
