package testcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// keyPair is a certificate with its private key, in PEM.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// certSpec describes a certificate to issue.
type certSpec struct {
	commonName   string
	organization []string
	isCA         bool
	server       bool
	client       bool
	dnsNames     []string
	ips          []net.IP
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// issue creates a certificate for spec, signed by parent (self-signed when
// parent is nil). Certificates are valid from an hour ago for a week: long
// enough for any test run, short enough to be obviously throwaway.
func issue(spec certSpec, parent *keyPair) (*keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generating key for %s: %w", spec.commonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: spec.commonName, Organization: spec.organization},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		DNSNames:              spec.dnsNames,
		IPAddresses:           spec.ips,
	}
	if spec.isCA {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	if spec.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate for %s: %w", spec.commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  keyPEM,
	}, nil
}

// pki is everything the API server and its clients need.
type pki struct {
	ca, serving, admin             *keyPair
	frontProxyCA, frontProxyClient *keyPair
	saKeyPEM, saPubPEM             []byte
}

func newPKI() (*pki, error) {
	var p pki
	var err error
	if p.ca, err = issue(certSpec{commonName: "vmmigration-testcluster-ca", isCA: true}, nil); err != nil {
		return nil, err
	}
	if p.serving, err = issue(certSpec{
		commonName: "kube-apiserver",
		server:     true,
		dnsNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP},
	}, p.ca); err != nil {
		return nil, err
	}
	if p.admin, err = issue(certSpec{commonName: "admin", organization: []string{"system:masters"}, client: true}, p.ca); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = issue(certSpec{commonName: "vmmigration-testcluster-front-proxy-ca", isCA: true}, nil); err != nil {
		return nil, err
	}
	if p.frontProxyClient, err = issue(certSpec{commonName: "front-proxy-client", client: true}, p.frontProxyCA); err != nil {
		return nil, err
	}
	sa, saPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, err
	}
	p.saKeyPEM = saPEM
	p.saPubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return &p, nil
}
