package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// removeClusterWork deletes what cluster execution made for the migration
// namespace/name besides its DataVolumes: its Jobs (with their pods), the
// host and conversion slots they held, its disks' journal claims, and its
// Secret with the ESXi credential. It says
// what it did; objects already gone are fine. host is the migration's
// configured host ("" when unknown: the slots of its Jobs are then
// reclaimed by the next copy that needs one).
func (e *Engine) removeClusterWork(ctx context.Context, namespace, name, host string) ([]string, error) {
	kc := e.deps.Kube
	var actions []string
	jobs, err := kc.ListJobs(ctx, namespace, map[string]string{kube.LabelMigration: name})
	if err != nil {
		return actions, err
	}
	slots := coord.HostSlots{Kube: kc, Namespace: e.claimNamespace(), Limit: 1, Now: e.now}
	for j := range jobs {
		job := &jobs[j]
		if job.DeletionTimestamp == nil {
			if err := kc.DeleteJob(ctx, job); err != nil {
				return actions, err
			}
			actions = append(actions, "deleted the Job "+namespace+"/"+job.Name)
		}
		holder := coord.SlotHolder{Namespace: namespace, Job: job.Name}
		if host != "" {
			if _, err := slots.Release(ctx, e.hostIdentity(host), holder); err != nil {
				return actions, err
			}
		}
		if _, err := slots.Release(ctx, coord.ConversionSlotsID, holder); err != nil {
			return actions, err
		}
	}
	claims, err := kc.ListPersistentVolumeClaims(ctx, namespace, map[string]string{kube.LabelMigration: name, clusterjob.LabelComponent: clusterjob.ComponentJournal})
	if err != nil {
		return actions, err
	}
	for k := range claims {
		c := &claims[k]
		if c.DeletionTimestamp != nil {
			continue
		}
		if err := kc.DeletePersistentVolumeClaim(ctx, c); err != nil {
			return actions, err
		}
		actions = append(actions, "deleted the journal claim "+namespace+"/"+c.Name)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: workerSecretName(name)}}
	existing, err := kc.GetSecret(ctx, namespace, s.Name)
	switch {
	case kube.IsNotFound(err):
		return actions, nil
	case err != nil:
		return actions, err
	case !kube.OfMigration(existing.Labels, name):
		// Not the migration's: left as it is.
		return actions, nil
	}
	if err := kc.DeleteSecret(ctx, existing); err != nil {
		return actions, err
	}
	return append(actions, fmt.Sprintf("deleted the Secret %s/%s with the ESXi credential of its Jobs", namespace, s.Name)), nil
}

// stepCompleteCluster: nothing of cluster execution outlives the
// migration but its DataVolumes and VM (the record keeps the evidence).
func (r *run) stepCompleteCluster(ctx context.Context) error {
	if err := r.removeClusterWork(ctx); err != nil {
		return err
	}
	return r.stepComplete(ctx)
}

// stepCompleteWarmCluster is Completed of a warm migration in cluster
// execution: the Jobs and Secret go, then the migration's snapshots.
func (r *run) stepCompleteWarmCluster(ctx context.Context) error {
	if err := r.removeClusterWork(ctx); err != nil {
		return err
	}
	return r.stepCompleteWarm(ctx)
}

func (r *run) removeClusterWork(ctx context.Context) error {
	if _, err := r.e.removeClusterWork(ctx, r.spec.Namespace, r.spec.Name, r.spec.Host); err != nil {
		return transient("CleanupFailed", "cannot remove the migration's Jobs and Secret", err)
	}
	return nil
}
