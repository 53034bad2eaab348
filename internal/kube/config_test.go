package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPEM is a self-signed certificate with its key, and an unrelated key.
type testPEM struct {
	cert, key, otherKey string
}

func newTestPEM(t *testing.T) testPEM {
	t.Helper()
	keyPEM := func() (*ecdsa.PrivateKey, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		return k, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	k, kp := keyPEM()
	_, other := keyPEM()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	return testPEM{cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), key: kp, otherKey: other}
}

func TestValidate(t *testing.T) {
	p := newTestPEM(t)
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"nothing set (default kubeconfig)", Config{}, nil},
		{"host and token", Config{Host: "https://k:6443", Token: "t", ClusterCACertificate: p.cert}, nil},
		{"host and client cert", Config{Host: "k:6443", ClientCertificate: p.cert, ClientKey: p.key, Insecure: true}, nil},
		{"token overrides kubeconfig user", Config{ConfigPath: "kc", Token: "t"}, nil},
		{"context alone", Config{ConfigContext: "c", Token: "t"}, nil},
		{"both path forms", Config{ConfigPath: "a", ConfigPaths: []string{"b"}},
			[]string{"config_paths: conflicts with config_path; set only one of them"}},
		{"empty path in list", Config{ConfigPaths: []string{"a", ""}},
			[]string{"config_paths: contains an empty path"}},
		{"token without host", Config{Token: "t"},
			[]string{"host: must be set when token is set without config_path or config_paths"}},
		{"credentials without host", Config{Token: "t", ClusterCACertificate: p.cert},
			[]string{"host: must be set when token, cluster_ca_certificate is set without config_path or config_paths"}},
		{"bad host", Config{Host: "https://k:abc", Token: "t"},
			[]string{`host: is not a valid URL or host:port (host must be a URL or a host:port pair: "https://k:abc")`}},
		{"bad scheme", Config{Host: "ftp://k", Token: "t"},
			[]string{"host: must use https (or http), not ftp"}},
		{"client cert without key", Config{Host: "k", ClientCertificate: p.cert},
			[]string{"client_key: must be set when client_certificate is set"}},
		{"client key without cert", Config{Host: "k", ClientKey: p.key},
			[]string{"client_certificate: must be set when client_key is set"}},
		{"unparsable CA", Config{Host: "k", ClusterCACertificate: "not pem"},
			[]string{"cluster_ca_certificate: is not a PEM certificate: no PEM data found"}},
		{"key given as CA", Config{Host: "k", ClusterCACertificate: p.key},
			[]string{`cluster_ca_certificate: is not a PEM certificate: found a "PRIVATE KEY" PEM block, want CERTIFICATE`}},
		{"trailing junk after CA", Config{Host: "k", ClusterCACertificate: p.cert + "junk"},
			[]string{"cluster_ca_certificate: is not a PEM certificate: unexpected data after the last PEM block"}},
		{"CA and insecure", Config{Host: "k", ClusterCACertificate: p.cert, Insecure: true},
			[]string{"insecure: conflicts with cluster_ca_certificate: either verify the server with the CA or skip verification, not both"}},
		{"unparsable client key", Config{Host: "k", ClientCertificate: p.cert, ClientKey: "nope"},
			[]string{"client_key: is not a PEM private key"}},
		{"mismatched key", Config{Host: "k", ClientCertificate: p.cert, ClientKey: p.otherKey},
			[]string{"client_key: does not match client_certificate (tls: private key does not match public key)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, e := range tt.cfg.Validate() {
				got = append(got, e.Error())
				if !strings.HasPrefix(e.Error(), e.Attribute+": ") {
					t.Errorf("error %q does not start with its attribute %q", e, e.Attribute)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Validate() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

const kubeconfigTmpl = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443", insecure-skip-tls-verify: true}
- name: b
  cluster: {server: "https://b.example:6443", insecure-skip-tls-verify: true}
users:
- name: ua
  user: {token: token-a}
- name: ub
  user: {token: token-b}
contexts:
- name: ctx-a
  context: {cluster: a, user: ua}
- name: ctx-b
  context: {cluster: b, user: ub}
current-context: CURRENT
`

func writeKubeconfig(t *testing.T, dir, current string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig-"+current)
	if err := os.WriteFile(p, []byte(strings.Replace(kubeconfigTmpl, "CURRENT", current, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRESTConfig(t *testing.T) {
	p := newTestPEM(t)
	dir := t.TempDir()
	kcA := writeKubeconfig(t, dir, "ctx-a")
	kcB := writeKubeconfig(t, dir, "ctx-b")
	kcNone := writeKubeconfig(t, dir, `""`)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".kube", "config"), []byte(strings.Replace(kubeconfigTmpl, "CURRENT", "ctx-b", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyHome := t.TempDir()

	tests := []struct {
		name       string
		cfg        Config
		kubeconfig string // $KUBECONFIG
		home       string // $HOME
		wantHost   string
		wantToken  string
		wantErr    string
	}{
		{name: "kubeconfig current context", cfg: Config{ConfigPath: kcA}, wantHost: "https://a.example:6443", wantToken: "token-a"},
		{name: "kubeconfig other context", cfg: Config{ConfigPath: kcA, ConfigContext: "ctx-b"}, wantHost: "https://b.example:6443", wantToken: "token-b"},
		{name: "config_paths merge, first wins", cfg: Config{ConfigPaths: []string{kcB, kcA}}, wantHost: "https://b.example:6443", wantToken: "token-b"},
		{name: "explicit token overrides kubeconfig user", cfg: Config{ConfigPath: kcA, Token: "mine"}, wantHost: "https://a.example:6443", wantToken: "mine"},
		{name: "explicit host overrides kubeconfig cluster", cfg: Config{ConfigPath: kcA, Host: "c.example:443"}, wantHost: "https://c.example:443", wantToken: "token-a"},
		{name: "host, token and CA only", cfg: Config{Host: "https://k.example:6443", Token: "t", ClusterCACertificate: p.cert}, kubeconfig: kcA, wantHost: "https://k.example:6443", wantToken: "t"},
		{name: "$KUBECONFIG by default", cfg: Config{}, kubeconfig: kcA, home: home, wantHost: "https://a.example:6443", wantToken: "token-a"},
		{name: "$KUBECONFIG list", cfg: Config{}, kubeconfig: filepath.Join(dir, "missing") + string(os.PathListSeparator) + kcB, home: home, wantHost: "https://b.example:6443", wantToken: "token-b"},
		{name: "~/.kube/config by default", cfg: Config{}, home: home, wantHost: "https://b.example:6443", wantToken: "token-b"},
		{name: "context with default kubeconfig", cfg: Config{ConfigContext: "ctx-a"}, home: home, wantHost: "https://a.example:6443", wantToken: "token-a"},
		{name: "~ expanded", cfg: Config{ConfigPath: "~/.kube/config"}, home: home, wantHost: "https://b.example:6443", wantToken: "token-b"},

		{name: "missing kubeconfig file", cfg: Config{ConfigPath: filepath.Join(dir, "nope")},
			wantErr: `config_path: cannot read kubeconfig "` + filepath.Join(dir, "nope") + `": stat ` + filepath.Join(dir, "nope") + `: no such file or directory`},
		{name: "missing file in config_paths", cfg: Config{ConfigPaths: []string{kcA, filepath.Join(dir, "nope")}},
			wantErr: `config_paths: cannot read kubeconfig "` + filepath.Join(dir, "nope") + `": stat ` + filepath.Join(dir, "nope") + `: no such file or directory`},
		{name: "unknown context", cfg: Config{ConfigPath: kcA, ConfigContext: "ctx-z"},
			wantErr: `config_context: context "ctx-z" not found in kubeconfig ` + kcA + ` (contexts: ctx-a, ctx-b)`},
		{name: "no current context", cfg: Config{ConfigPath: kcNone},
			wantErr: "config_context: kubeconfig " + kcNone + " sets no current context; set config_context (contexts: ctx-a, ctx-b)"},
		{name: "nothing configured anywhere", cfg: Config{}, home: emptyHome,
			wantErr: "config_path: no Kubernetes connection settings: set config_path, or host with credentials (found no kubeconfig at " + filepath.Join(emptyHome, ".kube", "config") + ")"},
		{name: "invalid combination is reported first", cfg: Config{Token: "t"},
			wantErr: "host: must be set when token is set without config_path or config_paths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.kubeconfig)
			h := tt.home
			if h == "" {
				h = emptyHome
			}
			t.Setenv("HOME", h)
			got, err := tt.cfg.RESTConfig()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("RESTConfig() error =\n%v\nwant\n%s", err, tt.wantErr)
				}
				if Classify(err) != NeedsHuman {
					t.Errorf("Classify(%v) = %v, want needs-human", err, Classify(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Host != tt.wantHost || got.BearerToken != tt.wantToken {
				t.Errorf("host, token = %q, %q; want %q, %q", got.Host, got.BearerToken, tt.wantHost, tt.wantToken)
			}
			if got.UserAgent != UserAgent {
				t.Errorf("UserAgent = %q", got.UserAgent)
			}
		})
	}
}
