package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
)

// byConversion defaults an unset attribute from the planned conversion
// (the engine's rule, so that plan and apply agree).
type byConversion struct {
	def func(conversion string) string
}

func (byConversion) Description(context.Context) string {
	return "Defaults from the conversion."
}

func (b byConversion) MarkdownDescription(ctx context.Context) string { return b.Description(ctx) }

func (b byConversion) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if !req.ConfigValue.IsNull() {
		return
	}
	var conv types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("conversion"), &conv)...)
	if conv.IsUnknown() {
		resp.PlanValue = types.StringUnknown()
		return
	}
	c := conv.ValueString()
	if c == "" {
		c = engine.DefaultConversion
	}
	resp.PlanValue = types.StringValue(b.def(c))
}

// Patterns shared by validators.
var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	durationRE   = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
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
					"access_mode": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: replace, Default: stringdefault.StaticString(engine.DefaultAccessMode),
						MarkdownDescription: "Access mode of the DataVolumes: " + backticked(engine.AccessModes) + ". Live migration in KubeVirt needs `ReadWriteMany`.",
						Validators:          []validator.String{stringvalidator.OneOf(engine.AccessModes...)}},
					"volume_mode": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: replace, Default: stringdefault.StaticString(engine.DefaultVolumeMode),
						MarkdownDescription: "Volume mode of the DataVolumes: " + backticked(engine.VolumeModes) + ".",
						Validators:          []validator.String{stringvalidator.OneOf(engine.VolumeModes...)}},
					"disk_bus": schema.StringAttribute{Optional: true, Computed: true,
						PlanModifiers: []planmodifier.String{byConversion{engine.DefaultDiskBus}, stringplanmodifier.RequiresReplace()},
						MarkdownDescription: "Bus of the VM's disks: " + backticked(engine.DiskBuses) + ". Defaults to `" + engine.ConvertedDiskBus + "` when the guest is converted, else `" +
							engine.UnconvertedDiskBus + "` (AHCI, which most guests installed on VMware can drive; virtio needs drivers they usually lack).",
						Validators: []validator.String{stringvalidator.OneOf(engine.DiskBuses...)}},
					"nic_model": schema.StringAttribute{Optional: true, Computed: true,
						PlanModifiers: []planmodifier.String{byConversion{engine.DefaultNICModel}, replaceUnlessNew},
						MarkdownDescription: "Model of the VM's network interfaces: " + backticked(engine.NICModels) + ". Defaults to `" + engine.ConvertedNICModel + "` when the guest is converted, else `" +
							engine.UnconvertedNICModel + "`.",
						Validators: []validator.String{stringvalidator.OneOf(engine.NICModels...)}},
					"timezone": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: []planmodifier.String{replaceUnlessNew}, Default: stringdefault.StaticString(engine.DefaultTimezone),
						MarkdownDescription: "Time zone of a Windows guest's hardware clock, which Windows keeps in local time (such as `Europe/Berlin`): set it to the zone the guest is set to. " +
							"Linux guests' clocks are UTC whatever this says."},
					"run_strategy": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(engine.DefaultRunStrategy),
						MarkdownDescription: "KubeVirt run strategy once migrated: " + backticked(engine.RunStrategies) + ". Changes in place.",
						Validators:          []validator.String{stringvalidator.OneOf(engine.RunStrategies...)}},
					"network_map": schema.MapAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "Destination of each source network (port group): `\"pod\"` for the pod network, or a Multus network `\"<namespace>/<name>\"`. Every NIC's network must be mapped. MAC addresses are kept."},
					"labels": schema.MapAttribute{Optional: true, ElementType: types.StringType,
						MarkdownDescription: "Extra labels of the VirtualMachine."},
				},
			},
			"mode": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(engine.ModeCold),
				// State written before mode existed holds null: that migration
				// was cold, not a different one.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIf(replaceUnlessNewAttribute,
					"Replaces the migration unless the state predates the attribute.", "Replaces the migration unless the state predates the attribute.")},
				MarkdownDescription: "How the disks are copied: " + backticked(engine.Modes) + ". `" + engine.ModeCold + "` powers the source off (per `power_off_policy`), then copies its disks. " +
					"`" + engine.ModeWarm + "` copies them while the source runs: it takes a disk-only snapshot of the source (`vim-cmd vmsvc/snapshot.create`, no memory, no quiescing: crash-consistent), " +
					"copies the files the snapshot froze, takes up to `precopy_rounds` snapshots in all (fewer once a round copies at most `precopy_stop_bytes`), each copying the delta the previous round left, and powers the source off only to copy the last delta, " +
					"so the downtime covers what the guest wrote during the last round. The migration's snapshots are named `vmmigration <namespace>/<name> round <n>` and recorded with their ids; " +
					"they are removed from the source (consolidating their deltas, leaving the VM as it was) once the migration completes, or when the resource is destroyed before, whatever the `delete_policy`. " +
					"Snapshots the VM had before are never touched. Changing it replaces the migration.",
				Validators: []validator.String{stringvalidator.OneOf(engine.Modes...)},
			},
			"precopy_rounds": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(engine.DefaultPrecopyRounds),
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplaceIf(func(_ context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
					resp.RequiresReplace = !req.StateValue.IsNull()
				}, "Replaces the migration unless the state predates the attribute.", "Replaces the migration unless the state predates the attribute.")},
				MarkdownDescription: fmt.Sprintf("Most precopy rounds (snapshots) of a `%s` migration, 1 to %d (see `precopy_stop_bytes`); `%s` migrations take none and leave it at %d. "+
					"More rounds shrink the last delta when the guest writes a lot during the first copy. Changing it replaces the migration.",
					engine.ModeWarm, engine.MaxPrecopyRounds, engine.ModeCold, engine.DefaultPrecopyRounds),
				Validators: []validator.Int64{int64validator.Between(1, engine.MaxPrecopyRounds)},
			},
			"precopy_stop_bytes": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(engine.DefaultPrecopyStopBytes),
				PlanModifiers: []planmodifier.Int64{replaceUnlessNewInt64},
				MarkdownDescription: fmt.Sprintf("Ends the precopy of a `%s` migration before `precopy_rounds` once a round, from the second on, copied at most this many bytes: "+
					"the guest writes little, and another round would shorten the cutover little while adding a snapshot. `precopy_rounds` is then the most rounds taken. "+
					"The decision is recorded with the round and its bytes (an apply that resumes never takes it again) and reported in an event. "+
					"`0` takes every round. Defaults to %d (64 MiB); `%s` migrations leave it at that. Changing it replaces the migration.",
					engine.ModeWarm, engine.DefaultPrecopyStopBytes, engine.ModeCold),
				Validators: []validator.Int64{int64validator.AtLeast(0)},
			},
			"power_off_policy": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(engine.DefaultPowerOffPolicy),
				MarkdownDescription: "How the running source VM is powered off before its disks are copied: " +
					"`graceful` (guest shutdown through VMware Tools), `graceful_then_hard` (then a hard power-off after `shutdown_timeout`), " +
					"`hard` (power off at once), `manual` (you power it off; the migration waits in ManualInterventionRequired). " +
					"Powering off is the one irreversible act of a migration: it happens only after the pre-flight checks pass, and it is recorded once and never decided again.",
				Validators: []validator.String{stringvalidator.OneOf(engine.PowerOffPolicies...)},
			},
			"shutdown_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(durationString(engine.DefaultShutdownTimeout)),
				MarkdownDescription: "How long a graceful shutdown may take.",
				Validators:          duration,
			},
			"start_timeout": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "How long the migrated VM's VirtualMachineInstance may take to reach Running, per attempt of the Starting phase " +
					"(scheduling, pulling the virt-launcher image, attaching the disks). Defaults to `" + durationString(engine.DefaultStartTimeout) + "`. Changes in place.",
				Validators: duration,
			},
			"target_format": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(engine.DefaultTargetFormat), PlanModifiers: replace,
				MarkdownDescription: "Image format sent to CDI: " + backticked(engine.TargetFormats) + " (converted with qemu-img).",
				Validators:          []validator.String{stringvalidator.OneOf(engine.TargetFormats...)},
			},
			"conversion": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(engine.DefaultConversion), PlanModifiers: []planmodifier.String{replaceUnlessNew},
				MarkdownDescription: "How the guest is made to boot on KubeVirt: `" + engine.ConversionVirtV2V + "` runs virt-v2v-in-place on copies of the disks, on the machine running Terraform, " +
					"after they are copied and before they are imported: it installs the virtio drivers (for Windows from the virtio-win drivers, see the provider's `virtio_win`), fixes fstab and the bootloader, and removes VMware Tools. " +
					"The VM then gets virtio disks and network interfaces. `" + engine.ConversionNone + "` imports the disks as copied, for guests that already have the drivers they need; " +
					"they get `" + engine.UnconvertedDiskBus + "` disks and `" + engine.UnconvertedNICModel + "` interfaces unless `destination.disk_bus` and `destination.nic_model` say otherwise, and the plan warns that the guest may not boot. " +
					"Needs the Debian packages " + backticked(convert.V2VPackages) + ".",
				Validators: []validator.String{stringvalidator.OneOf(engine.Conversions...)},
			},
			"execution": schema.StringAttribute{
				Optional: true, Computed: true,
				// Unset: the migration keeps what it was planned with, so a
				// new provider default moves no migration; set to another
				// value, it is another migration.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), replaceUnlessNew},
				MarkdownDescription: "Where the disk work runs: " + backticked(engine.Executions) + ". Defaults to the provider's `execution`. " +
					"`" + engine.ExecutionLocal + "` copies every disk into the provider's `work_dir` on the machine running Terraform, converts it there and uploads it to CDI. " +
					"`" + engine.ExecutionCluster + "` creates each disk's DataVolume blank, then runs a Kubernetes Job per disk (from the provider's `worker_image`) that copies the disk " +
					"over SSH straight into the DataVolume's claim, with the same journaled, verified, zero-skipping copy: no disk byte passes through the machine running Terraform, " +
					"a runner killed mid-wave leaves the Jobs running and the next apply adopts them, and each ESXi host's `max_concurrent_migrations` bounds its copy Jobs across every workspace that shares the cluster. " +
					"A disk on snapshots is flattened by its Job in the claim, and in `mode = \"" + engine.ModeWarm + "\"` each precopy round's Job applies what the round's snapshot froze and the cutover's Job only the last delta. " +
					"The ESXi host's address must be reachable from the cluster's pods. Cluster execution does not yet cover Block volumes: the plan says so. The execution is recorded when the migration is validated and never changes afterwards; " +
					"setting another value on an existing migration replaces it. See the guide for the permissions it needs.",
				Validators: []validator.String{stringvalidator.OneOf(engine.Executions...)},
			},
			"transport": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "How disk images reach CDI: CDI's upload proxy, as `virtctl image-upload` uses it, or an HTTP staging location you serve, imported with a DataVolume `http` source. Without it (or without `upload_proxy_url`), CDI's upload proxy at the URL the cluster publishes in CDIConfig `status.uploadProxyURL`, verified with the cluster's `cdi-uploadproxy-signer-bundle`.",
				Attributes: map[string]schema.Attribute{
					"upload_proxy_url":            schema.StringAttribute{Optional: true, MarkdownDescription: "URL of CDI's upload proxy reachable from the machine running Terraform, e.g. `https://cdi-uploadproxy.example.com`. Default: the URL in CDIConfig `status.uploadProxyURL`."},
					"upload_proxy_ca_certificate": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM CA of the upload proxy's certificate."},
					"upload_proxy_insecure":       schema.BoolAttribute{Optional: true, MarkdownDescription: "**Insecure.** Do not verify the upload proxy's certificate."},
					"upload_proxy_server_name": schema.StringAttribute{Optional: true, MarkdownDescription: "Name to verify the upload proxy's certificate against when `upload_proxy_url`'s host is not in it " +
						"(a port-forward, a NodePort, an IP address): CDI's certificate names `cdi-uploadproxy`, `cdi-uploadproxy.<namespace>` and `cdi-uploadproxy.<namespace>.svc`. " +
						"Without `upload_proxy_ca_certificate`, and whenever the certificate does not verify, the CA is read from the cluster's ConfigMap `cdi-uploadproxy-signer-bundle` (CDI renews it daily)."},
					"http_staging_dir":            schema.StringAttribute{Optional: true, MarkdownDescription: "Directory served by your HTTP server; images are written here. Needs `http_staging_url`."},
					"http_staging_url":            schema.StringAttribute{Optional: true, MarkdownDescription: "URL at which CDI's importer reaches `http_staging_dir`."},
					"http_staging_ca_certificate": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM CA that signed the certificate of an `https` `http_staging_url`, where CDI's importer trusts no CA that did. It is kept in the ConfigMap `vmmigration-<name>-staging-ca` of the destination namespace, which the DataVolumes name as their `certConfigMap`."},
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
					"timeout":     schema.StringAttribute{Optional: true, MarkdownDescription: "How long the checks may take to pass. Defaults to `" + durationString(engine.DefaultValidationTimeout) + "`.", Validators: duration},
				},
			},
			"retry": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "Retry budget for transient failures of one phase. Changes in place.",
				Attributes: map[string]schema.Attribute{
					"attempts":        schema.Int64Attribute{Optional: true, MarkdownDescription: fmt.Sprintf("Tries per phase. Defaults to `%d`.", engine.DefaultRetryAttempts), Validators: []validator.Int64{int64validator.Between(1, 100)}},
					"initial_backoff": schema.StringAttribute{Optional: true, MarkdownDescription: "Wait after the first failure, doubling up to `max_backoff`. Defaults to `" + durationString(engine.DefaultRetryInitial) + "`.", Validators: duration},
					"max_backoff":     schema.StringAttribute{Optional: true, MarkdownDescription: "Longest wait between tries. Defaults to `" + durationString(engine.DefaultRetryMax) + "`.", Validators: duration},
					"importer_restarts": schema.Int64Attribute{Optional: true, MarkdownDescription: fmt.Sprintf("How many times CDI may restart the importer of one disk (its DataVolume's `status.restartCount`; CDI itself restarts a failing importer for ever) before the migration stops in ManualInterventionRequired, saying why the importer failed; the DataVolume is then deleted, so that the next apply starts anew. Defaults to `%d`.", engine.DefaultImporterRestarts),
						Validators: []validator.Int64{int64validator.Between(1, 100)}},
				},
			},
			"delete_policy": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(string(engine.DefaultDeletePolicy)),
				MarkdownDescription: "What `terraform destroy` (or a replacement) does: `keep` removes only the checkpoint record and leaves the migrated VM and its disks running; " +
					"`delete_destination` also deletes the VM and DataVolumes this migration created; `rollback` deletes them and powers the source VM on again, and refuses if the destination VM ever started " +
					"(two servers with one identity on the network). The source's disks are never touched, except that the snapshots a `warm` migration took are removed whatever the policy.",
				Validators: []validator.String{stringvalidator.OneOf(engine.DeletePolicies...)},
			},

			"phase":       str("Current checkpoint: " + backticked(phaseNames(engine.Phases())) + "; or a stop state: " + backticked(phaseNames(record.StopPhases)) + "."),
			"source_vmid": schema.Int64Attribute{Computed: true, MarkdownDescription: "Vmid of the source VM when it was discovered."},
			"vm_uid":      str("UID of the destination VirtualMachine."),
			"downtime": str("How long the service was down: from the source powered off to the migrated VM started " +
				"(`timestamps.sourcePoweredOff` to `timestamps.vmStarted`), as a duration such as `42s`. Empty until the VM has started."),
			"disk_digest": str("Which digest the disks' checksums (`source_sha256`, `artifact_sha256`, `converted_sha256`, the chain files' `sha256`) are: `" + record.DigestTree1MiB +
				"`, " + diskdigest.Explained + "; or `" + record.DigestPlainSHA256 + "`, a plain SHA-256 of the whole file, in migrations that had reached `CreatingVM` before the digest was introduced " +
				"(one stopped earlier copies its disks again when next applied, keeping its power-off decision)."),
			"guest_os": str("The guest operating system as virt-v2v inspected it, such as `debian 12.15 (debian12)`. Empty before the conversion ran, and with `conversion = \"none\"`."),
			"conversion_evidence": schema.MapAttribute{Computed: true, ElementType: types.StringType,
				MarkdownDescription: "What the guest conversion saw and did: " + backticked(ConversionEvidenceKeys) + " (`job`: in cluster execution, the conversion Job that converted the guest in the claims; empty locally). Empty before it ran."},
			"power_off_action": str("What powered the source off, recorded once: " + backticked(record.PowerActions) + "."),
			"timestamps":       schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "RFC 3339 times of the checkpoints reached: " + backticked(record.TimestampNames) + "."},
			"disks": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Evidence per disk.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"index":            schema.Int64Attribute{Computed: true, MarkdownDescription: "`n` in `<name>-disk-<n>`."},
					"device":           str("Source controller and unit."),
					"source_path":      str("Source data file."),
					"size_bytes":       schema.Int64Attribute{Computed: true, MarkdownDescription: "Bytes copied."},
					"source_sha256":    str("Digest of the source data, computed while streaming: " + diskdigest.Explained + "."),
					"artifact_format":  str("Format of the imported image."),
					"artifact_sha256":  str("Digest of the imported image, as `source_sha256`'s."),
					"converted_sha256": str("Digest of the image after the guest conversion, as `source_sha256`'s: what the DataVolume holds. Empty without conversion."),
					"data_volume":      str("DataVolume name."),
					"data_volume_uid":  str("DataVolume UID."),
					"copy_job": str("In cluster execution, the Job that copied the disk into its DataVolume's claim (in the destination namespace; " +
						"removed at Completed, its name kept here). Empty in local execution."),
					"copy_attempt": schema.Int64Attribute{Computed: true, MarkdownDescription: "In cluster execution, which copy Job filled the claim: 1 for the first, " +
						"one more for each Job that failed or was interrupted and was followed by a new one resuming from its journal, and in a `warm` migration one more for each precopy round and the cutover, each a Job of its own. 0 in local execution."},
					"chain": schema.ListNestedAttribute{
						Computed: true,
						MarkdownDescription: "For a disk that runs on a snapshot chain, every file copied from the host, the descriptor the VM runs on first and the base last, " +
							"each with the digest of its copy; `source_sha256` is then the digest of the flattened, guest-visible disk. In cluster execution the copy Job reads the extent files only " +
							"(the descriptors were read by the inventory) and flattens the chain in the claim. Empty for a disk on no snapshot.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"link":        schema.Int64Attribute{Computed: true, MarkdownDescription: "Position in the chain: 0 for the descriptor the VM runs on, the highest for the base."},
							"kind":        str("`descriptor` or `extent`."),
							"format":      str("The link's `createType`: `seSparse`, `vmfsSparse`, `vmfs`, ..."),
							"source_path": str("The file on the host."),
							"cid":         str("The descriptor's `CID` (descriptors only)."),
							"parent_cid":  str("The descriptor's `parentCID` (descriptors only)."),
							"size_bytes":  schema.Int64Attribute{Computed: true, MarkdownDescription: "Bytes copied."},
							"sha256":      str("Digest of the copy (as `source_sha256`'s), which matched the host's."),
						}},
					},
				}},
			},
			"conditions": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "Observed conditions: " + backticked(record.ConditionTypes) + ".",
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

// phaseNames spells phases for descriptions.
func phaseNames(ps []record.Phase) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// durationString spells a duration as a user writes it: "5m", not "5m0s".
func durationString(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// replaceUnlessNewAttribute replaces the migration when a string attribute
// changes, except from null: a state written before the attribute existed.
// replaceUnlessNew is RequiresReplace for an attribute that states written
// by earlier versions of the provider do not have: gaining it on upgrade
// does not migrate the VM again.
var replaceUnlessNew = stringplanmodifier.RequiresReplaceIf(replaceUnlessNewAttribute,
	"Replaces the migration unless the state predates the attribute.", "Replaces the migration unless the state predates the attribute.")

// replaceUnlessNewInt64 is replaceUnlessNew for a number.
var replaceUnlessNewInt64 = int64planmodifier.RequiresReplaceIf(func(_ context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
	resp.RequiresReplace = !req.StateValue.IsNull()
}, "Replaces the migration unless the state predates the attribute.", "Replaces the migration unless the state predates the attribute.")

func replaceUnlessNewAttribute(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
	resp.RequiresReplace = !req.StateValue.IsNull()
}
