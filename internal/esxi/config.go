package esxi

import (
	"encoding/base64"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// HostConfig describes how to reach one ESXi host. Password and
// PrivateKeyPEM are secrets: they are never logged and never put on a
// command line.
type HostConfig struct {
	// Name identifies the host in the provider configuration and in every
	// error message.
	Name string
	// Address is the host name or IP address of the host's SSH service.
	Address string
	// Port defaults to 22.
	Port int
	// User defaults to "root".
	User string
	// Password is answered to every keyboard-interactive prompt (ESXi
	// refuses the plain "password" method).
	Password string
	// PrivateKeyPEM is an unencrypted private key (RSA >= 2048 bits or
	// ECDSA; ESXi 8 in FIPS mode refuses ed25519 client keys).
	PrivateKeyPEM string
	// HostKeyFingerprint pins the host key: "SHA256:<base64>" as printed by
	// `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host.
	HostKeyFingerprint string
	// KnownHostsFile verifies the host key against an OpenSSH known_hosts file.
	KnownHostsFile string
	// InsecureIgnoreHostKey skips host key verification. Lab use only: it
	// lets anyone on the network path impersonate the host and capture the
	// password.
	InsecureIgnoreHostKey bool
	// MaxSessions bounds concurrent exec sessions on the one connection
	// (default 4, at most 10, sshd's MaxSessions default).
	MaxSessions int
	// StreamsPerDisk is how many streams read one disk at once during a
	// copy, each on its own SSH connection and all within MaxSessions
	// (0 means 1; see Client.StreamClients).
	StreamsPerDisk int
	// KeepAliveInterval between keepalive@openssh.com requests (default 30s;
	// ESXi drops silent clients after about 600s). Negative disables them.
	KeepAliveInterval time.Duration
	// DialTimeout bounds the TCP connect plus SSH handshake and
	// authentication (default 30s).
	DialTimeout time.Duration
}

// Defaults applied by [HostConfig.Validate].
const (
	DefaultPort              = 22
	DefaultUser              = "root"
	DefaultMaxSessions       = 4
	MaxMaxSessions           = 10
	DefaultKeepAliveInterval = 30 * time.Second
	DefaultDialTimeout       = 30 * time.Second
)

// withDefaults returns cfg with zero fields defaulted.
func (cfg HostConfig) withDefaults() HostConfig {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.StreamsPerDisk == 0 {
		cfg.StreamsPerDisk = 1
	}
	if cfg.KeepAliveInterval == 0 {
		cfg.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	cfg.HostKeyFingerprint = normalizeFingerprint(cfg.HostKeyFingerprint)
	return cfg
}

func normalizeFingerprint(fp string) string {
	fp = strings.TrimSpace(fp)
	if strings.HasPrefix(strings.ToUpper(fp), "SHA256:") {
		fp = "SHA256:" + strings.TrimRight(fp[len("SHA256:"):], "=")
	}
	return fp
}

// addr is host:port.
func (cfg HostConfig) addr() string {
	return net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
}

// Validate checks cfg without connecting and returns the error a user should
// see. It is what [Registry.Add] runs at configure time.
func (cfg HostConfig) Validate() error {
	_, err := cfg.withDefaults().validate()
	return err
}

func (cfg HostConfig) validate() (ssh.Signer, error) {
	bad := func(format string, args ...any) error {
		e := errorf(nil, format, args...)
		e.Host = cfg.Name
		e.Op = "configuration"
		return e
	}
	if cfg.Name == "" {
		return nil, bad("host name is empty: give every host a unique name")
	}
	if cfg.Address == "" {
		return nil, bad("address is empty: set the host's IP address or DNS name")
	}
	if strings.ContainsAny(cfg.Address, " \t\r\n/") {
		return nil, bad("address %q is not a host name or IP address", cfg.Address)
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, bad("port %d is out of range 1-65535", cfg.Port)
	}
	if cfg.Password == "" && cfg.PrivateKeyPEM == "" {
		return nil, bad("no credentials: set a password or a private key")
	}
	if cfg.MaxSessions < 1 || cfg.MaxSessions > MaxMaxSessions {
		return nil, bad("max_sessions %d is out of range 1-%d (ESXi's sshd allows %d sessions per connection)", cfg.MaxSessions, MaxMaxSessions, MaxMaxSessions)
	}
	if cfg.StreamsPerDisk < 1 || cfg.StreamsPerDisk > cfg.MaxSessions {
		return nil, bad("streams_per_disk %d is out of range 1-%d: each stream is a session, and max_sessions is %d", cfg.StreamsPerDisk, cfg.MaxSessions, cfg.MaxSessions)
	}
	if cfg.DialTimeout < 0 {
		return nil, bad("dial timeout must not be negative")
	}
	n := 0
	if cfg.HostKeyFingerprint != "" {
		n++
		if !strings.HasPrefix(cfg.HostKeyFingerprint, "SHA256:") {
			return nil, bad("host_key_fingerprint %q must look like SHA256:<base64> (run `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host)", cfg.HostKeyFingerprint)
		}
		raw, err := base64.RawStdEncoding.DecodeString(cfg.HostKeyFingerprint[len("SHA256:"):])
		if err != nil || len(raw) != 32 {
			return nil, bad("host_key_fingerprint %q is not a SHA256 fingerprint (43 base64 characters after SHA256:)", cfg.HostKeyFingerprint)
		}
	}
	if cfg.KnownHostsFile != "" {
		n++
	}
	if cfg.InsecureIgnoreHostKey && n > 0 {
		return nil, bad("insecure_ignore_host_key is set together with a fingerprint or known_hosts file: choose one")
	}
	if n == 0 && !cfg.InsecureIgnoreHostKey {
		return nil, bad("no host key verification configured: set host_key_fingerprint (SHA256:... from `ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub` on the host) or known_hosts_file; insecure_ignore_host_key = true is for labs only")
	}
	if n == 2 {
		return nil, bad("both host_key_fingerprint and known_hosts_file are set: choose one")
	}
	if cfg.PrivateKeyPEM == "" {
		return nil, nil
	}
	signer, err := ssh.ParsePrivateKey([]byte(cfg.PrivateKeyPEM))
	if err != nil {
		var pe *ssh.PassphraseMissingError
		if ok := asPassphraseMissing(err, &pe); ok {
			return nil, bad("the private key is encrypted with a passphrase: provide an unencrypted key (e.g. from a secret store)")
		}
		return nil, bad("the private key could not be parsed (%v): provide an OpenSSH or PEM private key", err)
	}
	return signer, nil
}
