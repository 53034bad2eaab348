package provider

import (
	"context"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

// Allowed values, shared by validators and descriptions.
var (
	runStrategies  = []string{"Always", "Halted", "Manual", "RerunOnFailure"}
	accessModes    = []string{"ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"}
	volumeModes    = []string{"Filesystem", "Block"}
	diskBuses      = []string{"virtio", "sata", "scsi"}
	targetFormats  = []string{"raw", "qcow2"}
	deletePolicies = []string{"keep", "delete_destination", "rollback"}

	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	durationRE   = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
)

type migrationModel struct {
	ID             types.String    `tfsdk:"id"`
	Source         *sourceModel    `tfsdk:"source"`
	Destination    *destModel      `tfsdk:"destination"`
	PowerOffPolicy types.String    `tfsdk:"power_off_policy"`
	ShutdownTO     types.String    `tfsdk:"shutdown_timeout"`
	TargetFormat   types.String    `tfsdk:"target_format"`
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
	Timestamps types.Map    `tfsdk:"timestamps"`
	Disks      types.List   `tfsdk:"disks"`
	Conditions types.List   `tfsdk:"conditions"`
	Errors     types.List   `tfsdk:"errors"`
	Drift      types.List   `tfsdk:"drift"`
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
	RunStrategy  types.String            `tfsdk:"run_strategy"`
	NetworkMap   map[string]types.String `tfsdk:"network_map"`
	Labels       map[string]types.String `tfsdk:"labels"`
}

type transportModel struct {
	UploadProxyURL types.String `tfsdk:"upload_proxy_url"`
	UploadProxyCA  types.String `tfsdk:"upload_proxy_ca_certificate"`
	Insecure       types.Bool   `tfsdk:"upload_proxy_insecure"`
	StagingDir     types.String `tfsdk:"http_staging_dir"`
	StagingURL     types.String `tfsdk:"http_staging_url"`
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
}

type diskEvidenceModel struct {
	Index          types.Int64  `tfsdk:"index"`
	Device         types.String `tfsdk:"device"`
	SourcePath     types.String `tfsdk:"source_path"`
	SizeBytes      types.Int64  `tfsdk:"size_bytes"`
	SourceSHA256   types.String `tfsdk:"source_sha256"`
	ArtifactFormat types.String `tfsdk:"artifact_format"`
	ArtifactSHA256 types.String `tfsdk:"artifact_sha256"`
	DataVolume     types.String `tfsdk:"data_volume"`
	DataVolumeUID  types.String `tfsdk:"data_volume_uid"`
}

type conditionModel struct {
	Type    types.String `tfsdk:"type"`
	Status  types.String `tfsdk:"status"`
	Reason  types.String `tfsdk:"reason"`
	Message types.String `tfsdk:"message"`
}

var (
	diskEvidenceType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"index": types.Int64Type, "device": types.StringType, "source_path": types.StringType,
		"size_bytes": types.Int64Type, "source_sha256": types.StringType, "artifact_format": types.StringType,
		"artifact_sha256": types.StringType, "data_volume": types.StringType, "data_volume_uid": types.StringType,
	}}
	conditionType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"type": types.StringType, "status": types.StringType, "reason": types.StringType, "message": types.StringType,
	}}
)

func migrationSchema(ctx context.Context) schema.Schema {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	duration := []validator.String{stringvalidator.RegexMatches(durationRE, `must be a duration such as "90s", "5m" or "1h30m"`)}
	return schema.Schema{
		MarkdownDescription: "A cold migration of one VM from an ESXi host to KubeVirt, driven through " +
			"checkpoints until the VM is validated on KubeVirt. See the guide below for the lifecycle, " +
			"what an interrupted apply does, and each policy's consequences.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`<namespace>/<name>` of the destination VM: the import ID.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"source": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "The VM to migrate. Changing it replaces the migration.",
				PlanModifiers: []planmodifier.Object{objectplanmodifier.RequiresReplaceIf(sourceChangeReplaces,
					"Changing the source replaces the migration (naming the same VM by vmid instead of vm_name does not).",
					"Changing the source replaces the migration (naming the same VM by `vmid` instead of `vm_name` does not).")},
				Attributes: map[string]schema.Attribute{
					"host": schema.StringAttribute{Required: true, MarkdownDescription: "Name of an `esxi_host` block of the provider."},
					"vm_name": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "Display name of the VM. Exactly one of `vm_name` and `vmid`.",
						Validators: []validator.String{
							stringvalidator.ExactlyOneOf(path.MatchRelative().AtParent().AtName("vm_name"), path.MatchRelative().AtParent().AtName("vmid")),
						},
					},
					"vmid": schema.Int64Attribute{
						Optional:            true,
						MarkdownDescription: "Vmid of the VM on the host; use it when display names are not unique.",
						Validators:          []validator.Int64{int64validator.AtLeast(1)},
					},
				},
			},
			"destination": schema.SingleNestedAttribute{
				Required:            true,
				MarkdownDescription: "Where the VM goes.",
				Attributes: map[string]schema.Attribute{
					"namespace": schema.StringAttribute{Required: true, PlanModifiers: replace,
						MarkdownDescription: "Namespace of the VirtualMachine, its DataVolumes and the checkpoint record.",
						Validators:          []validator.String{stringvalidator.RegexMatches(dns1123Label, "must be a valid Kubernetes namespace name (lower-case letters, digits and '-')")}},
					"name": schema.StringAttribute{Required: true, PlanModifiers: replace,
						MarkdownDescription: "Name of the VirtualMachine. DataVolumes are named `<name>-disk-<n>`.",
						Validators: []validator.String{
							stringvalidator.LengthAtMost(56),
							stringvalidator.RegexMatches(dns1123Label, "must be lower-case letters, digits and '-', starting and ending with a letter or digit"),
						}},
					"storage_class": schema.StringAttribute{Required: true, PlanModifiers: replace, MarkdownDescription: "StorageClass of the DataVolumes."},
					"access_mode": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: replace, Default: stringdefault.StaticString("ReadWriteOnce"),
						MarkdownDescription: "Access mode of the DataVolumes: " + backticked(accessModes) + ". Live migration in KubeVirt needs `ReadWriteMany`.",
						Validators:          []validator.String{stringvalidator.OneOf(accessModes...)}},
					"volume_mode": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: replace, Default: stringdefault.StaticString("Filesystem"),
						MarkdownDescription: "Volume mode of the DataVolumes: " + backticked(volumeModes) + ".",
						Validators:          []validator.String{stringvalidator.OneOf(volumeModes...)}},
					"disk_bus": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: replace, Default: stringdefault.StaticString("virtio"),
						MarkdownDescription: "Bus of the VM's disks: " + backticked(diskBuses) + ". Guests without virtio drivers (Windows before the drivers are installed) need `sata`.",
						Validators:          []validator.String{stringvalidator.OneOf(diskBuses...)}},
					"run_strategy": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("Always"),
						MarkdownDescription: "KubeVirt run strategy once migrated: " + backticked(runStrategies) + ". Changes in place.",
						Validators:          []validator.String{stringvalidator.OneOf(runStrategies...)}},
					"network_map": schema.MapAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "Destination of each source network (port group): `\"pod\"` for the pod network, or a Multus network `\"<namespace>/<name>\"`. Every NIC's network must be mapped. MAC addresses are kept."},
					"labels": schema.MapAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "Extra labels of the VirtualMachine."},
				},
			},
			"power_off_policy": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(preflight.PolicyGraceful),
				MarkdownDescription: "How the running source VM is powered off before its disks are copied: " +
					"`graceful` (guest shutdown through VMware Tools), `graceful_then_hard` (then a hard power-off after `shutdown_timeout`), " +
					"`hard` (power off at once), `manual` (you power it off; the migration waits in ManualInterventionRequired). " +
					"Powering off is the one irreversible act of a migration: it happens only after the pre-flight checks pass, and it is recorded once and never decided again.",
				Validators: []validator.String{stringvalidator.OneOf(preflight.PowerOffPolicies...)},
			},
			"shutdown_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("5m"),
				MarkdownDescription: "How long a graceful shutdown may take.",
				Validators:          duration,
			},
			"target_format": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("raw"), PlanModifiers: replace,
				MarkdownDescription: "Image format sent to CDI: " + backticked(targetFormats) + " (converted with qemu-img).",
				Validators:          []validator.String{stringvalidator.OneOf(targetFormats...)},
			},
			"transport": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "How disk images reach CDI: CDI's upload proxy, as `virtctl image-upload` uses it, or an HTTP staging location you serve, imported with a DataVolume `http` source. Required to migrate; a migration adopted by import copies nothing and may leave it out.",
				Attributes: map[string]schema.Attribute{
					"upload_proxy_url":            schema.StringAttribute{Optional: true, MarkdownDescription: "URL of CDI's upload proxy reachable from the machine running Terraform, e.g. `https://cdi-uploadproxy.example.com`."},
					"upload_proxy_ca_certificate": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM CA of the upload proxy's certificate."},
					"upload_proxy_insecure":       schema.BoolAttribute{Optional: true, MarkdownDescription: "**Insecure.** Do not verify the upload proxy's certificate."},
					"http_staging_dir":            schema.StringAttribute{Optional: true, MarkdownDescription: "Directory served by your HTTP server; images are written here. Needs `http_staging_url`."},
					"http_staging_url":            schema.StringAttribute{Optional: true, MarkdownDescription: "URL at which CDI's importer reaches `http_staging_dir`."},
				},
			},
			"validation": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "Read-only checks that must pass before the migration is Completed (the VMI running is always checked). Changes in place.",
				Attributes: map[string]schema.Attribute{
					"guest_agent": schema.BoolAttribute{Optional: true, MarkdownDescription: "The QEMU guest agent must connect."},
					"ip_reported": schema.BoolAttribute{Optional: true, MarkdownDescription: "The VMI must report an IP address."},
					"tcp":         schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "`host:port` addresses that must accept a TCP connection."},
					"http":        schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "URLs that must answer 2xx."},
					"timeout":     schema.StringAttribute{Optional: true, MarkdownDescription: "How long the checks may take to pass. Defaults to `10m`.", Validators: duration},
				},
			},
			"retry": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "Retry budget for transient failures of one phase. Changes in place.",
				Attributes: map[string]schema.Attribute{
					"attempts":        schema.Int64Attribute{Optional: true, MarkdownDescription: "Tries per phase. Defaults to `5`.", Validators: []validator.Int64{int64validator.Between(1, 100)}},
					"initial_backoff": schema.StringAttribute{Optional: true, MarkdownDescription: "Wait after the first failure, doubling up to `max_backoff`. Defaults to `10s`.", Validators: duration},
					"max_backoff":     schema.StringAttribute{Optional: true, MarkdownDescription: "Longest wait between tries. Defaults to `5m`.", Validators: duration},
				},
			},
			"delete_policy": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("keep"),
				MarkdownDescription: "What `terraform destroy` (or a replacement) does: `keep` removes only the checkpoint record and leaves the migrated VM and its disks running; " +
					"`delete_destination` also deletes the VM and DataVolumes this migration created; `rollback` deletes them and powers the source VM on again, and refuses if the destination VM ever started " +
					"(two servers with one identity on the network). The source disk is never touched.",
				Validators: []validator.String{stringvalidator.OneOf(deletePolicies...)},
			},

			"phase":            str("Current checkpoint: `Pending`, `Discovering`, `Validated`, `Preparing`, `Converting`, `Importing`, `CreatingVM`, `Starting`, `Validating`, `Completed`, or `Retryable`, `ManualInterventionRequired`, `Failed`."),
			"source_vmid":      schema.Int64Attribute{Computed: true, MarkdownDescription: "Vmid of the source VM when it was discovered."},
			"vm_uid":           str("UID of the destination VirtualMachine."),
			"power_off_action": str("What powered the source off, recorded once: `already_off`, `graceful`, `hard` or `user`."),
			"timestamps":       schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "RFC 3339 times of the checkpoints reached (`created`, `discovered`, `validated`, `sourcePoweredOff`, ..., `completed`)."},
			"disks": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Evidence per disk.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"index":           schema.Int64Attribute{Computed: true, MarkdownDescription: "`n` in `<name>-disk-<n>`."},
					"device":          str("Source controller and unit."),
					"source_path":     str("Source data file."),
					"size_bytes":      schema.Int64Attribute{Computed: true, MarkdownDescription: "Bytes copied."},
					"source_sha256":   str("SHA-256 of the source data, computed while streaming."),
					"artifact_format": str("Format of the imported image."),
					"artifact_sha256": str("SHA-256 of the imported image."),
					"data_volume":     str("DataVolume name."),
					"data_volume_uid": str("DataVolume UID."),
				}},
			},
			"conditions": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Observed conditions (`SourceDiscovered`, `Validated`, `SourcePoweredOff`, `DiskAcquired`, `DiskConverted`, `DiskImported`, `VMCreated`, `VMStarted`, `GuestReady`, `Ready`).",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"type": str("Condition type."), "status": str("`True`, `False` or `Unknown`."),
					"reason": str("Machine-readable reason."), "message": str("What was observed."),
				}},
			},
			"errors": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "History of failed attempts, oldest first."},
			"drift": schema.ListAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "What a refresh found changed outside Terraform that the migration made: the VirtualMachine or a DataVolume gone, replaced or no longer labelled as this migration's. " +
					"Empty when nothing drifted. When it is not empty the plan replaces the migration, which migrates the source again into the same destination. " +
					"A changed run strategy shows as a change of `destination.run_strategy` instead, and a source VM running again after cutover as a warning."},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}
