package provider

import (
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
)

// Environment variables read when the matching attribute is not set. The
// ESXi ones apply to every esxi_host block that leaves the attribute unset.
const (
	envWorkDir        = "VMMIGRATION_WORK_DIR"
	envExecution      = "VMMIGRATION_EXECUTION"
	envWorkerImage    = "VMMIGRATION_WORKER_IMAGE"
	envESXiUser       = "VMMIGRATION_ESXI_USER"
	envESXiPassword   = "VMMIGRATION_ESXI_PASSWORD"
	envESXiPrivateKey = "VMMIGRATION_ESXI_PRIVATE_KEY"
	envESXiKnownHosts = "VMMIGRATION_ESXI_KNOWN_HOSTS"

	// The same names as the hashicorp/kubernetes provider, so that a
	// pipeline that already configures one configures both.
	envKubeConfigPath  = "KUBE_CONFIG_PATH"
	envKubeConfigPaths = "KUBE_CONFIG_PATHS"
	envKubeContext     = "KUBE_CTX"
	envKubeHost        = "KUBE_HOST"
	envKubeToken       = "KUBE_TOKEN"
	envKubeCACert      = "KUBE_CLUSTER_CA_CERT_DATA"
	envKubeClientCert  = "KUBE_CLIENT_CERT_DATA"
	envKubeClientKey   = "KUBE_CLIENT_KEY_DATA"
	envKubeInsecure    = "KUBE_INSECURE"
)

const (
	defaultESXiPort                = 22
	defaultESXiUser                = "root"
	defaultMaxSessions             = 4
	defaultStreamsPerDisk          = 2
	defaultMaxConcurrentMigrations = 2
)

var (
	hostNameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`)
	fingerprintRE = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}=?$`)
)

type providerModel struct {
	WorkDir     types.String `tfsdk:"work_dir"`
	VirtioWin   types.String `tfsdk:"virtio_win"`
	Execution   types.String `tfsdk:"execution"`
	WorkerImage types.String `tfsdk:"worker_image"`
	// MaxConcurrentConversions bounds cluster execution's conversion Jobs.
	MaxConcurrentConversions types.Int64       `tfsdk:"max_concurrent_conversions"`
	ESXiHosts                []esxiHostModel   `tfsdk:"esxi_host"`
	Kubernetes               []kubernetesModel `tfsdk:"kubernetes"`
}

type esxiHostModel struct {
	Name                    types.String `tfsdk:"name"`
	Address                 types.String `tfsdk:"address"`
	Port                    types.Int64  `tfsdk:"port"`
	User                    types.String `tfsdk:"user"`
	Password                types.String `tfsdk:"password"`
	PrivateKey              types.String `tfsdk:"private_key"`
	HostKeyFingerprint      types.String `tfsdk:"host_key_fingerprint"`
	KnownHostsFile          types.String `tfsdk:"known_hosts_file"`
	InsecureIgnoreHostKey   types.Bool   `tfsdk:"insecure_ignore_host_key"`
	MaxSessions             types.Int64  `tfsdk:"max_sessions"`
	StreamsPerDisk          types.Int64  `tfsdk:"streams_per_disk"`
	MaxConcurrentMigrations types.Int64  `tfsdk:"max_concurrent_migrations"`
}

type kubernetesModel struct {
	ConfigPath           types.String `tfsdk:"config_path"`
	ConfigPaths          types.List   `tfsdk:"config_paths"`
	ConfigContext        types.String `tfsdk:"config_context"`
	Host                 types.String `tfsdk:"host"`
	Token                types.String `tfsdk:"token"`
	ClusterCACertificate types.String `tfsdk:"cluster_ca_certificate"`
	ClientCertificate    types.String `tfsdk:"client_certificate"`
	ClientKey            types.String `tfsdk:"client_key"`
	Insecure             types.Bool   `tfsdk:"insecure"`
}

func providerSchema() schema.Schema {
	return schema.Schema{
		MarkdownDescription: "Moves virtual machines off VMware ESXi onto KubeVirt with cold, " +
			"checkpointed migrations. The provider reads source VMs from one or more ESXi hosts over " +
			"SSH and creates DataVolumes and VirtualMachines in a Kubernetes cluster running KubeVirt " +
			"and CDI. Nothing connects while Terraform validates or plans resources that do not need a " +
			"host: connections open on first use.",
		Attributes: map[string]schema.Attribute{
			"work_dir": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Directory on the machine running Terraform where disk data is " +
					"staged while it is copied and converted. It needs free space for the largest disks " +
					"being migrated at once. Defaults to `$" + envWorkDir + "`, else " +
					"`<user cache dir>/terraform-provider-vmmigration`.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"virtio_win": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Where the virtio-win drivers are on the machine running Terraform (a folder or `virtio-win.iso`), " +
					"for the conversion of Windows guests. Defaults to `$" + convert.EnvVirtioWin + "`, else `" + convert.DefaultVirtioWin + "`. " +
					"A Windows migration is refused at plan time when they are missing.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"execution": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Where migrations that do not set their own `execution` do their disk work: " + backticked(engine.Executions) + ". " +
					"`" + engine.ExecutionLocal + "` copies, converts and uploads on the machine running Terraform; `" + engine.ExecutionCluster + "` runs Kubernetes Jobs from `worker_image` " +
					"that copy each disk straight into its DataVolume's claim, so no disk byte passes through this machine. Defaults to `$" + envExecution + "`, else `" + engine.DefaultExecution + "`. " +
					"Changing it never moves a migration that has started: each keeps the execution it was validated with.",
				Validators: []validator.String{stringvalidator.OneOf(engine.Executions...)},
			},
			"worker_image": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The image cluster execution's Jobs run (`make image` builds it), in a registry the cluster pulls from, pinned by digest: " +
					"`registry.example.com/vmmigration/worker@sha256:...`. Required for `execution = \"" + engine.ExecutionCluster + "\"`. Defaults to `$" + envWorkerImage + "`.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"max_concurrent_conversions": schema.Int64Attribute{
				Optional: true,
				MarkdownDescription: fmt.Sprintf("Most guest conversions running at once in the cluster in cluster execution, counted across every "+
					"Terraform run that uses the cluster (each holds one of the cluster's conversion slots, Leases in `vmmigration-system`, "+
					"while its conversion Job runs; each Job runs a helper VM of about 1.5 GiB). Defaults to `%d`.", engine.DefaultMaxConcurrentConversions),
				Validators: []validator.Int64{int64validator.Between(1, 256)},
			},
		},
		Blocks: map[string]schema.Block{
			"esxi_host": schema.ListNestedBlock{
				MarkdownDescription: "An ESXi host that source VMs are read from, reached over SSH. " +
					"Repeat the block for each host; resources and data sources name the host by `name`.",
				NestedObject: schema.NestedBlockObject{Attributes: esxiHostAttributes()},
			},
			"kubernetes": schema.ListNestedBlock{
				MarkdownDescription: "How to reach the destination Kubernetes cluster, with the same " +
					"settings and environment variables as the hashicorp/kubernetes provider. Without " +
					"this block, `$KUBECONFIG` or `~/.kube/config` is used with its current context.",
				Validators:   []validator.List{listvalidator.SizeAtMost(1)},
				NestedObject: schema.NestedBlockObject{Attributes: kubernetesAttributes()},
			},
		},
	}
}

func esxiHostAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"name": schema.StringAttribute{
			Required: true,
			MarkdownDescription: "Name that resources and data sources use to refer to this host " +
				"(lower-case letters, digits, `-` and `_`). Unique among the `esxi_host` blocks.",
			Validators: []validator.String{stringvalidator.RegexMatches(hostNameRE,
				"must be lower-case letters, digits, '-' or '_', starting and ending with a letter or digit, at most 63 characters")},
		},
		"address": schema.StringAttribute{
			Required:            true,
			MarkdownDescription: "Host name or IP address of the ESXi host's SSH service.",
			Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"port": schema.Int64Attribute{
			Optional:            true,
			MarkdownDescription: fmt.Sprintf("SSH port. Defaults to `%d`.", defaultESXiPort),
			Validators:          []validator.Int64{int64validator.Between(1, 65535)},
		},
		"user": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "User to log in as. Defaults to `$" + envESXiUser + "`, else `" +
				defaultESXiUser + "`.",
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"password": schema.StringAttribute{
			Optional:  true,
			Sensitive: true,
			MarkdownDescription: "Password, answered to ESXi's keyboard-interactive prompt (ESXi turns " +
				"the plain password method off). Defaults to `$" + envESXiPassword + "`. A failed " +
				"login is never retried: ESXi locks the account after about ten failures.",
		},
		"private_key": schema.StringAttribute{
			Optional:  true,
			Sensitive: true,
			MarkdownDescription: "Unencrypted private key in PEM or OpenSSH format, for public-key " +
				"login (use `file(\"~/.ssh/id_ecdsa\")`). Defaults to `$" + envESXiPrivateKey + "`. " +
				"ESXi 8 in FIPS mode refuses ed25519 client keys: use ECDSA or RSA of 2048 bits or more.",
		},
		"host_key_fingerprint": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "Pinned SHA256 fingerprint of the host's SSH key, as printed by " +
				"`ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host " +
				"(`SHA256:` followed by 43 base64 characters). Only the pinned key's algorithm is " +
				"negotiated. Conflicts with `known_hosts_file` and `insecure_ignore_host_key`.",
			Validators: []validator.String{stringvalidator.RegexMatches(fingerprintRE,
				"must be 'SHA256:' followed by 43 base64 characters, as printed by ssh-keygen -l")},
		},
		"known_hosts_file": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "OpenSSH known_hosts file that holds the host's key. Defaults to `$" +
				envESXiKnownHosts + "` when neither `host_key_fingerprint` nor " +
				"`insecure_ignore_host_key` is set.",
			Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
		},
		"insecure_ignore_host_key": schema.BoolAttribute{
			Optional: true,
			MarkdownDescription: "**Insecure.** Accept any host key, so that anyone able to intercept " +
				"the connection can read the password and the disks. For throw-away labs only.",
		},
		"max_sessions": schema.Int64Attribute{
			Optional: true,
			MarkdownDescription: fmt.Sprintf("Most SSH exec sessions open at once on this host's single "+
				"connection, shared by every resource and data source in a run. Defaults to `%d`; "+
				"ESXi's sshd allows 10 by default.", defaultMaxSessions),
			Validators: []validator.Int64{int64validator.Between(1, 10)},
		},
		"streams_per_disk": schema.Int64Attribute{
			Optional: true,
			MarkdownDescription: fmt.Sprintf("How many streams read one disk at once while it is copied, "+
				"each on an SSH connection of its own (the host's sshd encrypts a connection on one core, "+
				"about 1-2 Gbit/s). Every stream is a session, counted against `max_sessions` with every "+
				"other command on the host, so it must not exceed it. Defaults to `%d`.", defaultStreamsPerDisk),
			Validators: []validator.Int64{int64validator.Between(1, 10)},
		},
		"max_concurrent_migrations": schema.Int64Attribute{
			Optional: true,
			MarkdownDescription: fmt.Sprintf("Most migrations reading from this host at once, whatever "+
				"Terraform's `-parallelism` is. Defaults to `%d`.", defaultMaxConcurrentMigrations),
			Validators: []validator.Int64{int64validator.Between(1, 64)},
		},
	}
}

func kubernetesAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"config_path": schema.StringAttribute{
			Optional: true,
			MarkdownDescription: "Path to a kubeconfig file. Defaults to `$" + envKubeConfigPath +
				"`, then `$KUBECONFIG`, then `~/.kube/config`.",
		},
		"config_paths": schema.ListAttribute{
			ElementType:         types.StringType,
			Optional:            true,
			MarkdownDescription: "Several kubeconfig files, merged like `$KUBECONFIG`. Conflicts with `config_path`. Defaults to `$" + envKubeConfigPaths + "` (separated by `:`).",
		},
		"config_context": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "Context of the kubeconfig to use. Defaults to `$" + envKubeContext + "`, else the kubeconfig's current context.",
		},
		"host": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "URL of the Kubernetes API server, e.g. `https://10.0.0.1:6443`. Overrides the kubeconfig's. Defaults to `$" + envKubeHost + "`.",
		},
		"token": schema.StringAttribute{
			Optional:            true,
			Sensitive:           true,
			MarkdownDescription: "Bearer token. Defaults to `$" + envKubeToken + "`.",
		},
		"cluster_ca_certificate": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "PEM-encoded CA certificate of the API server. Defaults to `$" + envKubeCACert + "`.",
		},
		"client_certificate": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "PEM-encoded client certificate; needs `client_key`. Defaults to `$" + envKubeClientCert + "`.",
		},
		"client_key": schema.StringAttribute{
			Optional:            true,
			Sensitive:           true,
			MarkdownDescription: "PEM-encoded private key of `client_certificate`. Defaults to `$" + envKubeClientKey + "`.",
		},
		"insecure": schema.BoolAttribute{
			Optional:            true,
			MarkdownDescription: "**Insecure.** Do not verify the API server's certificate. Defaults to `$" + envKubeInsecure + "`.",
		},
	}
}
