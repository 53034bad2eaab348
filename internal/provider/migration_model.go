package provider

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

type migrationModel struct {
	ID             types.String    `tfsdk:"id"`
	Source         *sourceModel    `tfsdk:"source"`
	Destination    *destModel      `tfsdk:"destination"`
	Mode           types.String    `tfsdk:"mode"`
	PrecopyRounds  types.Int64     `tfsdk:"precopy_rounds"`
	PrecopyStop    types.Int64     `tfsdk:"precopy_stop_bytes"`
	PowerOffPolicy types.String    `tfsdk:"power_off_policy"`
	ShutdownTO     types.String    `tfsdk:"shutdown_timeout"`
	StartTO        types.String    `tfsdk:"start_timeout"`
	TargetFormat   types.String    `tfsdk:"target_format"`
	Conversion     types.String    `tfsdk:"conversion"`
	Execution      types.String    `tfsdk:"execution"`
	Transport      *transportModel `tfsdk:"transport"`
	Validation     *validateModel  `tfsdk:"validation"`
	Retry          *retryModel     `tfsdk:"retry"`
	DeletePolicy   types.String    `tfsdk:"delete_policy"`
	Timeouts       timeouts.Value  `tfsdk:"timeouts"`

	// Computed collections are types.List/Map: they are unknown in a plan.
	Phase      types.String `tfsdk:"phase"`
	SourceVMID types.Int64  `tfsdk:"source_vmid"`
	VMUID      types.String `tfsdk:"vm_uid"`
	PowerOff   types.String `tfsdk:"power_off_action"`
	Downtime   types.String `tfsdk:"downtime"`
	DiskDigest types.String `tfsdk:"disk_digest"`
	GuestOS    types.String `tfsdk:"guest_os"`
	// ConversionEvidence is what virt-v2v saw and did (empty before it ran).
	ConversionEvidence types.Map  `tfsdk:"conversion_evidence"`
	Timestamps         types.Map  `tfsdk:"timestamps"`
	Disks              types.List `tfsdk:"disks"`
	Conditions         types.List `tfsdk:"conditions"`
	Errors             types.List `tfsdk:"errors"`
	Drift              types.List `tfsdk:"drift"`
}

type sourceModel struct {
	Host   types.String `tfsdk:"host"`
	VMName types.String `tfsdk:"vm_name"`
	VMID   types.Int64  `tfsdk:"vmid"`
}

type destModel struct {
	Namespace    types.String            `tfsdk:"namespace"`
	Name         types.String            `tfsdk:"name"`
	StorageClass types.String            `tfsdk:"storage_class"`
	AccessMode   types.String            `tfsdk:"access_mode"`
	VolumeMode   types.String            `tfsdk:"volume_mode"`
	DiskBus      types.String            `tfsdk:"disk_bus"`
	NICModel     types.String            `tfsdk:"nic_model"`
	Timezone     types.String            `tfsdk:"timezone"`
	RunStrategy  types.String            `tfsdk:"run_strategy"`
	NetworkMap   map[string]types.String `tfsdk:"network_map"`
	Labels       map[string]types.String `tfsdk:"labels"`
}

type transportModel struct {
	UploadProxyURL types.String `tfsdk:"upload_proxy_url"`
	UploadProxyCA  types.String `tfsdk:"upload_proxy_ca_certificate"`
	ServerName     types.String `tfsdk:"upload_proxy_server_name"`
	Insecure       types.Bool   `tfsdk:"upload_proxy_insecure"`
	StagingDir     types.String `tfsdk:"http_staging_dir"`
	StagingURL     types.String `tfsdk:"http_staging_url"`
	StagingCA      types.String `tfsdk:"http_staging_ca_certificate"`
}

type validateModel struct {
	GuestAgent types.Bool     `tfsdk:"guest_agent"`
	IPReported types.Bool     `tfsdk:"ip_reported"`
	TCP        []types.String `tfsdk:"tcp"`
	HTTP       []types.String `tfsdk:"http"`
	Timeout    types.String   `tfsdk:"timeout"`
}

type retryModel struct {
	Attempts       types.Int64  `tfsdk:"attempts"`
	InitialBackoff types.String `tfsdk:"initial_backoff"`
	MaxBackoff     types.String `tfsdk:"max_backoff"`
	// ImporterRestarts bounds CDI's restarts of one disk's importer.
	ImporterRestarts types.Int64 `tfsdk:"importer_restarts"`
}

type diskEvidenceModel struct {
	Index           types.Int64  `tfsdk:"index"`
	Device          types.String `tfsdk:"device"`
	SourcePath      types.String `tfsdk:"source_path"`
	SizeBytes       types.Int64  `tfsdk:"size_bytes"`
	SourceSHA256    types.String `tfsdk:"source_sha256"`
	ArtifactFormat  types.String `tfsdk:"artifact_format"`
	ArtifactSHA256  types.String `tfsdk:"artifact_sha256"`
	ConvertedSHA256 types.String `tfsdk:"converted_sha256"`
	DataVolume      types.String `tfsdk:"data_volume"`
	DataVolumeUID   types.String `tfsdk:"data_volume_uid"`
	CopyJob         types.String `tfsdk:"copy_job"`
	CopyAttempt     types.Int64  `tfsdk:"copy_attempt"`
	Chain           types.List   `tfsdk:"chain"`
}

type chainFileModel struct {
	Link       types.Int64  `tfsdk:"link"`
	Kind       types.String `tfsdk:"kind"`
	Format     types.String `tfsdk:"format"`
	SourcePath types.String `tfsdk:"source_path"`
	CID        types.String `tfsdk:"cid"`
	ParentCID  types.String `tfsdk:"parent_cid"`
	SizeBytes  types.Int64  `tfsdk:"size_bytes"`
	SHA256     types.String `tfsdk:"sha256"`
}

type conditionModel struct {
	Type    types.String `tfsdk:"type"`
	Status  types.String `tfsdk:"status"`
	Reason  types.String `tfsdk:"reason"`
	Message types.String `tfsdk:"message"`
}

var (
	chainFileType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"link": types.Int64Type, "kind": types.StringType, "format": types.StringType, "source_path": types.StringType,
		"cid": types.StringType, "parent_cid": types.StringType, "size_bytes": types.Int64Type, "sha256": types.StringType,
	}}
	diskEvidenceType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"chain": types.ListType{ElemType: chainFileType},
		"index": types.Int64Type, "device": types.StringType, "source_path": types.StringType,
		"size_bytes": types.Int64Type, "source_sha256": types.StringType, "artifact_format": types.StringType,
		"artifact_sha256": types.StringType, "converted_sha256": types.StringType, "data_volume": types.StringType, "data_volume_uid": types.StringType,
		"copy_job": types.StringType, "copy_attempt": types.Int64Type,
	}}
	conditionType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"type": types.StringType, "status": types.StringType, "reason": types.StringType, "message": types.StringType,
	}}
)

// spec turns the model into the engine's terms.
func (m *migrationModel) spec(workDir string) (engine.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	dur := func(p path.Path, v types.String) time.Duration {
		if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
			return 0
		}
		d, err := time.ParseDuration(v.ValueString())
		if err != nil {
			diags.AddAttributeError(p, "Invalid duration", err.Error())
		}
		return d
	}
	s := engine.Spec{
		Host:          m.Source.Host.ValueString(),
		VMName:        m.Source.VMName.ValueString(),
		VMID:          int(m.Source.VMID.ValueInt64()),
		Namespace:     m.Destination.Namespace.ValueString(),
		Name:          m.Destination.Name.ValueString(),
		StorageClass:  m.Destination.StorageClass.ValueString(),
		AccessMode:    m.Destination.AccessMode.ValueString(),
		VolumeMode:    m.Destination.VolumeMode.ValueString(),
		DiskBus:       m.Destination.DiskBus.ValueString(),
		NICModel:      m.Destination.NICModel.ValueString(),
		Timezone:      m.Destination.Timezone.ValueString(),
		Conversion:    m.Conversion.ValueString(),
		RunStrategy:   m.Destination.RunStrategy.ValueString(),
		NetworkMap:    stringMap(m.Destination.NetworkMap),
		Labels:        stringMap(m.Destination.Labels),
		Mode:          m.Mode.ValueString(),
		PrecopyRounds: int(m.PrecopyRounds.ValueInt64()),
		// Null in a state the attribute postdates: that migration took
		// every round.
		PrecopyStopBytes: m.PrecopyStop.ValueInt64(),
		PowerOffPolicy:   m.PowerOffPolicy.ValueString(),
		ShutdownTimeout:  dur(path.Root("shutdown_timeout"), m.ShutdownTO),
		StartTimeout:     dur(path.Root("start_timeout"), m.StartTO),
		TargetFormat:     m.TargetFormat.ValueString(),
		Execution:        m.Execution.ValueString(),
		WorkDir:          workDir,
	}
	if t := m.Transport; t != nil {
		// Problems of the transport are reported by Spec.Validate (plan)
		// and ValidateConfig, from the same engine rules.
		s.Transport, _ = engine.TransportOf(t.UploadProxyURL.ValueString(), t.UploadProxyCA.ValueString(), t.Insecure.ValueBool(),
			t.StagingDir.ValueString(), t.StagingURL.ValueString())
		if s.Transport.Kind == engine.TransportCDIUpload {
			s.Transport.UploadProxyServerName = t.ServerName.ValueString()
		}
		s.Transport.StagingCAPEM = t.StagingCA.ValueString()
	}
	if v := m.Validation; v != nil {
		s.Validation = engine.Validation{
			GuestAgent: v.GuestAgent.ValueBool(),
			IPReported: v.IPReported.ValueBool(),
			TCP:        stringList(v.TCP),
			HTTP:       stringList(v.HTTP),
			Timeout:    dur(path.Root("validation").AtName("timeout"), v.Timeout),
		}
	}
	if rt := m.Retry; rt != nil {
		s.Retry = engine.RetryPolicy{
			Attempts: int(rt.Attempts.ValueInt64()),
			Initial:  dur(path.Root("retry").AtName("initial_backoff"), rt.InitialBackoff),
			Max:      dur(path.Root("retry").AtName("max_backoff"), rt.MaxBackoff),
		}
		s.ImporterRestarts = int(rt.ImporterRestarts.ValueInt64())
	}
	return s, diags
}

// attributePath is the Terraform path of an engine Field.
func attributePath(field string) path.Path {
	names := engine.FieldPath(field)
	if len(names) == 0 {
		return path.Empty()
	}
	p := path.Root(names[0])
	for _, n := range names[1:] {
		p = p.AtName(n)
	}
	return p
}

// fromRecord copies the record's evidence into the computed attributes.
func (m *migrationModel) fromRecord(ctx context.Context, rec record.Record) diag.Diagnostics {
	m.ID = types.StringValue(rec.Identity.Namespace + "/" + rec.Identity.Name)
	m.Phase = types.StringValue(string(rec.Phase))
	m.SourceVMID = types.Int64Value(int64(rec.Identity.VMID))
	m.VMUID = types.StringValue("")
	if rec.VM != nil {
		m.VMUID = types.StringValue(rec.VM.UID)
	}
	m.Downtime = types.StringValue("")
	m.DiskDigest = types.StringValue(rec.DigestOf())
	if d := rec.Downtime(); d > 0 {
		m.Downtime = types.StringValue(d.Round(100 * time.Millisecond).String())
	}
	m.GuestOS = types.StringValue("")
	conv := map[string]string{}
	if c := rec.Conversion; c != nil {
		m.GuestOS = types.StringValue(c.OS.String())
		conv = conversionEvidenceMap(c)
	}
	// Fixed at Validated; until then the planned value stands (an import
	// has none, and a record without one is local).
	if rec.Execution != "" || m.Execution.IsNull() || m.Execution.IsUnknown() {
		m.Execution = types.StringValue(rec.ExecutionOf())
	}
	m.PowerOff = types.StringValue("")
	if rec.PowerOff != nil {
		m.PowerOff = types.StringValue(rec.PowerOff.Action)
	}
	ts := map[string]string{}
	for k, v := range rec.Timestamps.Map() {
		ts[k] = v.UTC().Format(time.RFC3339)
	}
	disks, diags := diskEvidence(ctx, rec.Disks)
	conds := conditionModels(rec.Conditions)
	errs := []string{}
	for _, e := range rec.Errors {
		errs = append(errs, fmt.Sprintf("%s %s attempt %d (%s): %s",
			e.Time.UTC().Format(time.RFC3339), e.Phase, e.Attempt, e.Class, e.Message))
	}
	var d diag.Diagnostics
	m.Timestamps, d = types.MapValueFrom(ctx, types.StringType, ts)
	diags.Append(d...)
	m.ConversionEvidence, d = types.MapValueFrom(ctx, types.StringType, conv)
	diags.Append(d...)
	m.Disks, d = types.ListValueFrom(ctx, diskEvidenceType, nonNil(disks))
	diags.Append(d...)
	m.Conditions, d = types.ListValueFrom(ctx, conditionType, nonNil(conds))
	diags.Append(d...)
	m.Errors, d = types.ListValueFrom(ctx, types.StringType, errs)
	diags.Append(d...)
	return diags
}

// diskEvidence is the disks attribute: each disk's evidence with its
// snapshot chain's files.
func diskEvidence(ctx context.Context, recDisks []record.DiskEvidence) ([]diskEvidenceModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	var disks []diskEvidenceModel
	for _, d := range recDisks {
		chain := []chainFileModel{}
		for _, f := range d.Chain {
			chain = append(chain, chainFileModel{Link: types.Int64Value(int64(f.Link)), Kind: types.StringValue(f.Kind),
				Format: types.StringValue(f.Format), SourcePath: types.StringValue(f.SourcePath), CID: types.StringValue(f.CID),
				ParentCID: types.StringValue(f.ParentCID), SizeBytes: types.Int64Value(f.Bytes), SHA256: types.StringValue(f.SHA256)})
		}
		chainList, ds := types.ListValueFrom(ctx, chainFileType, chain)
		diags.Append(ds...)
		disks = append(disks, diskEvidenceModel{
			Chain:           chainList,
			Index:           types.Int64Value(int64(d.Index)),
			Device:          types.StringValue(d.Device),
			SourcePath:      types.StringValue(d.SourcePath),
			SizeBytes:       types.Int64Value(d.SizeBytes),
			SourceSHA256:    types.StringValue(d.SourceSHA256),
			ArtifactFormat:  types.StringValue(d.ArtifactFormat),
			ArtifactSHA256:  types.StringValue(d.ArtifactSHA256),
			ConvertedSHA256: types.StringValue(d.ConvertedSHA256),
			DataVolume:      types.StringValue(d.DataVolume),
			DataVolumeUID:   types.StringValue(d.DataVolumeUID),
			CopyJob:         types.StringValue(d.CopyJob),
			CopyAttempt:     types.Int64Value(int64(d.CopyAttempt)),
		})
	}
	return disks, diags
}

// conditionModels is the conditions attribute, oldest first.
func conditionModels(cs []record.Condition) []conditionModel {
	var conds []conditionModel
	sorted := append([]record.Condition(nil), cs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time.Before(sorted[j].Time) })
	for _, c := range sorted {
		status := "False"
		if c.Status {
			status = "True"
		}
		conds = append(conds, conditionModel{
			Type: types.StringValue(c.Type), Status: types.StringValue(status),
			Reason: types.StringValue(c.Reason), Message: types.StringValue(c.Message),
		})
	}
	return conds
}

// ConversionEvidenceKeys are the keys of the conversion_evidence attribute.
var ConversionEvidenceKeys = []string{"tool", "version", "accelerator", "os_type", "os_distro", "os_version", "osinfo", "firmware",
	"converted", "drivers", "warnings", "seconds", "time", "job"}

// conversionEvidenceMap is the conversion_evidence attribute of a record's
// conversion.
func conversionEvidenceMap(c *record.ConversionEvidence) map[string]string {
	return map[string]string{
		"tool": c.Tool, "version": c.Version, "accelerator": c.Accelerator,
		"os_type": c.OS.Type, "os_distro": c.OS.Distro, "os_version": c.OS.Version, "osinfo": c.OS.OSInfo, "firmware": c.OS.Firmware,
		"converted": c.Converted, "drivers": strings.Join(c.Drivers, "; "), "warnings": strings.Join(c.Warnings, "; "),
		"seconds": strconv.FormatFloat(c.Seconds, 'f', 1, 64), "time": c.Time.UTC().Format(time.RFC3339),
		"job": c.Job,
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// copyComputed carries the computed attributes of state into a plan.
func (m *migrationModel) copyComputed(state migrationModel) {
	m.ID, m.Phase, m.SourceVMID, m.VMUID, m.PowerOff, m.Downtime = state.ID, state.Phase, state.SourceVMID, state.VMUID, state.PowerOff, state.Downtime
	m.DiskDigest = state.DiskDigest
	m.GuestOS, m.ConversionEvidence = state.GuestOS, state.ConversionEvidence
	m.Timestamps, m.Disks, m.Conditions, m.Errors, m.Drift = state.Timestamps, state.Disks, state.Conditions, state.Errors, state.Drift
}

func stringMap(in map[string]types.String) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v.ValueString()
	}
	return out
}

func stringList(in []types.String) []string {
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, v.ValueString())
	}
	return out
}

func sameStringMap(a, b map[string]types.String) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}
