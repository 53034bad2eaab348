package engine_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Where the cluster does not log the serial console, the virt-launcher pod
// has only its compute container (KubeVirt v1.7.0,
// pkg/virt-controller/services/serialconsolelog.go, with
// disableSerialConsoleLog set): a migration whose checks pass still says
// in its validation evidence that boot failures could not have been seen.
func TestValidationSaysConsoleNotLogged(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("nolog1", esxisim.PoweredOff))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "virt-launcher-nolog1-abcde",
			Labels: map[string]string{"kubevirt.io": "virt-launcher", kube.LabelLauncherVMName: "nolog1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher:v1.7.0"}}},
	}
	if err := e.admin.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	rec := e.mustComplete(e.engine(), e.spec("nolog1", "nolog1"))
	var note *record.CheckResult
	for i, c := range rec.Validation {
		if c.ID == engine.CheckConsoleLog {
			note = &rec.Validation[i]
		}
	}
	if note == nil || note.Passed || note.Severity != "warning" ||
		!strings.Contains(note.Message, "no guest-console-log container") || !strings.Contains(note.Message, "disableSerialConsoleLog") {
		t.Fatalf("validation evidence %+v: want a console_log warning", rec.Validation)
	}
	warned := false
	for _, ev := range e.eventsOf(engine.EventInfo) {
		warned = warned || strings.Contains(ev.Message, "does not log the guest's serial console")
	}
	if !warned {
		t.Error("no event says the console is not logged")
	}
	if c, ok := rec.Condition(record.CondGuestReady); !ok || !c.Status {
		t.Errorf("GuestReady = %+v, want True: the checks passed", c)
	}
}
