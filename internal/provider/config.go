package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/homedir"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// settings is the provider configuration after defaults and environment
// fallbacks, in plain Go types.
type settings struct {
	WorkDir string
	// VirtioWin is where guest conversions find the Windows virtio-win
	// drivers ("" for $VIRTIO_WIN, else the Debian location).
	VirtioWin  string
	Hosts      []hostSettings
	Kubernetes kube.Config
	// Execution is the migrations' execution unless they say
	// (engine.DefaultExecution when unset); WorkerImage the image cluster
	// execution's Jobs run.
	Execution   string
	WorkerImage string
	// MaxConcurrentConversions is cluster execution's conversion limit (0:
	// the engine's default).
	MaxConcurrentConversions int
}

// hostSettings is one ESXi host: how to reach it, and how many migrations
// from it run at once.
type hostSettings struct {
	esxi.HostConfig
	MaxConcurrentMigrations int
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

	s.VirtioWin = m.VirtioWin.ValueString()
	s.Execution = stringOr(m.Execution, env, envExecution, engine.DefaultExecution)
	s.WorkerImage = stringOr(m.WorkerImage, env, envWorkerImage, "")
	s.MaxConcurrentConversions = int(m.MaxConcurrentConversions.ValueInt64())
	if s.Execution == engine.ExecutionCluster && s.WorkerImage == "" && !m.WorkerImage.IsUnknown() {
		diags.AddAttributeError(path.Root("worker_image"), "No worker image for cluster execution",
			"execution is \""+engine.ExecutionCluster+"\", whose Kubernetes Jobs run the worker image: set worker_image (or $"+envWorkerImage+
				") to the image make image builds, pushed to a registry the cluster pulls from and pinned by digest "+
				"(registry.example.com/vmmigration/worker@sha256:...).")
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
		HostConfig: esxi.HostConfig{
			Name:                  h.Name.ValueString(),
			Address:               h.Address.ValueString(),
			Port:                  int(int64Or(h.Port, defaultESXiPort)),
			User:                  stringOr(h.User, env, envESXiUser, defaultESXiUser),
			Password:              stringOr(h.Password, env, envESXiPassword, ""),
			PrivateKeyPEM:         stringOr(h.PrivateKey, env, envESXiPrivateKey, ""),
			HostKeyFingerprint:    h.HostKeyFingerprint.ValueString(),
			KnownHostsFile:        h.KnownHostsFile.ValueString(),
			InsecureIgnoreHostKey: h.InsecureIgnoreHostKey.ValueBool(),
			MaxSessions:           int(int64Or(h.MaxSessions, defaultMaxSessions)),
			StreamsPerDisk:        int(int64Or(h.StreamsPerDisk, defaultStreamsPerDisk)),
		},
		MaxConcurrentMigrations: int(int64Or(h.MaxConcurrentMigrations, defaultMaxConcurrentMigrations)),
	}
	label := hs.Name
	if label == "" {
		label = fmt.Sprintf("#%d", index+1)
	}

	// Every stream is a session: the default fits a smaller max_sessions.
	if h.StreamsPerDisk.IsNull() || h.StreamsPerDisk.IsUnknown() {
		hs.StreamsPerDisk = min(hs.StreamsPerDisk, hs.MaxSessions)
	} else if !h.MaxSessions.IsUnknown() && hs.StreamsPerDisk > hs.MaxSessions {
		diags.AddAttributeError(p.AtName("streams_per_disk"), "Too many streams per disk",
			fmt.Sprintf("ESXi host %q: streams_per_disk is %d but max_sessions is %d. Every stream is an SSH "+
				"session counted against max_sessions: lower streams_per_disk or raise max_sessions.", label, hs.StreamsPerDisk, hs.MaxSessions))
	}

	diags.Append(h.checkCredentials(p, label, hs)...)
	diags.Append(h.checkHostKey(p, label, &hs, env, final)...)
	return hs, diags
}

// checkCredentials: a password or a private key, and a key the provider
// can use. An unknown value (from another resource) counts as set.
func (h esxiHostModel) checkCredentials(p path.Path, label string, hs hostSettings) diag.Diagnostics {
	var diags diag.Diagnostics
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
	return diags
}

// checkHostKey: exactly one way to verify the host's key, or a loud
// opt-out. It fills hs.KnownHostsFile from the environment when nothing is
// set, and expands it (final only).
func (h esxiHostModel) checkHostKey(p path.Path, label string, hs *hostSettings, env func(string) (string, bool), final bool) diag.Diagnostics {
	var diags diag.Diagnostics
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
		expanded, err := homedir.Expand(hs.KnownHostsFile)
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
	return diags
}

func (k kubernetesModel) settings(env func(string) (string, bool)) (kube.Config, diag.Diagnostics) {
	var diags diag.Diagnostics
	p := path.Root("kubernetes").AtListIndex(0)
	ks := kube.Config{
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
	for _, e := range ks.Validate() {
		diags.AddAttributeError(p.AtName(e.Attribute), "Invalid Kubernetes setting",
			fmt.Sprintf("kubernetes.%s %s (set in the kubernetes block or its environment variable).", e.Attribute, e.Detail))
	}
	return ks, diags
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
