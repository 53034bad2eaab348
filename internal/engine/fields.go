package engine

import (
	"errors"
	"strings"
)

// Configuration attributes an error can concern, named as the user writes
// them (the vmmigration_migration resource's attribute paths, "." between
// nested names). The provider turns them into Terraform attribute paths so
// that an error points at the line to fix.
const (
	FieldSource            = "source"
	FieldSourceHost        = "source.host"
	FieldSourceVMName      = "source.vm_name"
	FieldSourceVMID        = "source.vmid"
	FieldNamespace         = "destination.namespace"
	FieldName              = "destination.name"
	FieldStorageClass      = "destination.storage_class"
	FieldAccessMode        = "destination.access_mode"
	FieldVolumeMode        = "destination.volume_mode"
	FieldDiskBus           = "destination.disk_bus"
	FieldNICModel          = "destination.nic_model"
	FieldConversion        = "conversion"
	FieldTimezone          = "destination.timezone"
	FieldRunStrategy       = "destination.run_strategy"
	FieldNetworkMap        = "destination.network_map"
	FieldPowerOffPolicy    = "power_off_policy"
	FieldShutdownTimeout   = "shutdown_timeout"
	FieldStartTimeout      = "start_timeout"
	FieldTargetFormat      = "target_format"
	FieldTransport         = "transport"
	FieldUploadProxyURL    = "transport.upload_proxy_url"
	FieldUploadProxyName   = "transport.upload_proxy_server_name"
	FieldHTTPStagingDir    = "transport.http_staging_dir"
	FieldHTTPStagingURL    = "transport.http_staging_url"
	FieldHTTPStagingCA     = "transport.http_staging_ca_certificate"
	FieldValidationTCP     = "validation.tcp"
	FieldValidationHTTP    = "validation.http"
	FieldDeletePolicy      = "delete_policy"
	FieldValidationTimeout = "validation.timeout"
	FieldRetryInitial      = "retry.initial_backoff"
	FieldRetryMax          = "retry.max_backoff"
	FieldExecution         = "execution"
)

// fieldError ties an error to the configuration attribute it concerns.
type fieldError struct {
	field string
	err   error
}

func (f *fieldError) Error() string { return f.err.Error() }
func (f *fieldError) Unwrap() error { return f.err }

// onField marks err as concerning the attribute field.
func onField(field string, err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{field: field, err: err}
}

// FieldOf returns the configuration attribute an error concerns (one of
// the Field constants), or "" when it concerns none in particular.
func FieldOf(err error) string {
	var f *fieldError
	if errors.As(err, &f) {
		return f.field
	}
	return ""
}

// FieldProblem is one invalid attribute of a configuration.
type FieldProblem struct {
	// Field is the attribute (one of the Field constants).
	Field   string
	Message string
}

// FieldProblems splits an error of Spec.Validate (or any errors.Join of
// field errors) into one problem per attribute; errors tied to no
// attribute get Field "".
func FieldProblems(err error) []FieldProblem {
	if err == nil {
		return nil
	}
	var out []FieldProblem
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, FieldProblems(e)...)
		}
		return out
	}
	return []FieldProblem{{Field: FieldOf(err), Message: err.Error()}}
}

// FieldPath splits a Field constant into its attribute names.
func FieldPath(field string) []string {
	if field == "" {
		return nil
	}
	return strings.Split(field, ".")
}
