package esxi

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func asPassphraseMissing(err error, target **ssh.PassphraseMissingError) bool {
	return errors.As(err, target)
}

// hostKeyFamilies are the host key algorithm groups tried, one per
// handshake, when only a fingerprint is pinned and the key type is not yet
// known. Trying one family at a time means a host that has both an ECDSA and
// an RSA key (every ESXi host) matches whichever key the user pinned.
var hostKeyFamilies = [][]string{
	{ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521},
	{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256},
	{ssh.KeyAlgoED25519},
}

// algorithmsForKeyType maps a public key type to the host key algorithms
// that prove possession of it. An RSA key is used with rsa-sha2-512/256
// (ESXi 8 no longer offers SHA-1 ssh-rsa).
func algorithmsForKeyType(t string) []string {
	switch t {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoED25519:
		return []string{t}
	}
	return nil
}

// preferredCiphers puts AES-GCM first: ESXi's FIPS sshd offers
// aes256-gcm/aes128-gcm, and AES-NI makes them the fastest for bulk reads.
var preferredCiphers = []string{
	"aes128-gcm@openssh.com",
	"aes256-gcm@openssh.com",
	"chacha20-poly1305@openssh.com",
	"aes128-ctr",
	"aes192-ctr",
	"aes256-ctr",
}

// hostKeyCheck is the verification for one handshake. It records the key
// the host offered so that errors can name it.
type hostKeyCheck struct {
	cfg      HostConfig
	known    ssh.HostKeyCallback // nil unless KnownHostsFile is set
	offered  ssh.PublicKey
	verified bool
}

func (h *hostKeyCheck) callback(hostname string, remote net.Addr, key ssh.PublicKey) error {
	h.offered = key
	switch {
	case h.cfg.InsecureIgnoreHostKey:
		h.verified = true
		return nil
	case h.cfg.HostKeyFingerprint != "":
		if ssh.FingerprintSHA256(key) == h.cfg.HostKeyFingerprint {
			h.verified = true
			return nil
		}
		return errFingerprintMismatch
	case h.known != nil:
		err := h.known(hostname, remote, key)
		if err == nil {
			h.verified = true
		}
		return err
	}
	return errors.New("no host key verification configured")
}

var errFingerprintMismatch = errors.New("host key fingerprint mismatch")

// knownHostAlgorithms lists the host key algorithms for the keys a
// known_hosts file holds for the host, so that the handshake asks for a key
// we can verify. It returns nil when the file has no key for the host.
func knownHostAlgorithms(cb ssh.HostKeyCallback, hostport string, remote net.Addr) []string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil
	}
	err = cb(hostport, remote, probe)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		if err == nil {
			// Only possible if the file lists this random key: impossible.
			return nil
		}
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		for _, a := range algorithmsForKeyType(k.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// hostKeyError turns a failed verification into an actionable error.
func hostKeyError(cfg HostConfig, offered []ssh.PublicKey, err error) *Error {
	var got []string
	for _, k := range offered {
		got = append(got, k.Type()+" "+ssh.FingerprintSHA256(k))
	}
	gotS := strings.Join(got, ", ")
	if gotS == "" {
		gotS = "no key"
	}
	e := &Error{Class: NeedsHuman, Host: cfg.Name, Op: "verifying host key"}
	var ke *knownhosts.KeyError
	switch {
	case errors.Is(err, errFingerprintMismatch):
		e.Kind = ErrHostKeyMismatch
		e.Msg = fmt.Sprintf("host key for %s (%s) does not match the pinned fingerprint %s; got %s: if the host was reinstalled, update host_key_fingerprint after checking the new key on the host console (ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub); otherwise someone may be impersonating the host",
			cfg.Name, cfg.addr(), cfg.HostKeyFingerprint, gotS)
	case errors.As(err, &ke) && len(ke.Want) == 0:
		e.Kind = ErrUnknownHostKey
		e.Msg = fmt.Sprintf("host %s (%s) is not in known_hosts file %s; it offered %s: check the key on the host console and add it (ssh-keyscan -p %d %s >> %s), or pin it with host_key_fingerprint",
			cfg.Name, cfg.addr(), cfg.KnownHostsFile, gotS, cfg.Port, cfg.Address, cfg.KnownHostsFile)
	case errors.As(err, &ke):
		var want []string
		for _, k := range ke.Want {
			want = append(want, fmt.Sprintf("%s:%d %s", k.Filename, k.Line, ssh.FingerprintSHA256(k.Key)))
		}
		e.Kind = ErrHostKeyMismatch
		e.Msg = fmt.Sprintf("host key for %s (%s) does not match known_hosts (%s); got %s: if the host was reinstalled, remove the old line and add the new key after checking it on the host console; otherwise someone may be impersonating the host",
			cfg.Name, cfg.addr(), strings.Join(want, "; "), gotS)
	default:
		var re *knownhosts.RevokedError
		if errors.As(err, &re) {
			e.Kind = ErrHostKeyMismatch
			e.Msg = fmt.Sprintf("host key for %s (%s) is marked @revoked in %s", cfg.Name, cfg.addr(), re.Revoked.Filename)
		} else {
			e.Kind = ErrHostKeyMismatch
			e.Msg = fmt.Sprintf("host key for %s (%s) could not be verified (offered %s)", cfg.Name, cfg.addr(), gotS)
			e.Err = err
		}
	}
	return e
}
