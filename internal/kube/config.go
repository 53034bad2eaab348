// Package kube is the provider's Kubernetes client: connection settings that
// mirror the hashicorp/kubernetes provider's, a lazily connected client, and
// small typed helpers for the KubeVirt and CDI objects the migration engine
// manages, with errors classified once, here.
package kube

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/homedir"
)

// Attribute names of the connection settings, as the provider's schema
// spells them; ConfigError.Attribute is one of these.
const (
	AttrConfigPath           = "config_path"
	AttrConfigPaths          = "config_paths"
	AttrConfigContext        = "config_context"
	AttrHost                 = "host"
	AttrToken                = "token"
	AttrClusterCACertificate = "cluster_ca_certificate"
	AttrClientCertificate    = "client_certificate"
	AttrClientKey            = "client_key"
	AttrInsecure             = "insecure"
)

// UserAgent is sent with every request.
const UserAgent = "terraform-provider-vmmigration"

// Config holds the connection settings. They work like the hashicorp/kubernetes
// provider's: a kubeconfig (ConfigPath, or ConfigPaths merged in order) with
// an optional context, and explicit fields that override what the kubeconfig
// says for the selected context.
//
// When neither a kubeconfig path nor any of Host, Token,
// ClusterCACertificate, ClientCertificate and ClientKey is set, the
// kubeconfig is found like kubectl finds it: $KUBECONFIG (a list), else
// ~/.kube/config. A ConfigContext alone also selects that default
// kubeconfig. When Host (and credentials) are set without a path, no
// kubeconfig is read at all.
type Config struct {
	ConfigPath    string
	ConfigPaths   []string
	ConfigContext string

	// Host is the API server's URL (https://host:port) or host:port.
	Host string
	// Token is a bearer token.
	Token string
	// ClusterCACertificate, ClientCertificate and ClientKey are PEM.
	ClusterCACertificate string
	ClientCertificate    string
	ClientKey            string
	// Insecure skips verifying the API server's certificate.
	Insecure bool
}

// ConfigError is a problem with one connection setting.
type ConfigError struct {
	// Attribute is the setting to fix (one of the Attr constants).
	Attribute string
	// Detail says what is wrong and what to do.
	Detail string
	// Err is the underlying error, if any.
	Err error
}

func (e *ConfigError) Error() string {
	if e.Err != nil {
		return e.Attribute + ": " + e.Detail + ": " + e.Err.Error()
	}
	return e.Attribute + ": " + e.Detail
}

func (e *ConfigError) Unwrap() error { return e.Err }

func (c Config) usesStaticFields() bool {
	return c.Host != "" || c.Token != "" || c.ClusterCACertificate != "" || c.ClientCertificate != "" || c.ClientKey != ""
}

func (c Config) explicitPaths() []string {
	if c.ConfigPath != "" {
		return []string{c.ConfigPath}
	}
	return c.ConfigPaths
}

// usesKubeconfig reports whether RESTConfig reads kubeconfig files.
func (c Config) usesKubeconfig() bool {
	return len(c.explicitPaths()) > 0 || c.ConfigContext != "" || !c.usesStaticFields()
}

// Validate checks the settings without reading files or using the network,
// as is possible at plan time. It returns one error per problem; each names
// the attribute to fix.
func (c Config) Validate() []*ConfigError {
	var errs []*ConfigError
	add := func(attr, format string, args ...any) {
		errs = append(errs, &ConfigError{Attribute: attr, Detail: fmt.Sprintf(format, args...)})
	}
	if c.ConfigPath != "" && len(c.ConfigPaths) > 0 {
		add(AttrConfigPaths, "conflicts with config_path; set only one of them")
	}
	if slices.Contains(c.ConfigPaths, "") {
		add(AttrConfigPaths, "contains an empty path")
	}
	if c.Host != "" {
		if u, _, err := rest.DefaultServerURL(c.Host, "", schema.GroupVersion{}, true); err != nil {
			add(AttrHost, "is not a valid URL or host:port (%v)", err)
		} else if u.Scheme != "https" && u.Scheme != "http" {
			add(AttrHost, "must use https (or http), not %s", u.Scheme)
		}
	}
	if c.Host == "" && c.usesStaticFields() && len(c.explicitPaths()) == 0 && c.ConfigContext == "" {
		// No kubeconfig is read, so nothing else can supply the host.
		var set []string
		for _, f := range []struct{ attr, v string }{
			{AttrToken, c.Token}, {AttrClusterCACertificate, c.ClusterCACertificate},
			{AttrClientCertificate, c.ClientCertificate}, {AttrClientKey, c.ClientKey},
		} {
			if f.v != "" {
				set = append(set, f.attr)
			}
		}
		add(AttrHost, "must be set when %s is set without config_path or config_paths", strings.Join(set, ", "))
	}
	if c.ClusterCACertificate != "" {
		if err := CheckCertificatesPEM(c.ClusterCACertificate); err != nil {
			add(AttrClusterCACertificate, "is not a PEM certificate: %v", err)
		}
		if c.Insecure {
			add(AttrInsecure, "conflicts with cluster_ca_certificate: either verify the server with the CA or skip verification, not both")
		}
	}
	switch {
	case c.ClientCertificate != "" && c.ClientKey == "":
		add(AttrClientKey, "must be set when client_certificate is set")
	case c.ClientKey != "" && c.ClientCertificate == "":
		add(AttrClientCertificate, "must be set when client_key is set")
	}
	certOK := true
	if c.ClientCertificate != "" {
		if err := CheckCertificatesPEM(c.ClientCertificate); err != nil {
			certOK = false
			add(AttrClientCertificate, "is not a PEM certificate: %v", err)
		}
	}
	if c.ClientKey != "" {
		if b, _ := pem.Decode([]byte(c.ClientKey)); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
			certOK = false
			add(AttrClientKey, "is not a PEM private key")
		}
	}
	if certOK && c.ClientCertificate != "" && c.ClientKey != "" {
		if _, err := tls.X509KeyPair([]byte(c.ClientCertificate), []byte(c.ClientKey)); err != nil {
			add(AttrClientKey, "does not match client_certificate (%v)", err)
		}
	}
	return errs
}

// checkCertificates checks that s is one or more PEM certificates.
func CheckCertificatesPEM(s string) error {
	rest := []byte(s)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("found a %q PEM block, want CERTIFICATE", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM data found")
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return errors.New("unexpected data after the last PEM block")
	}
	return nil
}

// RESTConfig resolves the settings into a client configuration. It reads the
// kubeconfig files, if any, but does not contact the server.
func (c Config) RESTConfig() (*rest.Config, error) {
	if errs := c.Validate(); len(errs) > 0 {
		return nil, errs[0]
	}

	overrides := &clientcmd.ConfigOverrides{}
	if c.Host != "" {
		// Overrides are applied too late for client-go to add a scheme, so
		// complete the URL here (as the kubernetes provider does).
		u, _, _ := rest.DefaultServerURL(c.Host, "", schema.GroupVersion{}, true)
		overrides.ClusterInfo.Server = u.String()
	}
	if c.ClusterCACertificate != "" {
		overrides.ClusterInfo.CertificateAuthorityData = []byte(c.ClusterCACertificate)
	}
	if c.Insecure {
		overrides.ClusterInfo.InsecureSkipTLSVerify = true
	}
	if c.ClientCertificate != "" {
		overrides.AuthInfo.ClientCertificateData = []byte(c.ClientCertificate)
	}
	if c.ClientKey != "" {
		overrides.AuthInfo.ClientKeyData = []byte(c.ClientKey)
	}
	if c.Token != "" {
		overrides.AuthInfo.Token = c.Token
	}

	var cfg *rest.Config
	if !c.usesKubeconfig() {
		cc := clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), overrides)
		var err error
		if cfg, err = cc.ClientConfig(); err != nil {
			return nil, &ConfigError{Attribute: AttrHost, Detail: "invalid connection settings", Err: err}
		}
	} else {
		var err error
		if cfg, err = c.fromKubeconfig(overrides); err != nil {
			return nil, err
		}
	}
	cfg.UserAgent = UserAgent
	cfg.QPS = 50
	cfg.Burst = 100
	return cfg, nil
}

// fromKubeconfig loads the kubeconfig files and applies overrides.
func (c Config) fromKubeconfig(overrides *clientcmd.ConfigOverrides) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	pathAttr := AttrConfigPath
	paths := c.explicitPaths()
	var looked string
	switch {
	case c.ConfigPath != "":
		p, err := homedir.Expand(c.ConfigPath)
		if err != nil {
			return nil, &ConfigError{Attribute: AttrConfigPath, Detail: "cannot expand ~", Err: err}
		}
		if _, err := os.Stat(p); err != nil {
			return nil, &ConfigError{Attribute: AttrConfigPath, Detail: fmt.Sprintf("cannot read kubeconfig %q", p), Err: err}
		}
		rules.ExplicitPath = p
		looked = p
	case len(paths) > 0:
		pathAttr = AttrConfigPaths
		for _, p := range paths {
			e, err := homedir.Expand(p)
			if err != nil {
				return nil, &ConfigError{Attribute: AttrConfigPaths, Detail: "cannot expand ~", Err: err}
			}
			if _, err := os.Stat(e); err != nil {
				return nil, &ConfigError{Attribute: AttrConfigPaths, Detail: fmt.Sprintf("cannot read kubeconfig %q", e), Err: err}
			}
			rules.Precedence = append(rules.Precedence, e)
		}
		looked = strings.Join(rules.Precedence, ", ")
	default:
		if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
			rules.Precedence = filepath.SplitList(env)
			looked = "$KUBECONFIG (" + env + ")"
		} else if home, err := os.UserHomeDir(); err == nil {
			rules.Precedence = []string{filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
			looked = rules.Precedence[0]
		}
	}
	if c.ConfigContext != "" {
		overrides.CurrentContext = c.ConfigContext
	}

	raw, err := rules.Load()
	if err != nil {
		return nil, &ConfigError{Attribute: pathAttr, Detail: "cannot load kubeconfig", Err: err}
	}
	if c.ConfigContext != "" {
		if _, ok := raw.Contexts[c.ConfigContext]; !ok {
			return nil, &ConfigError{Attribute: AttrConfigContext, Detail: fmt.Sprintf(
				"context %q not found in kubeconfig %s (contexts: %s)", c.ConfigContext, looked, contextNames(raw))}
		}
	}
	if len(paths) == 0 && clientcmdapi.IsConfigEmpty(raw) && !c.usesStaticFields() {
		if looked == "" {
			looked = "~/.kube/config"
		}
		return nil, &ConfigError{Attribute: AttrConfigPath, Detail: fmt.Sprintf(
			"no Kubernetes connection settings: set config_path, or host with credentials (found no kubeconfig at %s)", looked)}
	}
	cc := clientcmd.NewDefaultClientConfig(*raw, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		attr := pathAttr
		if clientcmd.IsEmptyConfig(err) || raw.CurrentContext == "" && c.ConfigContext == "" {
			attr = AttrConfigContext
			return nil, &ConfigError{Attribute: attr, Detail: fmt.Sprintf(
				"kubeconfig %s sets no current context; set config_context (contexts: %s)", looked, contextNames(raw))}
		}
		return nil, &ConfigError{Attribute: attr, Detail: fmt.Sprintf("invalid kubeconfig %s", looked), Err: err}
	}
	return cfg, nil
}

func contextNames(cfg *clientcmdapi.Config) string {
	var names []string
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
