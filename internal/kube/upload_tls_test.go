package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a CA that signs serving certificates, as CDI's
// cdi-uploadproxy-signer does.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serving returns a certificate with the names CDI's operator gives the
// upload proxy's (pkg/operator/resources/cert/factory.go, TargetService
// cdi-uploadproxy in namespace cdi): no IP address.
func (ca *testCA) serving(t *testing.T) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "cdi-uploadproxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"cdi-uploadproxy", "cdi-uploadproxy.cdi", "cdi-uploadproxy.cdi.svc"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// proxyServing is an upload proxy stand-in on 127.0.0.1 that takes any
// upload, serving a certificate with CDI's names signed by ca.
func proxyServing(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serving(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// A proxy reached by an address its certificate does not name is verified
// against upload_proxy_server_name; a CA that was renewed since the
// provider read it is read again from the cluster's bundle, once.
func TestUploadProxyNameAndRenewedCA(t *testing.T) {
	oldCA, newCA := newTestCA(t, "cdi-uploadproxy-signer@1"), newTestCA(t, "cdi-uploadproxy-signer@2")
	srv := proxyServing(t, newCA)
	var reads atomic.Int32
	bundle := func(context.Context) ([]byte, error) {
		reads.Add(1)
		return append(append([]byte{}, oldCA.pem...), newCA.pem...), nil
	}
	opts := func() UploadOptions {
		return UploadOptions{ProxyURL: srv.URL, Token: "tok", Body: strings.NewReader("image"), Size: 5, Attempts: 1}
	}

	t.Run("the URL's host is not in the certificate", func(t *testing.T) {
		o := opts()
		o.CACertPEM = newCA.pem
		wantClass(t, "127.0.0.1 against cdi-uploadproxy names", Upload(t.Context(), o), NeedsHuman)
		o = opts()
		o.CACertPEM, o.ServerName = newCA.pem, "cdi-uploadproxy.cdi.svc"
		if err := Upload(t.Context(), o); err != nil {
			t.Errorf("with ServerName: %v", err)
		}
	})
	t.Run("a CA renewed since it was read", func(t *testing.T) {
		o := opts()
		o.CACertPEM, o.ServerName = oldCA.pem, "cdi-uploadproxy.cdi.svc"
		wantClass(t, "a stale CA without the bundle", Upload(t.Context(), o), NeedsHuman)
		o = opts()
		o.CACertPEM, o.ServerName, o.CABundle = oldCA.pem, "cdi-uploadproxy.cdi.svc", bundle
		if err := Upload(t.Context(), o); err != nil {
			t.Errorf("with the cluster's bundle: %v", err)
		}
		if n := reads.Load(); n != 1 {
			t.Errorf("the bundle was read %d times, want once", n)
		}
	})
	t.Run("no CA configured: the cluster's bundle", func(t *testing.T) {
		reads.Store(0)
		o := opts()
		o.ServerName, o.CABundle = "cdi-uploadproxy.cdi.svc", bundle
		if err := Upload(t.Context(), o); err != nil {
			t.Errorf("with the cluster's bundle: %v", err)
		}
		if n := reads.Load(); n != 1 {
			t.Errorf("the bundle was read %d times, want once", n)
		}
	})
}

// A URL the cluster publishes may hand the connection to the proxy itself
// (a passthrough Route, a NodePort): the certificate is accepted for one of
// the proxy's own names, still only when it chains to the CA, and a stale
// CA is still read again from the bundle.
func TestUploadProxyAltServerNames(t *testing.T) {
	ca, other := newTestCA(t, "cdi-uploadproxy-signer@1"), newTestCA(t, "someone-else")
	srv := proxyServing(t, ca)
	opts := func(caPEM []byte, alt ...string) UploadOptions {
		return UploadOptions{ProxyURL: srv.URL, CACertPEM: caPEM, AltServerNames: alt, Token: "tok", Body: strings.NewReader("image"), Size: 5, Attempts: 1}
	}
	if err := Upload(t.Context(), opts(ca.pem, UploadProxyNames("cdi")...)); err != nil {
		t.Errorf("a certificate with the proxy's names: %v", err)
	}
	err := Upload(t.Context(), opts(ca.pem, "cdi-uploadproxy.openshift-cnv.svc", "uploads.example.com"))
	var host x509.HostnameError
	if !errors.As(err, &host) || host.Host != "127.0.0.1" {
		t.Errorf("names the certificate lacks: %v, want a hostname error for the URL's host", err)
	}
	wantClass(t, "names the certificate lacks", err, NeedsHuman)
	err = Upload(t.Context(), opts(other.pem, UploadProxyNames("cdi")...))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !isVerifyError(err) {
		t.Errorf("the right names from an unknown CA: %v, want an unknown authority", err)
	}
	o := opts(other.pem, UploadProxyNames("cdi")...)
	o.CABundle = func(context.Context) ([]byte, error) { return ca.pem, nil }
	if err := Upload(t.Context(), o); err != nil {
		t.Errorf("a stale CA with the cluster's bundle: %v", err)
	}
}
