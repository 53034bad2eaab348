package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// UploadRequest is one image to send to a DataVolume whose source is
// "upload".
type UploadRequest struct {
	Namespace, DataVolume string
	// Path is the local image; Size its length.
	Path string
	Size int64
	// Body, when set, is sent instead of the file at Path (a staging file
	// read as its copy verifies it); Seek to the start sends it again.
	Body io.ReadSeeker
	// ProxyURL, CAPEM and Insecure reach CDI's upload proxy; ServerName,
	// when set, is the name its certificate is checked against.
	ProxyURL   string
	CAPEM      string
	Insecure   bool
	ServerName string
	// Progress, if set, receives the bytes sent so far.
	Progress func(sent int64)
	// Route, if set, receives the way to the proxy this upload takes (see
	// cdiUploader.Upload), once, before any byte is sent.
	Route func(route string)
}

// Uploader sends images to CDI. It returns once CDI has written the image
// to the destination's claim.
type Uploader interface {
	Upload(ctx context.Context, req UploadRequest) error
}

// NewCDIUploader returns the Uploader that asks the cluster for an upload
// token (kube.Client.RequestUploadToken) and streams the file through CDI's
// upload proxy (kube.Upload), as `virtctl image-upload` does.
func NewCDIUploader(c *kube.Client) Uploader { return cdiUploader{c: c} }

type cdiUploader struct{ c *kube.Client }

// Upload takes the way to CDI's upload proxy that the cluster allows: the
// configured URL; else the URL the cluster publishes (CDIConfig
// status.uploadProxyURL), when it answers a TLS handshake from here; else a
// port-forward through the API server to a pod of the proxy (as `kubectl
// port-forward` and `virtctl image-upload` through one), checked against
// the name in the proxy's certificate. The tunnel lives for this upload; a
// tunnel that breaks makes the upload fail transiently, and the next
// attempt opens a new one.
func (u cdiUploader) Upload(ctx context.Context, req UploadRequest) (err error) {
	route := "the configured upload_proxy_url " + req.ProxyURL
	var altNames []string
	if req.ProxyURL == "" {
		published, err := u.c.PublishedUploadProxyURL(ctx)
		if err != nil {
			return err
		}
		route = "the upload proxy URL the cluster publishes, " + published
		// A published URL that hands the connection to the proxy (a
		// passthrough Route, a NodePort) shows CDI's certificate, which
		// names only the proxy's Service.
		for _, ns := range cdiNamespaces {
			altNames = append(altNames, kube.UploadProxyNames(ns)...)
		}
		if published == "" || !answersTLS(ctx, published) {
			tun, err := u.openTunnel(ctx, published)
			if err != nil {
				return err
			}
			defer func() {
				if err != nil {
					// The client notices a tunnel's end a moment after the
					// bytes stop: give it that moment to name the cause.
					tun.WaitBroken(ctx, tunnelProbe)
				}
				if b := tun.Broken(); err != nil && b != nil {
					err = transient("UploadTunnelBroken", fmt.Sprintf("the port-forward through the API server to the upload proxy's pod %s/%s broke during the upload (a new one is opened on the next attempt)", tun.Namespace, tun.Pod), errors.Join(b, err))
				}
				tun.Close()
			}()
			published = tun.URL
			if req.ServerName == "" {
				req.ServerName = tun.ServerName
			}
			route = fmt.Sprintf("a port-forward through the API server to the upload proxy's pod %s/%s (certificate checked for %s)", tun.Namespace, tun.Pod, req.ServerName)
		}
		req.ProxyURL = published
	}
	if req.Route != nil {
		req.Route(route)
	}
	token, err := u.c.RequestUploadToken(ctx, req.Namespace, req.DataVolume)
	if err != nil {
		return err
	}
	body := req.Body
	if body == nil {
		f, err := os.Open(req.Path)
		if err != nil {
			return permanent("ArtifactMissing", fmt.Sprintf("cannot open the image %s to upload", req.Path), "", err)
		}
		defer f.Close()
		body = f
	}
	err = kube.Upload(ctx, kube.UploadOptions{
		ProxyURL: req.ProxyURL, CACertPEM: []byte(req.CAPEM), InsecureSkipVerify: req.Insecure, ServerName: req.ServerName,
		AltServerNames: altNames, CABundle: u.caBundle,
		Token: token, Body: body, Size: req.Size, Progress: req.Progress,
		Namespace: req.Namespace, Name: req.DataVolume,
		DataVolume: func(ctx context.Context) (*cdiv1beta1.DataVolume, error) {
			return u.c.GetDataVolume(ctx, req.Namespace, req.DataVolume)
		},
	})
	if err := certificateRefusal(err, route); err != nil {
		return err
	}
	return uploadRefusal(err, req)
}

// certificateRefusal turns an upload proxy certificate that does not
// verify (after the cluster's CA bundle was read again) into a stop that
// says which setting to change; nil when err is not about the certificate.
func certificateRefusal(err error, route string) error {
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &hostErr):
		return onField(FieldUploadProxyName, needsHuman("UploadProxyCertificateName",
			fmt.Sprintf("the upload proxy's certificate, reached through %s, does not name %s (it names %s)", route, hostErr.Host, certNames(hostErr.Certificate)),
			"set transport.upload_proxy_server_name to a name the certificate holds (CDI's are cdi-uploadproxy, cdi-uploadproxy.<namespace> and cdi-uploadproxy.<namespace>.svc), or transport.upload_proxy_url to a URL whose host it names, then run apply again", err))
	case errors.As(err, &authErr), errors.As(err, &invalid):
		return needsHuman("UploadProxyCertificateUntrusted",
			fmt.Sprintf("the upload proxy's certificate, reached through %s, does not verify against the configured CA or the cluster's %s bundle", route, kube.UploadProxySignerBundle),
			"remove transport.upload_proxy_ca_certificate to use the CA bundle CDI publishes (it renews its CA daily), or set it to the CA that signs the certificate the URL presents (an Ingress's own CA, for one), then run apply again", err)
	}
	return nil
}

// certNames lists the DNS names and addresses a certificate holds.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "nothing known"
	}
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no names"
	}
	return strings.Join(names, ", ")
}

// cdiNamespaces are where CDI's operator runs in the usual installations:
// its own manifests, the HyperConverged operator upstream and OpenShift
// Virtualization.
var cdiNamespaces = []string{"cdi", "kubevirt-hyperconverged", "openshift-cnv"}

// caBundle reads the upload proxy's CA bundle that CDI publishes in its
// namespace; none published (or not readable) means the proxy's
// certificate is checked against the configured CA or the system's roots.
func (u cdiUploader) caBundle(ctx context.Context) ([]byte, error) {
	for _, ns := range cdiNamespaces {
		b, err := u.c.UploadProxyCABundle(ctx, ns)
		switch {
		case err == nil:
			return b, nil
		case kube.IsNotFound(err), kube.Classify(err) == kube.NeedsHuman:
			continue
		default:
			return nil, err
		}
	}
	return nil, nil
}

// tunnelProbe bounds the TLS handshake that tells whether a published URL
// answers from here.
const tunnelProbe = 5 * time.Second

// answersTLS reports whether the proxy at rawURL completes a TLS handshake
// from here within tunnelProbe (an http URL: a TCP connection). The
// certificate is not checked here: the upload checks it. A URL reached
// through an HTTP proxy of the environment is taken as it is.
func answersTLS(ctx context.Context, rawURL string) bool {
	pu, err := url.Parse(rawURL)
	if err != nil || pu.Host == "" {
		return false
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: pu}); err == nil && p != nil {
		return true
	}
	host := pu.Host
	if pu.Port() == "" {
		port := "443"
		if pu.Scheme == "http" {
			port = "80"
		}
		host = net.JoinHostPort(pu.Hostname(), port)
	}
	ctx, cancel := context.WithTimeout(ctx, tunnelProbe)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer conn.Close()
	if pu.Scheme == "http" {
		return true
	}
	tc := tls.Client(conn, &tls.Config{ServerName: pu.Hostname(), InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // reachability only: the upload verifies
	return tc.HandshakeContext(ctx) == nil
}

// openTunnel opens a port-forward to the upload proxy in the first of
// cdiNamespaces that has its Service. published is the URL the cluster
// publishes that did not answer ("" when none), for the message when there
// is no proxy to tunnel to either.
func (u cdiUploader) openTunnel(ctx context.Context, published string) (*kube.UploadTunnel, error) {
	for _, ns := range cdiNamespaces {
		t, err := u.c.OpenUploadTunnel(ctx, ns)
		switch {
		case err == nil:
			return t, nil
		case kube.IsNotFound(err):
			continue
		default:
			return nil, err
		}
	}
	why := "the cluster publishes none (CDIConfig config, status.uploadProxyURL)"
	if published != "" {
		why = fmt.Sprintf("the URL the cluster publishes, %s, does not answer from here", published)
	}
	return nil, needsHuman("NoUploadProxyURL",
		fmt.Sprintf("no transport.upload_proxy_url is configured, %s, and there is no Service %s in %s to reach the proxy through the API server", why, kube.UploadProxyService, strings.Join(cdiNamespaces, ", ")),
		"set transport.upload_proxy_url to a URL of CDI's upload proxy that this machine reaches (a Route, an Ingress, a NodePort or a port-forward, with transport.upload_proxy_server_name when its host is not in the proxy's certificate), or have CDI publish one (CDIConfig spec.uploadProxyURLOverride)", nil)
}

// uploadRefusal turns CDI's upload server refusing the image into a stop
// that says what to do: the same bytes would be refused again. Other
// errors are returned as they are.
func uploadRefusal(err error, req UploadRequest) error {
	var ue *kube.UploadError
	if !errors.As(err, &ue) || !ue.Refused() {
		return err
	}
	target := fmt.Sprintf("DataVolume %s/%s", req.Namespace, req.DataVolume)
	if virtual, available, ok := ue.SizeRefusal(); ok {
		return permanent("ImageTooLarge",
			fmt.Sprintf("CDI refused the image for %s: its virtual size is %d bytes (%s) but the claim offers it %d bytes (%s)",
				target, virtual, inMiB(virtual), available, inMiB(available)),
			fmt.Sprintf("the claim must offer at least %d bytes (%s) to the image: make the DataVolume's storage request at least that, plus CDI's filesystem overhead on Filesystem claims, e.g. by a StorageClass or StorageProfile that does not shrink claims, then delete the DataVolume and run apply again", virtual, inMiB(virtual)),
			err)
	}
	return permanent("ImageRejected", fmt.Sprintf("CDI's upload server refused the image for %s", target),
		"check the image (qemu-img info, qemu-img check): CDI takes raw or qcow2 without a backing file; the same image will be refused again", err)
}

// inMiB renders a byte count in MiB, rounded up.
func inMiB(n int64) string { return fmt.Sprintf("%d MiB", (n+1<<20-1)>>20) }
