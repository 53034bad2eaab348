// Package coord keeps the runs of migrations from getting in each other's
// way, through objects in the destination cluster:
//
//   - store.go: the record of each migration, a ConfigMap named RecordName
//     in its destination namespace, written with optimistic concurrency;
//   - events.go: Kubernetes Events on that ConfigMap, for kubectl users;
//   - lease.go: the Lease (of the same name) that one run holds while it
//     drives a migration, renewed in the background;
//   - claim.go: the claim on a source VM, which keeps two migrations from
//     moving one VM;
//   - slots.go: the slots of an ESXi host, which bound how many disks are
//     copied from it at once by every runner sharing the cluster.
//
// It knows the record (package record) but not the checkpoints that fill
// it in: the engine calls it.
package coord
