package provider

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"golang.org/x/crypto/ssh"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func goodHost() esxiHostModel {
	return esxiHostModel{
		Name:               types.StringValue("esxi-a"),
		Address:            types.StringValue("10.0.0.5"),
		Password:           types.StringValue("s3cret"),
		HostKeyFingerprint: types.StringValue("SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"),
	}
}

func pemKey(t *testing.T, ed bool) string {
	t.Helper()
	var key any
	if ed {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block))
}

func summaries(d diag.Diagnostics) (errs, warns []string) {
	for _, x := range d {
		s := x.Summary() + ": " + x.Detail()
		if x.Severity() == diag.SeverityError {
			errs = append(errs, s)
		} else {
			warns = append(warns, s)
		}
	}
	return errs, warns
}

func TestSettingsDefaultsAndEnv(t *testing.T) {
	h := goodHost()
	h.Password = types.StringNull()
	m := providerModel{ESXiHosts: []esxiHostModel{h}}
	s, d := m.settings(envMap(map[string]string{
		envESXiPassword: "from-env",
		envESXiUser:     "ops",
		envWorkDir:      "/stage",
		envKubeHost:     "https://127.0.0.1:6443",
		envKubeToken:    "tok",
		envKubeInsecure: "true",
	}), true)
	if d.HasError() {
		t.Fatalf("unexpected diagnostics: %v", d)
	}
	got := s.Hosts[0]
	if got.Password != "from-env" || got.User != "ops" || got.Port != 22 || got.MaxSessions != defaultMaxSessions ||
		got.MaxConcurrentMigrations != defaultMaxConcurrentMigrations {
		t.Errorf("host settings = %+v", got)
	}
	if s.WorkDir != "/stage" {
		t.Errorf("work dir = %q, want /stage", s.WorkDir)
	}
	if s.Kubernetes.Host != "https://127.0.0.1:6443" || s.Kubernetes.Token != "tok" || !s.Kubernetes.Insecure {
		t.Errorf("kubernetes settings = %+v", s.Kubernetes)
	}
}

func TestSettingsExplicitBeatsEnv(t *testing.T) {
	h := goodHost()
	h.User = types.StringValue("root")
	m := providerModel{ESXiHosts: []esxiHostModel{h}, WorkDir: types.StringValue("/w")}
	s, _ := m.settings(envMap(map[string]string{envESXiPassword: "env", envESXiUser: "ops", envWorkDir: "/env"}), true)
	if s.Hosts[0].Password != "s3cret" || s.Hosts[0].User != "root" || s.WorkDir != "/w" {
		t.Errorf("explicit values lost: %+v %q", s.Hosts[0], s.WorkDir)
	}
}

func TestSettingsErrors(t *testing.T) {
	dir := t.TempDir()
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*providerModel)
		env    map[string]string
		errs   []string
		warns  []string
	}{
		{name: "valid", mutate: func(*providerModel) {}},
		{
			name:   "no credentials",
			mutate: func(m *providerModel) { m.ESXiHosts[0].Password = types.StringNull() },
			errs: []string{`No credentials for ESXi host: ESXi host "esxi-a" has neither a password nor a private key. ` +
				`Set password (answered to the keyboard-interactive prompt) or private_key, or export $VMMIGRATION_ESXI_PASSWORD or $VMMIGRATION_ESXI_PRIVATE_KEY.`},
		},
		{
			name:   "unknown password is not missing",
			mutate: func(m *providerModel) { m.ESXiHosts[0].Password = types.StringUnknown() },
		},
		{
			name:   "no host key verification",
			mutate: func(m *providerModel) { m.ESXiHosts[0].HostKeyFingerprint = types.StringNull() },
			errs: []string{`No host key verification for ESXi host: ESXi host "esxi-a" has no way to verify its SSH host key. ` +
				"Set host_key_fingerprint (run `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host) or known_hosts_file, " +
				"or export $VMMIGRATION_ESXI_KNOWN_HOSTS. Only for a throw-away lab, set insecure_ignore_host_key = true."},
		},
		{
			name: "known_hosts from env",
			mutate: func(m *providerModel) {
				m.ESXiHosts[0].HostKeyFingerprint = types.StringNull()
			},
			env: map[string]string{envESXiKnownHosts: known},
		},
		{
			name: "missing known_hosts file",
			mutate: func(m *providerModel) {
				m.ESXiHosts[0].HostKeyFingerprint = types.StringNull()
				m.ESXiHosts[0].KnownHostsFile = types.StringValue(filepath.Join(dir, "nope"))
			},
			errs: []string{`Unreadable known_hosts file: ESXi host "esxi-a": known_hosts_file "` + filepath.Join(dir, "nope") +
				`" cannot be read: stat ` + filepath.Join(dir, "nope") + `: no such file or directory. ` +
				"Point it at an OpenSSH known_hosts file that holds the host's key (ssh-keyscan can create one)."},
		},
		{
			name:   "fingerprint and insecure",
			mutate: func(m *providerModel) { m.ESXiHosts[0].InsecureIgnoreHostKey = types.BoolValue(true) },
			errs: []string{`Conflicting host key settings for ESXi host: ESXi host "esxi-a" sets more than one of ` +
				`host_key_fingerprint, known_hosts_file and insecure_ignore_host_key. Choose one.`},
			warns: []string{"ESXi host key is not verified: "},
		},
		{
			name: "insecure alone warns",
			mutate: func(m *providerModel) {
				m.ESXiHosts[0].HostKeyFingerprint = types.StringNull()
				m.ESXiHosts[0].InsecureIgnoreHostKey = types.BoolValue(true)
			},
			warns: []string{`ESXi host key is not verified: ESXi host "esxi-a" accepts any SSH host key`},
		},
		{
			name:   "duplicate names",
			mutate: func(m *providerModel) { m.ESXiHosts = append(m.ESXiHosts, goodHost()) },
			errs: []string{`Duplicate ESXi host name: esxi_host blocks 1 and 2 are both named "esxi-a". ` +
				`Resources and data sources refer to hosts by name, so each name must be unique.`},
		},
		{
			name:   "garbage private key",
			mutate: func(m *providerModel) { m.ESXiHosts[0].PrivateKey = types.StringValue("not a key") },
			errs:   []string{`Invalid ESXi private key: The private key of ESXi host "esxi-a" could not be parsed: ssh: no key found.`},
		},
		{
			name: "client cert without key",
			mutate: func(m *providerModel) {
				m.Kubernetes = []kubernetesModel{{ClientCertificate: types.StringValue("-----BEGIN CERTIFICATE-----\nx")}}
			},
			errs: []string{
				"Invalid Kubernetes setting: kubernetes.host must be set when client_certificate is set without config_path or config_paths",
				"Invalid Kubernetes setting: kubernetes.client_key must be set when client_certificate is set",
				"Invalid Kubernetes setting: kubernetes.client_certificate is not a PEM certificate",
			},
		},
		{
			name: "ca not pem",
			mutate: func(m *providerModel) {
				m.Kubernetes = []kubernetesModel{{ClusterCACertificate: types.StringValue("abc")}}
			},
			errs: []string{
				"Invalid Kubernetes setting: kubernetes.host must be set when cluster_ca_certificate is set without config_path or config_paths",
				"Invalid Kubernetes setting: kubernetes.cluster_ca_certificate is not a PEM certificate",
			},
		},
		{
			name:   "bad KUBE_INSECURE",
			mutate: func(*providerModel) {},
			env:    map[string]string{envKubeInsecure: "yes please"},
			errs:   []string{`Invalid $KUBE_INSECURE: $KUBE_INSECURE is "yes please"; set it to true or false.`},
		},
		{
			name:   "config_path and config_paths",
			mutate: func(m *providerModel) { m.Kubernetes = []kubernetesModel{{ConfigPath: types.StringValue("/a")}} },
			env:    map[string]string{envKubeConfigPaths: "/b:/c"},
			errs:   []string{"Invalid Kubernetes setting: kubernetes.config_paths conflicts with config_path; set only one of them (set in the kubernetes block or its environment variable)."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := providerModel{WorkDir: types.StringValue("/w"), ESXiHosts: []esxiHostModel{goodHost()}}
			tt.mutate(&m)
			_, d := m.settings(envMap(tt.env), true)
			errs, warns := summaries(d)
			checkPrefixes(t, "errors", errs, tt.errs)
			checkPrefixes(t, "warnings", warns, tt.warns)
		})
	}
}

func TestPrivateKeys(t *testing.T) {
	for _, tt := range []struct {
		name string
		ed   bool
		warn string
	}{
		{name: "ecdsa", ed: false},
		{name: "ed25519 warns", ed: true, warn: `ed25519 key may be refused: ESXi host "esxi-a": ESXi 8 in FIPS mode`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := goodHost()
			h.Password = types.StringNull()
			h.PrivateKey = types.StringValue(pemKey(t, tt.ed))
			s, d := providerModel{WorkDir: types.StringValue("/w"), ESXiHosts: []esxiHostModel{h}}.settings(envMap(nil), true)
			errs, warns := summaries(d)
			checkPrefixes(t, "errors", errs, nil)
			var want []string
			if tt.warn != "" {
				want = []string{tt.warn}
			}
			checkPrefixes(t, "warnings", warns, want)
			if !strings.Contains(s.Hosts[0].PrivateKeyPEM, "PRIVATE KEY") {
				t.Errorf("private key not carried into settings")
			}
		})
	}
}

func checkPrefixes(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d %q, want %d %q", what, len(got), got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("%s[%d]:\n got: %s\nwant prefix: %s", what, i, got[i], want[i])
		}
	}
}

func TestSettingsStreamsPerDisk(t *testing.T) {
	for _, tc := range []struct {
		name          string
		max, streams  types.Int64
		want          int
		wantErrSubstr string
	}{
		{"defaults", types.Int64Null(), types.Int64Null(), defaultStreamsPerDisk, ""},
		{"default within a small max_sessions", types.Int64Value(1), types.Int64Null(), 1, ""},
		{"explicit", types.Int64Value(8), types.Int64Value(6), 6, ""},
		{"more than max_sessions", types.Int64Value(2), types.Int64Value(3), 3, "streams_per_disk is 3 but max_sessions is 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHost()
			h.MaxSessions, h.StreamsPerDisk = tc.max, tc.streams
			s, d := providerModel{ESXiHosts: []esxiHostModel{h}, WorkDir: types.StringValue("/w")}.settings(envMap(nil), false)
			errs, _ := summaries(d)
			switch {
			case tc.wantErrSubstr == "" && len(errs) > 0:
				t.Fatalf("errors %v", errs)
			case tc.wantErrSubstr != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.wantErrSubstr)):
				t.Fatalf("errors %v, want one saying %q", errs, tc.wantErrSubstr)
			}
			if got := s.Hosts[0].StreamsPerDisk; got != tc.want {
				t.Errorf("streams per disk %d, want %d", got, tc.want)
			}
		})
	}
}
