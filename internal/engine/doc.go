// Package engine is the checkpoint engine that migrates one VM from a
// VMware ESXi host to KubeVirt, cold or warm (prepare_warm.go).
//
// A migration is a sequence of reconciliation checkpoints, not a script.
// The phases are data: an itinerary per mode (run.go), each listing the
// same checkpoints in the same order, so that a stored phase means the
// same point on every itinerary: Pending, Discovering, Validated,
// Preparing, Converting, Importing, CreatingVM, Starting, Validating and
// Completed, plus the stop states Retryable, ManualInterventionRequired
// and Failed. Every step observes the real
// systems first, decides, acts, and records what it saw; the phase advances
// only after the step's goal has been observed, and the evidence and the new
// phase are written in one update of the durable record ("record before you
// advance").
//
// Each checkpoint's step, with what it observes, does and records, is in
// the file named for it; Run, the itineraries and the loop that drives
// them are in run.go:
//
//	Pending      run.go (stepPending)
//	Discovering  discover.go
//	Validated    validate.go; the claim of the source in claim.go (which
//	             calls coord/claim.go)
//	Preparing    prepare_power.go: the cold step and the power-off guard;
//	             prepare_copy.go: the copy of every disk and its checksums;
//	             prepare_warm.go: the warm step, its precopy and cutover
//	Converting   convert.go
//	Importing    import.go; DataVolume phases in datavolume.go, the
//	             uploader in upload.go
//	CreatingVM   create_vm.go
//	Starting     start.go
//	Validating   validate_guest.go
//	Completed    complete.go
//
// The other public verbs each have a file: Preview (preview.go), Observe
// and Load (observe.go), Forget (forget.go), Adopt (adopt.go). What several
// checkpoints share is named for what it is: spec.go, errors.go,
// fields.go, paths.go, render.go, source.go, chain.go (snapshot
// chains), pipeline.go (uploads while other disks are copied or
// flattened).
//
// The record itself, with every kind of evidence in it and its JSON, is
// the leaf package record (record/record.go), whose types the engine and
// its callers use by their own names (record.Record, record.PhaseImporting).
//
// The record lives in the destination cluster, in the ConfigMap
// "vmmigration-<name>" of the destination namespace (JSON under the key
// coord.RecordKey), written with optimistic concurrency. A coordination.k8s.io
// Lease of the same name makes sure only one process drives a migration at a
// time. Reading and writing the record, its Kubernetes Events, the lease
// and the source claims below are package coord (coord/), which the engine
// calls. After any interruption, the next Run loads the record and re-observes
// the ESXi host, the staging files and the cluster before it acts: what the
// systems show now wins over what was last written.
//
// The source is only ever read, except for the one irreversible action, the
// power-off, which happens only after the Validated checkpoint, only as the
// power-off policy allows, and is recorded once so that it is never decided
// again; and, in warm mode, the migration's own snapshots, each recorded
// before it is taken and removed by its recorded id.
//
// One source VM has one migration: the Validated checkpoint claims the
// source (a ConfigMap in coord.DefaultClaimNamespace named from the host's
// identity and the .vmx path, see coord/claim.go) before anything acts on it,
// and a second migration of the same VM stops there naming the first.
// Forget releases the claim.
//
// Nothing read from the cluster names a local file: staging paths derive
// from work_dir, the http staging folder and the migration's namespace and
// name (paths.go). After a reply that may have been lost, the engine looks
// before acting again: at the power state before a power command, at the
// object of the deterministic name before a create, at the stored record
// before calling an update conflict someone else's.
//
// A VM migrated by other means has no record; Adopt matches it to its
// source (by MAC addresses, or by name and disk sizes), labels it and its
// DataVolumes as the migration's and records it as Completed, so that it
// can be imported like any other.
//
// The package has no Terraform dependency: the provider's resource turns
// Spec, Record, Observation, Event and StopError into its schema, logs and
// diagnostics.
package engine
