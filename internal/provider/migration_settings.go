package provider

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
)

// savedSettings are the settings of a configuration that neither the
// record nor the cluster show, saved with the record (engine.SaveSettings,
// annotation engine.AnnotationSettings) so that an import reproduces them
// and a plan with the same configuration is empty. They hold no secrets
// (the upload proxy's CA certificate is public).
type savedSettings struct {
	PowerOffPolicy  *string          `json:"powerOffPolicy,omitempty"`
	ShutdownTimeout *string          `json:"shutdownTimeout,omitempty"`
	StartTimeout    *string          `json:"startTimeout,omitempty"`
	DeletePolicy    *string          `json:"deletePolicy,omitempty"`
	Transport       *savedTransport  `json:"transport,omitempty"`
	Validation      *savedValidation `json:"validation,omitempty"`
	Retry           *savedRetry      `json:"retry,omitempty"`
}

type savedTransport struct {
	UploadProxyURL *string `json:"uploadProxyURL,omitempty"`
	UploadProxyCA  *string `json:"uploadProxyCA,omitempty"`
	ServerName     *string `json:"uploadProxyServerName,omitempty"`
	Insecure       *bool   `json:"insecure,omitempty"`
	StagingDir     *string `json:"stagingDir,omitempty"`
	StagingURL     *string `json:"stagingURL,omitempty"`
	StagingCA      *string `json:"stagingCA,omitempty"`
}

type savedValidation struct {
	GuestAgent *bool     `json:"guestAgent,omitempty"`
	IPReported *bool     `json:"ipReported,omitempty"`
	TCP        *[]string `json:"tcp,omitempty"`
	HTTP       *[]string `json:"http,omitempty"`
	Timeout    *string   `json:"timeout,omitempty"`
}

type savedRetry struct {
	Attempts       *int64  `json:"attempts,omitempty"`
	InitialBackoff *string `json:"initialBackoff,omitempty"`
	MaxBackoff     *string `json:"maxBackoff,omitempty"`
	// ImporterRestarts is retry.importer_restarts.
	ImporterRestarts *int64 `json:"importerRestarts,omitempty"`
}

func strPtr(v types.String) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueString()
	return &s
}

func ptrStr(p *string) types.String {
	if p == nil {
		return types.StringNull()
	}
	return types.StringValue(*p)
}

func boolPtr(v types.Bool) *bool {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	b := v.ValueBool()
	return &b
}

func ptrBool(p *bool) types.Bool {
	if p == nil {
		return types.BoolNull()
	}
	return types.BoolValue(*p)
}

func listPtr(in []types.String) *[]string {
	if in == nil {
		return nil
	}
	out := stringList(in)
	return &out
}

func ptrList(p *[]string) []types.String {
	if p == nil {
		return nil
	}
	out := make([]types.String, 0, len(*p))
	for _, s := range *p {
		out = append(out, types.StringValue(s))
	}
	return out
}

func settingsOf(m *migrationModel) savedSettings {
	s := savedSettings{PowerOffPolicy: strPtr(m.PowerOffPolicy), ShutdownTimeout: strPtr(m.ShutdownTO), StartTimeout: strPtr(m.StartTO), DeletePolicy: strPtr(m.DeletePolicy)}
	if t := m.Transport; t != nil {
		s.Transport = &savedTransport{UploadProxyURL: strPtr(t.UploadProxyURL), UploadProxyCA: strPtr(t.UploadProxyCA), ServerName: strPtr(t.ServerName),
			Insecure: boolPtr(t.Insecure), StagingDir: strPtr(t.StagingDir), StagingURL: strPtr(t.StagingURL), StagingCA: strPtr(t.StagingCA)}
	}
	if v := m.Validation; v != nil {
		s.Validation = &savedValidation{GuestAgent: boolPtr(v.GuestAgent), IPReported: boolPtr(v.IPReported),
			TCP: listPtr(v.TCP), HTTP: listPtr(v.HTTP), Timeout: strPtr(v.Timeout)}
	}
	if rt := m.Retry; rt != nil {
		s.Retry = &savedRetry{InitialBackoff: strPtr(rt.InitialBackoff), MaxBackoff: strPtr(rt.MaxBackoff)}
		if !rt.Attempts.IsNull() && !rt.Attempts.IsUnknown() {
			a := rt.Attempts.ValueInt64()
			s.Retry.Attempts = &a
		}
		if !rt.ImporterRestarts.IsNull() && !rt.ImporterRestarts.IsUnknown() {
			n := rt.ImporterRestarts.ValueInt64()
			s.Retry.ImporterRestarts = &n
		}
	}
	return s
}

func (s *savedSettings) apply(m *migrationModel) {
	if s.PowerOffPolicy != nil {
		m.PowerOffPolicy = ptrStr(s.PowerOffPolicy)
	}
	if s.ShutdownTimeout != nil {
		m.ShutdownTO = ptrStr(s.ShutdownTimeout)
	}
	if s.StartTimeout != nil {
		m.StartTO = ptrStr(s.StartTimeout)
	}
	if s.DeletePolicy != nil {
		m.DeletePolicy = ptrStr(s.DeletePolicy)
	}
	if t := s.Transport; t != nil {
		m.Transport = &transportModel{UploadProxyURL: ptrStr(t.UploadProxyURL), UploadProxyCA: ptrStr(t.UploadProxyCA), ServerName: ptrStr(t.ServerName),
			Insecure: ptrBool(t.Insecure), StagingDir: ptrStr(t.StagingDir), StagingURL: ptrStr(t.StagingURL), StagingCA: ptrStr(t.StagingCA)}
	}
	if v := s.Validation; v != nil {
		m.Validation = &validateModel{GuestAgent: ptrBool(v.GuestAgent), IPReported: ptrBool(v.IPReported),
			TCP: ptrList(v.TCP), HTTP: ptrList(v.HTTP), Timeout: ptrStr(v.Timeout)}
	}
	if rt := s.Retry; rt != nil {
		m.Retry = &retryModel{Attempts: types.Int64Null(), InitialBackoff: ptrStr(rt.InitialBackoff), MaxBackoff: ptrStr(rt.MaxBackoff),
			ImporterRestarts: types.Int64Null()}
		if rt.Attempts != nil {
			m.Retry.Attempts = types.Int64Value(*rt.Attempts)
		}
		if rt.ImporterRestarts != nil {
			m.Retry.ImporterRestarts = types.Int64Value(*rt.ImporterRestarts)
		}
	}
}

// saveSettings stores the settings with the record, through the engine.
// Failing to is a warning: only a later import misses them.
func (r *migrationResource) saveSettings(ctx context.Context, eng *engine.Engine, m *migrationModel) diag.Diagnostics {
	var diags diag.Diagnostics
	ns, name := m.Destination.Namespace.ValueString(), m.Destination.Name.ValueString()
	b, err := json.Marshal(settingsOf(m))
	if err == nil {
		err = eng.SaveSettings(ctx, ns, name, string(b))
	}
	if err != nil {
		diags.AddWarning("Settings not saved",
			fmt.Sprintf("The settings of migration %s/%s could not be saved on its record ConfigMap %s (%v). The migration is not affected; "+
				"an import of it would show transport, validation and retry as changes.", ns, name, coord.RecordName(name), err))
	}
	return diags
}

// parseSettings reads saved settings; nil when none were saved.
func parseSettings(saved string) (*savedSettings, error) {
	if saved == "" {
		return nil, nil
	}
	var s savedSettings
	if err := json.Unmarshal([]byte(saved), &s); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", engine.AnnotationSettings, err)
	}
	return &s, nil
}
