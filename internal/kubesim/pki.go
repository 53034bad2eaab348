package kubesim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// servingPKI is a throwaway CA and one serving certificate signed by it,
// valid for the names the sim's HTTPS servers are reached by.
type servingPKI struct {
	caPEM []byte
	cert  tls.Certificate
	// certPEM and keyPEM are cert for a server in another process.
	certPEM, keyPEM []byte
}

func newServingPKI(commonName string, dnsNames []string) (*servingPKI, error) {
	ca, err := newCA(commonName+"-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	leaf, err := ca.issue(commonName, dnsNames, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	return &servingPKI{caPEM: ca.certPEM, cert: leaf.cert, certPEM: leaf.certPEM, keyPEM: leaf.keyPEM}, nil
}

// certAuthority is a throwaway CA that issues certificates.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// serialNumber returns a random positive certificate serial number.
func serialNumber() *big.Int {
	b, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return b.Add(b, big.NewInt(1))
}

func newCA(commonName string, validity time.Duration) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// issued is a certificate and its key, as a tls.Certificate and as PEM.
type issued struct {
	cert            tls.Certificate
	certPEM, keyPEM []byte
}

// issue signs a certificate for commonName, dnsNames and ips, for usage
// (server or client authentication), valid as long as the CA.
func (ca *certAuthority) issue(commonName string, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("creating certificate for %s: %w", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &issued{
		cert:    tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
