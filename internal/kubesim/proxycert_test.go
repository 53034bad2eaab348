package kubesim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// As CDI's operator: the proxy's certificate names the cdi-uploadproxy
// Service, its signer is renewed every UploadProxyCARenewal and the
// serving certificate with it, and ConfigMap cdi-uploadproxy-signer-bundle
// holds the signers not yet expired.
func TestUploadProxyCARenewal(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	var s *Sim
	served := func() *x509.Certificate {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(s.UploadProxyURL(), "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test inspects the certificate
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	bundle := func() []*x509.Certificate {
		cm := &corev1.ConfigMap{}
		if err := cl.Get(t.Context(), client.ObjectKey{Namespace: CDINamespace, Name: UploadProxySignerBundle}, cm); err != nil {
			t.Fatal(err)
		}
		var out []*x509.Certificate
		rest := []byte(cm.Data[UploadProxySignerBundleKey])
		for {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				return out
			}
			cert, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, cert)
		}
	}

	t.Run("renewed", func(t *testing.T) {
		s = startSim(t, fast(c, ns))
		first := served()
		if want := []string{"cdi-uploadproxy", "cdi-uploadproxy.cdi", "cdi-uploadproxy.cdi.svc"}; !slices.Equal(first.DNSNames, want) {
			t.Errorf("serving certificate names %v, want %v", first.DNSNames, want)
		}
		if got := bundle(); len(got) != 1 || first.CheckSignatureFrom(got[0]) != nil {
			t.Fatalf("the bundle holds %d CAs, want the one that signed the serving certificate", len(got))
		}
		if err := s.RotateUploadProxyCA(t.Context()); err != nil {
			t.Fatal(err)
		}
		now := served()
		got := bundle()
		if now.Equal(first) || len(got) != 2 || first.CheckSignatureFrom(got[0]) != nil || now.CheckSignatureFrom(got[1]) != nil {
			t.Errorf("after a renewal the bundle holds %d CAs, want the old one, still valid, and the new one that signs the new serving certificate", len(got))
		}
		for _, ca := range got {
			if life := ca.NotAfter.Sub(ca.NotBefore); life != 48*time.Hour+time.Hour {
				t.Errorf("a signer lives %v, want 48h (and the hour it is back-dated)", life)
			}
		}
		// The bundle is published before the new certificate is served
		// (library-go's SyncWorker order): a renewal whose bundle cannot
		// be written leaves the proxy serving what the bundle trusts.
		canceled, cancel := context.WithCancel(t.Context())
		cancel()
		if err := s.RotateUploadProxyCA(canceled); err == nil {
			t.Fatal("a renewal without the API server succeeded")
		}
		if after := served(); !after.Equal(now) {
			t.Error("the proxy serves a certificate from a signer the published bundle does not hold")
		}
	})
	t.Run("every period", func(t *testing.T) {
		opts := fast(c, ns)
		opts.UploadProxyCARenewal = 300 * time.Millisecond
		s = startSim(t, opts)
		first := served()
		eventually(t, 10*time.Second, "the signer renewed by itself", func() string {
			if served().Equal(first) {
				return "the serving certificate is still the first"
			}
			return ""
		})
	})
}

// Every upload goes to CDI's own upload server: without it the simulator
// does not start, and says how to build it.
func TestStartNeedsTheUploadServer(t *testing.T) {
	c := cluster.Get(t)
	t.Setenv(testcluster.EnvTestBin, t.TempDir())
	_, err := Start(t.Context(), fast(c))
	if err == nil || !strings.Contains(err.Error(), "cdi-uploadserver "+testcluster.CDIUploadServerVersion+" is missing") || !strings.Contains(err.Error(), "make testbin") {
		t.Errorf("Start without the upload server: %v, want it to say the server is missing and how to build it", err)
	}
}
