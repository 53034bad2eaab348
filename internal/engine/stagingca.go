package engine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// StagingCAKey is the ConfigMap key holding the staging server's CA. CDI's
// importer trusts every certificate in every key of the ConfigMap named by
// a DataVolume's http.certConfigMap, mounted at /certs (CDI v1.65.0
// pkg/importer/http-datasource.go createCertPool).
const StagingCAKey = "ca.pem"

// StagingCAConfigMapName is the ConfigMap holding migration name's staging
// CA.
func StagingCAConfigMapName(name string) string { return coord.RecordName(name) + "-staging-ca" }

// ensureStagingCA makes the migration's staging CA ConfigMap hold the
// configured CA, creating or updating it. A ConfigMap of that name that is not the
// migration's is never touched.
func (r *run) ensureStagingCA(ctx context.Context) error {
	t := r.spec.Transport
	if t.Kind != TransportHTTP || t.StagingCAPEM == "" {
		return nil
	}
	kc := r.e.deps.Kube
	ns, name := r.spec.Namespace, StagingCAConfigMapName(r.spec.Name)
	cm, err := kc.GetConfigMap(ctx, ns, name)
	switch {
	case kube.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: kube.MigrationLabels(r.spec.Name)},
			Data: map[string]string{StagingCAKey: t.StagingCAPEM}}
		if err := kc.CreateConfigMap(ctx, cm); err != nil && !kube.IsAlreadyExists(err) {
			return err
		} else if err != nil {
			return transient("StagingCARace", fmt.Sprintf("ConfigMap %s/%s appeared while it was created", ns, name), kube.Cause(err))
		}
		r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("created ConfigMap %s with the staging server's CA", name)})
		return nil
	case err != nil:
		return err
	}
	if !kube.OfMigration(cm.Labels, r.spec.Name) {
		return onField(FieldHTTPStagingCA, needsHuman("StagingCANotOurs",
			fmt.Sprintf("ConfigMap %s/%s exists and was not created by this migration (label %s=%q)", ns, name, kube.LabelMigration, cm.Labels[kube.LabelMigration]),
			"the provider never overwrites what it does not own: remove or rename that ConfigMap, then run apply again", nil))
	}
	if len(cm.Data) == 1 && cm.Data[StagingCAKey] == t.StagingCAPEM {
		return nil
	}
	// Every key counts for CDI: keep ours only.
	cm.Data = map[string]string{StagingCAKey: t.StagingCAPEM}
	if err := kc.UpdateConfigMap(ctx, cm); err != nil {
		return err
	}
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("updated ConfigMap %s with the staging server's CA", name)})
	return nil
}

// forgetStagingCA deletes migration name's staging CA ConfigMap, if it has
// one, and says so.
func (e *Engine) forgetStagingCA(ctx context.Context, namespace, name string) (string, error) {
	kc := e.deps.Kube
	cmName := StagingCAConfigMapName(name)
	cm, err := kc.GetConfigMap(ctx, namespace, cmName)
	switch {
	case kube.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	case !kube.OfMigration(cm.Labels, name):
		return "left ConfigMap " + namespace + "/" + cmName + " alone: it is not this migration's", nil
	}
	if err := kc.DeleteConfigMap(ctx, cm); err != nil {
		return "", err
	}
	return "deleted the staging CA ConfigMap " + namespace + "/" + cmName, nil
}
