package engine

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convertjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Where a migration's disk work runs (Spec.Execution).
//
// Local execution copies every disk into work_dir on the machine running
// the provider, converts it there and uploads it to CDI. Cluster execution
// runs the same checkpoints, but the disk bytes never pass through the
// runner: each disk's DataVolume is created blank first (its claim), a
// copy Job per disk writes the disk straight into the claim
// (prepare_cluster.go), and the runner only decides, observes the Jobs
// through the API server and records their checked results.
const (
	ExecutionLocal   = record.ExecutionLocal
	ExecutionCluster = record.ExecutionCluster
	// DefaultExecution is what a migration uses when neither it nor the
	// provider says.
	DefaultExecution = ExecutionLocal
)

// Executions lists the values of Spec.Execution, for validators and
// documentation.
var Executions = record.Executions

// CheckExecution is the pre-flight check that the migration can run
// where Spec.Execution says.
const CheckExecution = "execution"

// inCluster reports whether the spec asks for cluster execution.
func (s Spec) inCluster() bool { return s.Execution == ExecutionCluster }

// block says the disks' claims are in Block volume mode.
func (s Spec) block() bool { return s.VolumeMode == string(corev1.PersistentVolumeBlock) }

// inCluster reports whether this run's migration executes in the cluster:
// as its record says once it is Validated, else as the spec asks.
func (r *run) inCluster() bool {
	if rec := r.rec(); rec.Execution != "" {
		return rec.Execution == ExecutionCluster
	}
	return r.spec.inCluster()
}

// recordExecution fixes the migration's execution in its record (saved
// with the Validated checkpoint's advance). A record that holds one keeps
// it: a migration never switches where its disks are copied mid-flight.
func (r *run) recordExecution() {
	if rec := r.rec(); rec.Execution == "" {
		rec.Execution = r.spec.Execution
		rec.JournalClaims = rec.Execution == ExecutionCluster
	}
}

// journalClaims says whether each disk's copy journal and side files are
// kept in a journal claim of its own (clusterjob's journal.go) rather
// than beside disk.img in its claim: for migrations recorded since
// Record.JournalClaims, and for Block-mode claims, which have nothing
// beside the data, always.
func (r *run) journalClaims() bool {
	return r.inCluster() && (r.rec().JournalClaims || r.spec.block())
}

// executionCheck judges whether the migration can run where it is asked
// to, for plans and the Validated checkpoint alike. Cluster execution
// needs the worker image, and does not yet cover everything local
// execution does: what it cannot do is a blocker that says to run the
// migration locally.
func (e *Engine) executionCheck(spec Spec, vm *esxi.VM) preflight.Check {
	c := preflight.Check{ID: CheckExecution, Severity: preflight.Blocker, Passed: true}
	if !spec.inCluster() {
		c.Message = "The disks are copied, converted and uploaded on the machine running Terraform (execution \"local\")."
		return c
	}
	var missing []string
	if e.deps.WorkerImage == "" {
		missing = append(missing, "the provider's worker_image is not set: cluster execution runs its copy and conversion Jobs from that image (see make image; pin it by digest)")
	}
	if spec.Conversion == ConversionVirtV2V && len(vm.Disks) > convertjob.MaxDisks {
		missing = append(missing, fmt.Sprintf("the VM has %d disks and a conversion Job converts at most %d", len(vm.Disks), convertjob.MaxDisks))
	}
	for _, d := range vm.Disks {
		if d.Chain == nil {
			continue
		}
		if p := clusterChainProblem(d.Chain); p != "" {
			missing = append(missing, fmt.Sprintf("disk %s: %s", d.Device, p))
		}
	}
	if len(missing) > 0 {
		c.Passed = false
		c.Message = fmt.Sprintf("VM %q cannot be migrated with execution %q: %s. Set execution = %q for this migration, or fix what is listed.",
			vm.Name, ExecutionCluster, strings.Join(missing, "; "), ExecutionLocal)
		return c
	}
	converts := ""
	if spec.Conversion == ConversionVirtV2V {
		converts = " and a conversion Job converts the guest there with virt-v2v-in-place"
	}
	c.Message = fmt.Sprintf("Kubernetes Jobs from %s copy the disks into their DataVolumes' claims%s; no disk byte passes through the machine running Terraform (execution %q).",
		e.deps.WorkerImage, converts, ExecutionCluster)
	return c
}

// otherWorker stops for a person when a Job's worker is of another version
// than the provider (clusterjob.ErrOtherWorker): its results cannot be
// checked, and the same image would give the same.
func otherWorker(what string, err error) error {
	return needsHuman("WorkerVersionMismatch", what+" completed, but its result was not accepted: "+err.Error(),
		"set the provider's worker_image to the image released with this provider version (make image builds it), then run apply again", err)
}
