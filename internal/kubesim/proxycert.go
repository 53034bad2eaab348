package kubesim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The upload proxy's certificate, as CDI's operator keeps it (v1.65.0,
// pkg/operator/controller/certrotation.go and
// pkg/operator/resources/cert/factory.go): a signer "cdi-uploadproxy-signer"
// that lives 48 hours and is renewed after 24, a serving certificate for the
// Service cdi-uploadproxy issued again by each new signer, and the signers
// not yet expired published in ConfigMap cdi-uploadproxy-signer-bundle, key
// ca-bundle.crt (library-go's CABundleConfigMap).
const (
	// UploadProxySignerBundle is the ConfigMap, in CDINamespace, that holds
	// the upload proxy's CA bundle under UploadProxySignerBundleKey.
	UploadProxySignerBundle    = "cdi-uploadproxy-signer-bundle"
	UploadProxySignerBundleKey = "ca-bundle.crt"
	// defaultProxyCARenewal is CDI's SignerRefresh: the signer lives twice
	// as long.
	defaultProxyCARenewal = 24 * time.Hour
)

// uploadProxyNames are the names in the proxy's serving certificate: the
// Service's (TargetService cdi-uploadproxy in CDI's namespace).
var uploadProxyNames = []string{"cdi-uploadproxy", "cdi-uploadproxy." + CDINamespace, "cdi-uploadproxy." + CDINamespace + ".svc"}

// proxyCerts is the proxy's current serving certificate and the signers
// not yet expired, newest last.
type proxyCerts struct {
	renewal time.Duration
	mu      sync.Mutex
	cert    tls.Certificate
	signers []*certAuthority
}

// rotate makes a new signer and puts a serving certificate signed by it
// in use at once (the proxy's first certificate).
func (p *proxyCerts) rotate() error {
	leaf, err := p.addSigner()
	if err != nil {
		return err
	}
	p.serve(leaf)
	return nil
}

// addSigner makes a new signer, adds it to those not yet expired (dropping
// the expired ones) and returns a serving certificate it signed, not yet in
// use.
func (p *proxyCerts) addSigner() (tls.Certificate, error) {
	ca, err := newCA(fmt.Sprintf("cdi-uploadproxy-signer@%d", time.Now().UnixNano()), 2*p.renewal)
	if err != nil {
		return tls.Certificate{}, err
	}
	// The names CDI gives it and no others: a client reaching the proxy
	// by 127.0.0.1 (tests, a port-forward) names the server it expects,
	// as it must on a real cluster (UploadProxyServerName).
	leaf, err := ca.issue("cdi-uploadproxy", uploadProxyNames, nil, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return tls.Certificate{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	kept := p.signers[:0]
	for _, s := range p.signers {
		if s.cert.NotAfter.After(now) {
			kept = append(kept, s)
		}
	}
	p.signers = append(kept, ca)
	return leaf.cert, nil
}

// serve puts the serving certificate c in use.
func (p *proxyCerts) serve(c tls.Certificate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cert = c
}

func (p *proxyCerts) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cert
	return &c, nil
}

// bundle returns the PEM of the signers not yet expired.
func (p *proxyCerts) bundle() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b []byte
	for _, s := range p.signers {
		b = append(b, s.certPEM...)
	}
	return b
}

// current returns the PEM of the newest signer only.
func (p *proxyCerts) current() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signers[len(p.signers)-1].certPEM
}

// publishProxyBundle writes the signer bundle ConfigMap.
func (s *Sim) publishProxyBundle(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: CDINamespace, Name: UploadProxySignerBundle}}
	bundle := string(s.proxyCerts.bundle())
	if err := upsert(ctx, s.cl, cm, func() { cm.Data = map[string]string{UploadProxySignerBundleKey: bundle} }); err != nil {
		return fmt.Errorf("kubesim: ConfigMap %s/%s: %w", CDINamespace, UploadProxySignerBundle, err)
	}
	return nil
}

// RotateUploadProxyCA renews the upload proxy's signer now, as CDI's
// operator does every Options.UploadProxyCARenewal, in the order of
// library-go's CertRotationController.SyncWorker that CDI's certrotation.go
// runs: a new CA, then the bundle ConfigMap with the CAs not yet expired,
// then a serving certificate signed by the new CA. A client that pinned
// the old CA fails verification from then on; one that reads the bundle
// again trusts the new certificate.
func (s *Sim) RotateUploadProxyCA(ctx context.Context) error {
	leaf, err := s.proxyCerts.addSigner()
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	if err := s.publishProxyBundle(ctx); err != nil {
		return err
	}
	s.proxyCerts.serve(leaf)
	return nil
}

// rotateProxyCA renews the proxy's signer every renewal period until the
// sim stops.
func (s *Sim) rotateProxyCA() {
	defer s.wg.Done()
	t := time.NewTicker(s.proxyCerts.renewal)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			if err := s.RotateUploadProxyCA(ctx); err != nil {
				s.mu.Lock()
				s.lastErr = err
				s.mu.Unlock()
			}
			cancel()
		}
	}
}

// CDIConfigName is the cluster's one CDIConfig.
const CDIConfigName = "config"

// publishUploadProxyURL writes the upload proxy's URL into CDIConfig
// config's status.uploadProxyURL, as CDI's config controller does from
// spec.uploadProxyURLOverride or the proxy's Route or Ingress (v1.65.0,
// pkg/controller/config-controller.go); with Options.NoUploadProxyURL the
// status holds none, as on a cluster where nothing exposes the proxy.
func (s *Sim) publishUploadProxyURL(ctx context.Context) error {
	// Sims started side by side on one cluster write the one CDIConfig:
	// the last one's URL stands, and a write that lost is made again.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return s.publishUploadProxyURLOnce(ctx) })
}

func (s *Sim) publishUploadProxyURLOnce(ctx context.Context) error {
	cfg := &cdiv1.CDIConfig{ObjectMeta: metav1.ObjectMeta{Name: CDIConfigName}}
	if err := s.cl.Get(ctx, client.ObjectKeyFromObject(cfg), cfg); apierrors.IsNotFound(err) {
		if err := s.cl.Create(ctx, cfg); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubesim: creating CDIConfig %s: %w", CDIConfigName, err)
		}
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(cfg), cfg); err != nil {
			return fmt.Errorf("kubesim: CDIConfig %s: %w", CDIConfigName, err)
		}
	} else if err != nil {
		return fmt.Errorf("kubesim: CDIConfig %s: %w", CDIConfigName, err)
	}
	cfg.Status.UploadProxyURL = nil
	if !s.opts.NoUploadProxyURL {
		u := s.UploadProxyURL()
		cfg.Status.UploadProxyURL = &u
	}
	if err := s.cl.Status().Update(ctx, cfg); err != nil {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("kubesim: CDIConfig %s status: %w", CDIConfigName, err)
	}
	return nil
}
