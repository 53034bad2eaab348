package engine

import (
	"context"
	"fmt"
	"path"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Datastore space for a warm migration's snapshot deltas. From the first
// snapshot on, every write of the running guest lands in a delta instead
// of the base disk, and each precopy round adds a delta; they all stay
// until the migration has Completed and removes its snapshots. ESXi writes
// the deltas of every disk in the VM's working directory (VMware KB
// 1027887): the .vmx's workingDir when it names one, else the VM's folder,
// whatever datastore holds the base disks; when that datastore fills up,
// ESXi suspends the VM. The estimate of what the deltas take is
// WarmDeltaGrowthPercent of the disks' allocated bytes (their capacity when
// the host does not tell the allocation: a disk that runs on no snapshot) for each precopy round still
// to be taken (the deltas of rounds already taken are on the datastore
// already, and its free space tells them); the check
// blocks when the datastore has less free space than that, as
// `vim-cmd hostsvc/datastore/listsummary` reports it.

// CheckWarmDatastoreSpace fails when the datastore that receives the
// snapshot deltas has less free space than the estimate.
const CheckWarmDatastoreSpace = "warm_datastore_space"

// WarmDeltaGrowthPercent is the part of the disks' allocated bytes each
// precopy round's delta is expected to take.
const WarmDeltaGrowthPercent = 10

// WarmDeltaEstimate returns the datastore bytes the deltas of a warm
// migration of vm with rounds precopy rounds are estimated to take, and
// the allocated bytes of the disks it is computed from.
func WarmDeltaEstimate(vm *esxi.VM, rounds int) (need, allocated int64) {
	for _, d := range vm.Disks {
		if d.Independent || d.RDMPassthrough {
			continue // no delta: warm_disks blocks these
		}
		b := d.CapacityBytes
		if d.Chain != nil && len(d.Chain.Links) > 0 {
			// What the chain's extents occupy, when the host told it for
			// every link, up to what the guest sees.
			var sum int64
			known := true
			for _, l := range d.Chain.Links {
				if l.AllocatedBytes < 0 {
					known = false
					break
				}
				sum = addSat(sum, l.AllocatedBytes)
			}
			if known {
				b = min(sum, max(b, 0))
			}
		}
		if b > 0 {
			allocated = addSat(allocated, b)
		}
	}
	per := allocated / 100 * WarmDeltaGrowthPercent
	for range rounds {
		need = addSat(need, per)
	}
	return need, allocated
}

func addSat(a, b int64) int64 {
	if a > (1<<63-1)-b {
		return 1<<63 - 1
	}
	return a + b
}

// warmSpaceCheck judges the free space of the datastore holding the VM's
// folder (none for a cold migration). A host that cannot tell its
// datastores' free space makes it a warning: the space is then not
// checked.
func (e *Engine) warmSpaceCheck(ctx context.Context, s Spec, vm *esxi.VM, w *record.WarmEvidence) []preflight.Check {
	if !s.warm() {
		return nil
	}
	left, taken := s.warmRoundsLeft(vm, w)
	need, allocated := WarmDeltaEstimate(vm, left)
	estimate := fmt.Sprintf("%d%% of the disks' %s allocated for each of the %d precopy snapshot(s), whose deltas stay until the migration completes",
		WarmDeltaGrowthPercent, warmBytes(allocated), left)
	if taken > 0 {
		estimate = fmt.Sprintf("%d%% of the disks' %s allocated for each of the %d precopy snapshot(s) still to take, whose deltas stay until the migration completes; the %d taken already are counted in the free space",
			WarmDeltaGrowthPercent, warmBytes(allocated), left, taken)
	}
	folder := WarmDeltaFolder(vm)
	warn := func(why string) []preflight.Check {
		return []preflight.Check{{ID: CheckWarmDatastoreSpace, Severity: preflight.Warning, Passed: false,
			Message: fmt.Sprintf("The free space for VM %q's snapshot deltas was not checked: %s. They are estimated at %s (%s); if the datastore fills up, ESXi suspends the VM.",
				vm.Name, why, warmBytes(need), estimate)}}
	}
	c, err := e.deps.ESXi.Client(s.Host)
	if err != nil {
		return warn(err.Error())
	}
	list, err := c.Datastores(ctx)
	if err != nil {
		return warn(fmt.Sprintf("vim-cmd hostsvc/datastore/listsummary failed (%v)", err))
	}
	ds := esxi.DatastoreOf(folder+"/", list)
	if ds == nil {
		return warn(fmt.Sprintf("the host lists no datastore holding %s", folder))
	}
	where := fmt.Sprintf("Datastore %q, where ESXi writes VM %q's snapshot deltas", ds.Name, vm.Name)
	if vm.WorkingDir != "" {
		where = fmt.Sprintf("Datastore %q, where ESXi writes VM %q's snapshot deltas (its workingDir %s)", ds.Name, vm.Name, vm.WorkingDir)
	}
	check := preflight.Check{ID: CheckWarmDatastoreSpace, Severity: preflight.Blocker, Passed: true,
		Message: fmt.Sprintf("%s, has %s free; the deltas are estimated at %s (%s).",
			where, warmBytes(ds.FreeSpace), warmBytes(need), estimate)}
	if !ds.Accessible || ds.FreeSpace < need {
		check.Passed = false
		check.Message = fmt.Sprintf("%s, has %s free, less than the estimated %s (%s); if it fills up, ESXi suspends the VM. "+
			"Free space on the datastore, lower precopy_rounds, or use mode %q.",
			where, warmBytes(ds.FreeSpace), warmBytes(need), estimate, ModeCold)
		if !ds.Accessible {
			check.Message = fmt.Sprintf("Datastore %q, which holds VM %q's snapshot deltas (%s), is not accessible. Use mode %q once it is, or mode %q.", ds.Name, vm.Name, folder, ModeWarm, ModeCold)
		}
	}
	return []preflight.Check{check}
}

// WarmDeltaFolder is the folder where ESXi writes vm's snapshot deltas:
// its workingDir, else the folder of its .vmx.
func WarmDeltaFolder(vm *esxi.VM) string {
	if vm.WorkingDir != "" {
		return vm.WorkingDir
	}
	return path.Dir(vm.VMXPath)
}

// warmRoundsLeft returns how many precopy rounds are still to be taken,
// and how many were: the record's snapshots that were taken (an id seen or
// their files copied) and not removed, else, without a record, the
// migration's snapshots in the VM's tree. A precopy that stopped early
// takes no more.
func (s Spec) warmRoundsLeft(vm *esxi.VM, w *record.WarmEvidence) (left, taken int) {
	rounds := s.PrecopyRounds
	if w != nil {
		rounds = w.Rounds
		for _, sn := range w.Snapshots {
			if (sn.ID != 0 || sn.Copied) && !sn.Removed {
				taken++
			}
		}
		if w.Stopped != nil {
			rounds = w.Stopped.Round
		}
	} else {
		own := map[string]bool{}
		for k := 1; k <= rounds; k++ {
			own[s.warmSnapshotName(k)] = true
		}
		taken = len(esxi.FindSnapshots(vm.Snapshots, func(sn esxi.Snapshot) bool { return own[sn.Name] }))
	}
	return max(rounds-taken, 0), taken
}

// warmBytes formats a size in binary units, with the exact count when not
// whole.
func warmBytes(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, units[u], n)
}
