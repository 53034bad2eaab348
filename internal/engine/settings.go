package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/retry"
)

// AnnotationSettings on the record's ConfigMap holds the caller's settings
// that neither the record nor the cluster show (the provider keeps its
// transport, validation and retry configuration there, so that an import
// reproduces them). The engine stores it and never interprets it. It must
// hold no secrets.
const AnnotationSettings = "vmmigration.io/terraform-settings"

// maxSettingsBytes bounds the settings annotation (Kubernetes allows 256
// KiB for all annotations of an object together).
const maxSettingsBytes = 16 << 10

// SaveSettings stores settings on the record of migration namespace/name,
// through the same optimistic-concurrency store as the record: a conflict
// with a concurrent writer re-reads and writes again, so neither the
// record nor its settings are lost. Unchanged settings are not written.
func (e *Engine) SaveSettings(ctx context.Context, namespace, name, settings string) error {
	if len(settings) > maxSettingsBytes {
		return fmt.Errorf("settings of migration %s/%s are %d bytes, more than %d", namespace, name, len(settings), maxSettingsBytes)
	}
	p := retry.Policy{Attempts: 5, Initial: 100 * time.Millisecond, Max: time.Second}
	return retry.Do(ctx, p, func(err error) bool {
		return kube.IsConflict(err) || kube.Classify(err) == kube.Transient
	}, func(ctx context.Context) error {
		s, err := e.store().Load(ctx, namespace, name)
		if err != nil {
			return err
		}
		if s.ConfigMap.Annotations[AnnotationSettings] == settings {
			return nil
		}
		cm := s.ConfigMap.DeepCopy()
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[AnnotationSettings] = settings
		// An Update carries the resourceVersion read above: a record
		// written in between makes it fail with a conflict, and the retry
		// starts again from the newer record.
		return e.deps.Kube.UpdateConfigMap(ctx, cm)
	})
}

// UpdateVM changes what can change in place on a migrated VM: its run
// strategy and the labels the configuration manages (removed when they
// leave it, others left alone).
func (e *Engine) UpdateVM(ctx context.Context, namespace, name, runStrategy string, oldLabels, newLabels map[string]string) error {
	return e.deps.Kube.UpdateVirtualMachineRunStrategyAndLabels(ctx, namespace, name, runStrategy, oldLabels, newLabels)
}
