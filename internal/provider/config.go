package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// Environment variables read when the matching attribute is not set. The
// ESXi ones apply to every esxi_host block that leaves the attribute unset.
const (
	envWorkDir        = "VMMIGRATION_WORK_DIR"
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
	defaultMaxConcurrentMigrations = 2
)

var (
	hostNameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`)
	fingerprintRE = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}=?$`)
)

type providerModel struct {
	WorkDir    types.String      `tfsdk:"work_dir"`
	ESXiHosts  []esxiHostModel   `tfsdk:"esxi_host"`
	Kubernetes []kubernetesModel `tfsdk:"kubernetes"`
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

// settings is the provider configuration after defaults and environment
// fallbacks, in plain Go types.
type settings struct {
	WorkDir    string
	Hosts      []hostSettings
	Kubernetes kubeSettings
}

type hostSettings struct {
	Name                    string
	Address                 string
	Port                    int
	User                    string
	Password                string
	PrivateKeyPEM           string
	HostKeyFingerprint      string
	KnownHostsFile          string
	InsecureIgnoreHostKey   bool
	MaxSessions             int
	MaxConcurrentMigrations int
}

type kubeSettings struct {
	ConfigPath           string
	ConfigPaths          []string
	ConfigContext        string
	Host                 string
	Token                string
	ClusterCACertificate string
	ClientCertificate    string
	ClientKey            string
	Insecure             bool
}

// lookupEnv is os.LookupEnv; tests pass their own.
var lookupEnv = os.LookupEnv

// settings applies defaults and environment fallbacks and checks the
// combinations a single attribute's validators cannot see. With final unset
// (plan time), checks that depend on unknown values are left for Configure.
func (m providerModel) settings(env func(string) (string, bool), final bool) (settings, diag.Diagnostics) {
	var diags diag.Diagnostics
	var s settings

	s.WorkDir = stringOr(m.WorkDir, env, envWorkDir, "")
	if s.WorkDir == "" && final {
		dir, err := os.UserCacheDir()
		if err != nil {
			diags.AddAttributeError(path.Root("work_dir"), "No work directory",
				"The provider needs a directory to stage disk data in and found no user cache directory: "+
					"set work_dir or $"+envWorkDir+". "+err.Error())
		}
		s.WorkDir = filepath.Join(dir, "terraform-provider-vmmigration")
	}

	seen := map[string]int{}
	for i, h := range m.ESXiHosts {
		p := path.Root("esxi_host").AtListIndex(i)
		hs, hd := h.settings(i, env, final)
		diags.Append(hd...)
		if hs.Name != "" {
			if j, dup := seen[hs.Name]; dup {
				diags.AddAttributeError(p.AtName("name"), "Duplicate ESXi host name",
					fmt.Sprintf("esxi_host blocks %d and %d are both named %q. Resources and data sources "+
						"refer to hosts by name, so each name must be unique.", j+1, i+1, hs.Name))
			}
			seen[hs.Name] = i
		}
		s.Hosts = append(s.Hosts, hs)
	}

	var k kubernetesModel
	if len(m.Kubernetes) > 0 {
		k = m.Kubernetes[0]
	}
	ks, kd := k.settings(env)
	diags.Append(kd...)
	s.Kubernetes = ks
	return s, diags
}

func (h esxiHostModel) settings(index int, env func(string) (string, bool), final bool) (hostSettings, diag.Diagnostics) {
	var diags diag.Diagnostics
	p := path.Root("esxi_host").AtListIndex(index)
	hs := hostSettings{
		Name:                    h.Name.ValueString(),
		Address:                 h.Address.ValueString(),
		Port:                    int(int64Or(h.Port, defaultESXiPort)),
		User:                    stringOr(h.User, env, envESXiUser, defaultESXiUser),
		Password:                stringOr(h.Password, env, envESXiPassword, ""),
		PrivateKeyPEM:           stringOr(h.PrivateKey, env, envESXiPrivateKey, ""),
		HostKeyFingerprint:      h.HostKeyFingerprint.ValueString(),
		KnownHostsFile:          h.KnownHostsFile.ValueString(),
		InsecureIgnoreHostKey:   h.InsecureIgnoreHostKey.ValueBool(),
		MaxSessions:             int(int64Or(h.MaxSessions, defaultMaxSessions)),
		MaxConcurrentMigrations: int(int64Or(h.MaxConcurrentMigrations, defaultMaxConcurrentMigrations)),
	}
	label := hs.Name
	if label == "" {
		label = fmt.Sprintf("#%d", index+1)
	}

	// Credentials. An unknown value (from another resource) counts as set.
	credsUnknown := h.Password.IsUnknown() || h.PrivateKey.IsUnknown()
	if hs.Password == "" && hs.PrivateKeyPEM == "" && !credsUnknown {
		diags.AddAttributeError(p, "No credentials for ESXi host",
			fmt.Sprintf("ESXi host %q has neither a password nor a private key. Set password "+
				"(answered to the keyboard-interactive prompt) or private_key, or export $%s or $%s.",
				label, envESXiPassword, envESXiPrivateKey))
	}
	if hs.PrivateKeyPEM != "" {
		signer, err := ssh.ParsePrivateKey([]byte(hs.PrivateKeyPEM))
		switch {
		case err != nil:
			var missing *ssh.PassphraseMissingError
			detail := fmt.Sprintf("The private key of ESXi host %q could not be parsed: %v. Give an "+
				"unencrypted key in PEM or OpenSSH format, e.g. private_key = file(\"~/.ssh/id_ecdsa\").", label, err)
			if errors.As(err, &missing) {
				detail = fmt.Sprintf("The private key of ESXi host %q is encrypted with a passphrase, "+
					"which the provider cannot prompt for. Give an unencrypted key (for example one "+
					"created for automation with `ssh-keygen -t ecdsa -N ''`).", label)
			}
			diags.AddAttributeError(p.AtName("private_key"), "Invalid ESXi private key", detail)
		case signer.PublicKey().Type() == ssh.KeyAlgoED25519:
			diags.AddAttributeWarning(p.AtName("private_key"), "ed25519 key may be refused",
				fmt.Sprintf("ESXi host %q: ESXi 8 in FIPS mode (the default on 8.0 U2 and later) refuses "+
					"ed25519 client keys. If login fails, use an ECDSA or RSA (2048 bits or more) key.", label))
		}
	}

	// Host key verification: exactly one way, or a loud opt-out.
	if hs.KnownHostsFile == "" && hs.HostKeyFingerprint == "" && !hs.InsecureIgnoreHostKey && !h.HostKeyFingerprint.IsUnknown() && !h.KnownHostsFile.IsUnknown() {
		hs.KnownHostsFile, _ = env(envESXiKnownHosts)
	}
	ways := 0
	for _, set := range []bool{
		hs.HostKeyFingerprint != "" || h.HostKeyFingerprint.IsUnknown(),
		hs.KnownHostsFile != "" || h.KnownHostsFile.IsUnknown(),
		hs.InsecureIgnoreHostKey || h.InsecureIgnoreHostKey.IsUnknown(),
	} {
		if set {
			ways++
		}
	}
	switch {
	case ways == 0:
		diags.AddAttributeError(p, "No host key verification for ESXi host",
			fmt.Sprintf("ESXi host %q has no way to verify its SSH host key. Set host_key_fingerprint "+
				"(run `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host) or known_hosts_file, "+
				"or export $%s. Only for a throw-away lab, set insecure_ignore_host_key = true.", label, envESXiKnownHosts))
	case ways > 1:
		diags.AddAttributeError(p, "Conflicting host key settings for ESXi host",
			fmt.Sprintf("ESXi host %q sets more than one of host_key_fingerprint, known_hosts_file and "+
				"insecure_ignore_host_key. Choose one.", label))
	}
	if hs.InsecureIgnoreHostKey {
		diags.AddAttributeWarning(p.AtName("insecure_ignore_host_key"), "ESXi host key is not verified",
			fmt.Sprintf("ESXi host %q accepts any SSH host key: whoever can intercept the connection can "+
				"read its password and every disk copied from it. Pin host_key_fingerprint before "+
				"migrating production VMs.", label))
	}
	if final && hs.KnownHostsFile != "" {
		expanded, err := expandHome(hs.KnownHostsFile)
		if err == nil {
			_, err = os.Stat(expanded)
		}
		if err != nil {
			diags.AddAttributeError(p.AtName("known_hosts_file"), "Unreadable known_hosts file",
				fmt.Sprintf("ESXi host %q: known_hosts_file %q cannot be read: %v. Point it at an OpenSSH "+
					"known_hosts file that holds the host's key (ssh-keyscan can create one).", label, hs.KnownHostsFile, err))
		}
		hs.KnownHostsFile = expanded
	}
	return hs, diags
}

func (k kubernetesModel) settings(env func(string) (string, bool)) (kubeSettings, diag.Diagnostics) {
	var diags diag.Diagnostics
	p := path.Root("kubernetes").AtListIndex(0)
	ks := kubeSettings{
		ConfigPath:           stringOr(k.ConfigPath, env, envKubeConfigPath, ""),
		ConfigContext:        stringOr(k.ConfigContext, env, envKubeContext, ""),
		Host:                 stringOr(k.Host, env, envKubeHost, ""),
		Token:                stringOr(k.Token, env, envKubeToken, ""),
		ClusterCACertificate: stringOr(k.ClusterCACertificate, env, envKubeCACert, ""),
		ClientCertificate:    stringOr(k.ClientCertificate, env, envKubeClientCert, ""),
		ClientKey:            stringOr(k.ClientKey, env, envKubeClientKey, ""),
	}
	if !k.ConfigPaths.IsNull() && !k.ConfigPaths.IsUnknown() {
		for _, e := range k.ConfigPaths.Elements() {
			if s, ok := e.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
				ks.ConfigPaths = append(ks.ConfigPaths, s.ValueString())
			}
		}
	} else if v, ok := env(envKubeConfigPaths); ok && v != "" {
		ks.ConfigPaths = filepath.SplitList(v)
	}
	if !k.Insecure.IsNull() {
		ks.Insecure = k.Insecure.ValueBool()
	} else if v, ok := env(envKubeInsecure); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			diags.AddAttributeError(p.AtName("insecure"), "Invalid $"+envKubeInsecure,
				fmt.Sprintf("$%s is %q; set it to true or false.", envKubeInsecure, v))
		}
		ks.Insecure = b
	}
	for _, e := range ks.kubeConfig().Validate() {
		diags.AddAttributeError(p.AtName(e.Attribute), "Invalid Kubernetes setting",
			fmt.Sprintf("kubernetes.%s %s (set in the kubernetes block or its environment variable).", e.Attribute, e.Detail))
	}
	return ks, diags
}

// kubeConfig is the settings in the Kubernetes client's terms.
func (ks kubeSettings) kubeConfig() kube.Config {
	return kube.Config{
		ConfigPath:           ks.ConfigPath,
		ConfigPaths:          ks.ConfigPaths,
		ConfigContext:        ks.ConfigContext,
		Host:                 ks.Host,
		Token:                ks.Token,
		ClusterCACertificate: ks.ClusterCACertificate,
		ClientCertificate:    ks.ClientCertificate,
		ClientKey:            ks.ClientKey,
		Insecure:             ks.Insecure,
	}
}

func stringOr(v types.String, env func(string) (string, bool), envName, def string) string {
	if !v.IsNull() && !v.IsUnknown() {
		return v.ValueString()
	}
	if envName != "" {
		if e, ok := env(envName); ok && e != "" {
			return e
		}
	}
	return def
}

func int64Or(v types.Int64, def int64) int64 {
	if v.IsNull() || v.IsUnknown() {
		return def
	}
	return v.ValueInt64()
}

func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}
