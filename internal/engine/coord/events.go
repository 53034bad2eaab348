package coord

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// maxEventMessage is the longest Event message written; longer ones are
// cut.
const maxEventMessage = 1024

// Event records a Kubernetes Event on the record's ConfigMap, a warning
// when warning is set. Events are best effort: failing to write one never
// stops a migration, and a record not written yet (s nil, or its
// ConfigMap without a UID) gets none.
func (st Store) Event(ctx context.Context, s *Stored, warning bool, reason, message string) {
	if s == nil || s.ConfigMap.UID == "" {
		return
	}
	cm := s.ConfigMap
	now := metav1.NewTime(st.Now())
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	if len(message) > maxEventMessage {
		message = message[:maxEventMessage-3] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    cm.Namespace,
			GenerateName: cm.Name + ".",
			Labels:       kube.MigrationLabels(s.Record.Identity.Name),
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "ConfigMap", APIVersion: "v1", Namespace: cm.Namespace, Name: cm.Name,
			UID: cm.UID, ResourceVersion: cm.ResourceVersion,
		},
		Reason: reason, Message: message, Type: typ,
		Source:         corev1.EventSource{Component: kube.ManagedByValue},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = st.Kube.CreateEvent(ctx, ev)
}
