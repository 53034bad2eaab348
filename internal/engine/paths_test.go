package engine_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// editRecord changes a migration's stored record as someone with write
// access to ConfigMaps could.
func (e *env) editRecord(name string, edit func(*record.Record)) {
	e.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := e.admin.Get(e.t.Context(), client.ObjectKey{Namespace: e.ns, Name: coord.RecordName(name)}, cm); err != nil {
		e.t.Fatal(err)
	}
	var rec record.Record
	if err := json.Unmarshal([]byte(cm.Data[coord.RecordKey]), &rec); err != nil {
		e.t.Fatal(err)
	}
	edit(&rec)
	b, err := json.Marshal(rec)
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data[coord.RecordKey] = string(b)
	if err := e.admin.Update(e.t.Context(), cm); err != nil {
		e.t.Fatal(err)
	}
}

// A record whose local paths were pointed at other files makes the
// provider neither read nor delete them: Run refuses the record, Forget
// removes only <work_dir>/<namespace>/<name>.
func TestRecordPathsAreNotTrusted(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("p1", esxisim.PoweredOff))
	spec := e.spec("p1", "p1")
	spec.TargetFormat = "qcow2"
	en := e.engine()
	e.mustComplete(en, spec)

	outside := t.TempDir()
	canaries := []string{filepath.Join(outside, "staged.canary"), filepath.Join(outside, "artifact.canary")}
	for _, c := range canaries {
		if err := os.WriteFile(c, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.editRecord("p1", func(r *record.Record) {
		r.Disks[0].StagedPath, r.Disks[0].ArtifactPath = canaries[0], canaries[1]
		// Send it back to Importing, which would upload the artifact.
		r.Phase = record.PhaseImporting
		r.Disks[0].Imported = false
	})
	_, err := en.Run(e.ctx(30e9), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "RecordPathMismatch" ||
		!strings.Contains(se.Message, "disks[0].stagedPath is \""+canaries[0]+"\"") ||
		!strings.Contains(se.Message, "disks[0].artifactPath is \""+canaries[1]+"\"") ||
		!strings.Contains(se.Message, filepath.Join(spec.WorkDir, e.ns, "p1", "disk-0.raw")) ||
		!strings.Contains(se.Action, "work_dir") {
		t.Errorf("Run on an edited record: %v", err)
	}
	// A file in the migration's own folder is removed by Forget.
	own := filepath.Join(spec.WorkDir, e.ns, "p1", "leftover")
	if err := os.MkdirAll(filepath.Dir(own), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := en.Forget(t.Context(), e.ns, "p1", engine.ForgetKeep, engine.ForgetOptions{WorkDir: spec.WorkDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range canaries {
		if b, err := os.ReadFile(c); err != nil || string(b) != "keep me" {
			t.Errorf("canary %s: %q, %v (actions %v)", c, b, err, res.Actions)
		}
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("the migration's own folder was kept: %v (actions %v)", err, res.Actions)
	}
}
