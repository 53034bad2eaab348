package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube/cdi"
)

// Every DataVolumePhase constant of the CDI API module the provider is
// built with has its meaning in dataVolumePhases: read from the module's
// own types.go, so that a CDI upgrade with a new phase fails here.
func TestDataVolumePhasesAreAllKnown(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "kubevirt.io/containerized-data-importer-api").Output()
	if err != nil {
		t.Fatalf("locating the CDI API module: %v", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "pkg", "apis", "core", "v1beta1", "types.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "DataVolumePhase" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					continue
				}
				n++
				phase := cdiv1beta1.DataVolumePhase(strings.Trim(lit.Value, `"`))
				if _, ok := dataVolumePhases[phase]; !ok {
					t.Errorf("DataVolume phase %q of %s has no meaning in dataVolumePhases", phase, file)
				}
			}
		}
	}
	if n != len(dataVolumePhases) || n < 20 {
		t.Errorf("%s declares %d phases, dataVolumePhases has %d", file, n, len(dataVolumePhases))
	}
}

// The rendered DataVolume asks CDI for immediate binding, and an http one
// names the staging CA's ConfigMap when a CA is configured.
func TestRenderDataVolumeBindingAndCA(t *testing.T) {
	spec := Spec{Name: "vm", Namespace: "ns", StorageClass: "sc",
		Transport: Transport{Kind: TransportHTTP, StagingDir: "/s", StagingURL: "https://s", StagingCAPEM: "PEM"}}.WithDefaults()
	r := &run{e: &Engine{}, spec: spec, s: &coord.Stored{}}
	dv := r.renderDataVolume(record.DiskEvidence{DataVolume: "vm-disk-0", SizeBytes: 1 << 20, ArtifactURL: "https://s/x"})
	if _, ok := dv.Annotations[cdi.AnnImmediateBinding]; !ok {
		t.Errorf("annotations %v lack %s", dv.Annotations, cdi.AnnImmediateBinding)
	}
	if dv.Spec.Source.HTTP.CertConfigMap != "vmmigration-vm-staging-ca" {
		t.Errorf("certConfigMap %q", dv.Spec.Source.HTTP.CertConfigMap)
	}
	r.spec.Transport.StagingCAPEM = ""
	if dv := r.renderDataVolume(record.DiskEvidence{DataVolume: "vm-disk-0", SizeBytes: 1 << 20}); dv.Spec.Source.HTTP.CertConfigMap != "" {
		t.Errorf("certConfigMap %q without a CA", dv.Spec.Source.HTTP.CertConfigMap)
	}
}

// The stall clock restarts whenever anything of the DataVolume moves.
func TestDataVolumeStallClock(t *testing.T) {
	var s dvStall
	t0 := time.Unix(1000, 0)
	dv := &cdiv1beta1.DataVolume{}
	dv.Status.Phase = cdiv1beta1.ImportInProgress
	if d := s.observe(dv, t0); d != 0 {
		t.Fatal(d)
	}
	if d := s.observe(dv, t0.Add(time.Minute)); d != time.Minute {
		t.Fatal(d)
	}
	dv.Status.RestartCount = 1
	if d := s.observe(dv, t0.Add(2*time.Minute)); d != 0 {
		t.Errorf("a restart did not reset the clock: %v", d)
	}
	dv.Status.Progress = "10.00%"
	if d := s.observe(dv, t0.Add(3*time.Minute)); d != 0 {
		t.Errorf("progress did not reset the clock: %v", d)
	}
}
