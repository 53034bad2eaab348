package provider

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
)

func planModel(host, vmName string, vmid int64, ns, name string) *migrationModel {
	id := types.Int64Null()
	if vmid > 0 {
		id = types.Int64Value(vmid)
	}
	vn := types.StringNull()
	if vmName != "" {
		vn = types.StringValue(vmName)
	}
	return &migrationModel{
		Source: &sourceModel{Host: types.StringValue(host), VMName: vn, VMID: id},
		Destination: &destModel{Namespace: types.StringValue(ns), Name: types.StringValue(name),
			StorageClass: types.StringValue("fast"), AccessMode: types.StringValue("ReadWriteOnce"), VolumeMode: types.StringValue("Filesystem"),
			DiskBus: types.StringValue("virtio"), RunStrategy: types.StringValue("Always")},
		TargetFormat: types.StringValue("raw"), SourceVMID: types.Int64Value(7),
	}
}

// Which changes replace a migration, and naming the same VM by vmid
// instead of vm_name does not.
func TestIdentityChanges(t *testing.T) {
	state := planModel("esxi-a", "web", 0, "apps", "web")
	for _, tc := range []struct {
		name string
		edit func(m *migrationModel)
		want []string
	}{
		{"nothing", func(*migrationModel) {}, nil},
		{"same VM by vmid", func(m *migrationModel) { m.Source.VMName, m.Source.VMID = types.StringNull(), types.Int64Value(7) }, nil},
		{"other vmid", func(m *migrationModel) { m.Source.VMName, m.Source.VMID = types.StringNull(), types.Int64Value(8) }, []string{"source"}},
		{"other host", func(m *migrationModel) { m.Source.Host = types.StringValue("esxi-b") }, []string{"source"}},
		{"storage class", func(m *migrationModel) { m.Destination.StorageClass = types.StringValue("slow") }, []string{"destination.storage_class"}},
		{"name and format", func(m *migrationModel) {
			m.Destination.Name, m.TargetFormat = types.StringValue("web2"), types.StringValue("qcow2")
		}, []string{"destination.name", "target_format"}},
		{"unknown bus is not a change yet", func(m *migrationModel) { m.Destination.DiskBus = types.StringUnknown() }, nil},
		{"run strategy changes in place", func(m *migrationModel) { m.Destination.RunStrategy = types.StringValue("Halted") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planModel("esxi-a", "web", 0, "apps", "web")
			tc.edit(plan)
			if got := identityChanges(state, plan); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("identityChanges = %v, want %v", got, tc.want)
			}
		})
	}
}

// A replacement under delete_policy keep never leaves two copies of a VM
// or adopts the old one.
func TestReplacementVerdict(t *testing.T) {
	running := engine.VMObservation{Exists: true, Ours: true, RunStrategy: "Always", VMIPhase: "Running"}
	halted := engine.VMObservation{Exists: true, Ours: true, RunStrategy: "Halted"}
	for _, tc := range []struct {
		name     string
		sameDest bool
		vm       engine.VMObservation
		refuse   bool
		summary  string
	}{
		{"no old VM", false, engine.VMObservation{}, false, ""},
		{"old VM not ours", false, engine.VMObservation{Exists: true}, false, ""},
		{"same destination", true, halted, true, "Replacement would adopt the old VM"},
		{"other destination, old one runs", false, running, true, "Replacement would run two copies of the VM"},
		{"other destination, old one halted", false, halted, false, "Old VM kept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := replacementVerdict("apps", "web", "apps", "web2", []string{"destination.name"}, tc.sameDest, tc.vm)
			if v.refuse != tc.refuse || v.summary != tc.summary {
				t.Fatalf("verdict = %+v, want refuse=%v summary %q", v, tc.refuse, tc.summary)
			}
			if tc.refuse && !strings.Contains(v.detail, `delete_policy = "delete_destination"`) {
				t.Errorf("a refusal must say how to proceed: %s", v.detail)
			}
		})
	}
}

// What is saved with the record reproduces the configuration on import.
func TestSettingsRoundTrip(t *testing.T) {
	m := planModel("esxi-a", "web", 0, "apps", "web")
	m.PowerOffPolicy, m.ShutdownTO, m.DeletePolicy = types.StringValue("hard"), types.StringValue("90s"), types.StringValue("rollback")
	m.StartTO = types.StringValue("45m")
	m.Transport = &transportModel{UploadProxyURL: types.StringValue("https://proxy"), UploadProxyCA: types.StringValue("PEM"),
		Insecure: types.BoolValue(false), StagingDir: types.StringNull(), StagingURL: types.StringNull(), StagingCA: types.StringNull()}
	m.Validation = &validateModel{GuestAgent: types.BoolValue(true), IPReported: types.BoolNull(),
		TCP: []types.String{types.StringValue("10.0.0.5:22")}, HTTP: nil, Timeout: types.StringValue("3m")}
	m.Retry = &retryModel{Attempts: types.Int64Value(3), InitialBackoff: types.StringNull(), MaxBackoff: types.StringValue("1m"),
		ImporterRestarts: types.Int64Value(5)}
	b, err := json.Marshal(settingsOf(m))
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseSettings(string(b))
	if err != nil || s == nil {
		t.Fatalf("parseSettings = %v, %v", s, err)
	}
	var got migrationModel
	s.apply(&got)
	if !got.PowerOffPolicy.Equal(m.PowerOffPolicy) || !got.ShutdownTO.Equal(m.ShutdownTO) || !got.DeletePolicy.Equal(m.DeletePolicy) ||
		!got.StartTO.Equal(m.StartTO) {
		t.Errorf("policies = %v %v %v %v", got.PowerOffPolicy, got.ShutdownTO, got.DeletePolicy, got.StartTO)
	}
	if !reflect.DeepEqual(got.Transport, m.Transport) || !reflect.DeepEqual(got.Validation, m.Validation) || !reflect.DeepEqual(got.Retry, m.Retry) {
		t.Errorf("round trip lost settings:\n got %+v %+v %+v\nwant %+v %+v %+v", got.Transport, got.Validation, got.Retry, m.Transport, m.Validation, m.Retry)
	}
	if sp, diags := m.spec("/w"); diags.HasError() || sp.StartTimeout != 45*time.Minute {
		t.Errorf("start_timeout 45m reaches the engine as %s (%v)", sp.StartTimeout, diags)
	}
	if sp, _ := planModel("esxi-a", "web", 0, "apps", "web").spec("/w"); sp.WithDefaults().StartTimeout != engine.DefaultStartTimeout {
		t.Errorf("no start_timeout: %s, want the default %s", sp.WithDefaults().StartTimeout, engine.DefaultStartTimeout)
	}
	if none, err := parseSettings(""); none != nil || err != nil {
		t.Errorf("no settings = %v, %v", none, err)
	}
	if _, err := parseSettings("{"); err == nil || !strings.Contains(err.Error(), engine.AnnotationSettings) {
		t.Errorf("bad settings error = %v", err)
	}
}

// Engine fields become the attribute paths of the resource's schema.
func TestAttributePath(t *testing.T) {
	for field, want := range map[string]path.Path{
		engine.FieldSourceVMID:     path.Root("source").AtName("vmid"),
		engine.FieldPowerOffPolicy: path.Root("power_off_policy"),
		engine.FieldUploadProxyURL: path.Root("transport").AtName("upload_proxy_url"),
		"":                         path.Empty(),
	} {
		if got := attributePath(field); !got.Equal(want) {
			t.Errorf("attributePath(%q) = %s, want %s", field, got, want)
		}
	}
	sch := migrationSchema(t.Context())
	for _, f := range []string{engine.FieldSource, engine.FieldSourceHost, engine.FieldSourceVMName, engine.FieldSourceVMID,
		engine.FieldNamespace, engine.FieldName, engine.FieldStorageClass, engine.FieldAccessMode, engine.FieldVolumeMode,
		engine.FieldDiskBus, engine.FieldRunStrategy, engine.FieldNetworkMap, engine.FieldPowerOffPolicy, engine.FieldShutdownTimeout, engine.FieldStartTimeout,
		engine.FieldTargetFormat, engine.FieldTransport, engine.FieldUploadProxyURL, engine.FieldUploadProxyName, engine.FieldHTTPStagingDir, engine.FieldHTTPStagingURL,
		engine.FieldValidationTCP, engine.FieldValidationHTTP, engine.FieldDeletePolicy, engine.FieldValidationTimeout,
		engine.FieldRetryInitial, engine.FieldRetryMax, engine.FieldConversion, engine.FieldNICModel, engine.FieldTimezone} {
		if _, diags := sch.AttributeAtPath(t.Context(), attributePath(f)); diags.HasError() {
			t.Errorf("engine field %q is not an attribute of vmmigration_migration: %v", f, diags)
		}
	}
}
