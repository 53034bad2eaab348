package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
)

// UploadPath is the upload proxy's asynchronous upload endpoint, the one
// `virtctl image-upload` uses: CDI's upload server answers once the image
// has arrived in scratch space and passed validation, then converts it into
// the claim while the DataVolume says how that goes. (The synchronous
// /v1beta1/upload answers only after the conversion: an ingress or route in
// front of the proxy times out first on a large image, and the retry meets
// 409 or 503.)
const UploadPath = "/v1beta1/upload-async"

// uploadPathSync is the synchronous endpoint, accepted in a configured URL.
const uploadPathSync = "/v1beta1/upload"

// uploadTokenRequestName is what virtctl names its requests; the server
// does not keep them, so the name only shows up in audit logs.
const uploadTokenRequestName = "token-for-" + UserAgent

// RequestUploadToken asks CDI's upload API (served through the API
// server's aggregation layer) for a token that lets its holder upload into
// the PVC namespace/pvcName, as `virtctl image-upload` does. Tokens are
// short-lived (CDI: five minutes): request one right before each upload.
func (c *Client) RequestUploadToken(ctx context.Context, namespace, pvcName string) (string, error) {
	rc, err := c.uploadRESTClient()
	if err != nil {
		return "", wrapUpload("create", namespace, pvcName, err)
	}
	req := &uploadv1beta1.UploadTokenRequest{
		TypeMeta:   metav1.TypeMeta{Kind: "UploadTokenRequest", APIVersion: uploadv1beta1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: uploadTokenRequestName, Namespace: namespace},
		Spec:       uploadv1beta1.UploadTokenRequestSpec{PvcName: pvcName},
	}
	resp := &uploadv1beta1.UploadTokenRequest{}
	err = rc.Post().Namespace(namespace).Resource("uploadtokenrequests").Body(req).Do(ctx).Into(resp)
	if err != nil {
		return "", wrapUpload("create", namespace, pvcName, err)
	}
	if resp.Status.Token == "" {
		return "", wrapUpload("create", namespace, pvcName, errors.New("the server returned no token"))
	}
	return resp.Status.Token, nil
}

func wrapUpload(op, namespace, pvcName string, err error) error {
	class := classify(err)
	if apierrors.IsNotFound(err) && statusCode(err) == http.StatusNotFound {
		// The group itself is not served: CDI (its API server) is not
		// installed, or its APIService is missing.
		class = NeedsHuman
		err = fmt.Errorf("%w (is CDI installed? its APIService v1beta1.upload.cdi.kubevirt.io serves upload tokens)", err)
	}
	return &Error{Op: op, Kind: "UploadTokenRequest", Namespace: namespace, Name: pvcName, Class: class, Err: err}
}

// uploadRESTClient returns a REST client for upload.cdi.kubevirt.io/v1beta1
// with the Client's connection settings.
func (c *Client) uploadRESTClient() (*rest.RESTClient, error) {
	if _, err := c.raw(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	cfg := rest.CopyConfig(c.cfg)
	c.mu.Unlock()
	scheme := runtime.NewScheme()
	if err := uploadv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	gv := uploadv1beta1.SchemeGroupVersion
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.ContentType = runtime.ContentTypeJSON
	if cfg.UserAgent == "" {
		cfg.UserAgent = UserAgent
	}
	return rest.RESTClientFor(cfg)
}

// UploadOptions say where and what to upload.
type UploadOptions struct {
	// ProxyURL is CDI's upload proxy (https://host:port); UploadPath is
	// appended unless the URL already ends with it.
	ProxyURL string
	// CACertPEM verifies the proxy's certificate; when empty the system
	// roots do, unless InsecureSkipVerify.
	CACertPEM          []byte
	InsecureSkipVerify bool
	// ServerName is the name the proxy's certificate is checked against
	// when the URL's host is not in it (a port-forward, a NodePort, an
	// IP): CDI's certificate names cdi-uploadproxy,
	// cdi-uploadproxy.<namespace> and cdi-uploadproxy.<namespace>.svc.
	ServerName string
	// AltServerNames, when ServerName is empty, are names the proxy's
	// certificate may hold instead of the URL's host: CDI's own names for
	// a URL the cluster publishes, where a passthrough Route, a NodePort
	// or an address hands the connection to the proxy, whose certificate
	// names only its Service. The certificate must still chain to the CA.
	AltServerNames []string
	// CABundle, when set, reads the CA bundle the cluster publishes for
	// the proxy (UploadProxyCABundle). It is read again, and the attempt
	// made again, when the proxy's certificate does not verify: CDI
	// renews the proxy's signing CA every day.
	CABundle func(ctx context.Context) ([]byte, error)
	// Token comes from RequestUploadToken.
	Token string
	// Body is the image (raw or qcow2). It is streamed, never held in
	// memory. When it is an io.Seeker, a failed attempt can be retried from
	// its start; otherwise only attempts that sent no byte are retried.
	Body io.Reader
	// Size is Body's length, or 0 when unknown (chunked).
	Size int64
	// Progress, when set, is called with the number of bytes sent so far
	// (from 0 again on a retry).
	Progress func(sent int64)
	// Namespace and Name name the DataVolume, for error messages.
	Namespace, Name string
	// Attempts bounds the tries; default 3.
	Attempts int
	// HTTPClient overrides the client built from CACertPEM and
	// InsecureSkipVerify (tests).
	HTTPClient *http.Client
	// DataVolume, when set, reads the target DataVolume. Upload then
	// follows it after the proxy has taken the image, until CDI has written
	// the claim (Succeeded) or its upload server failed on the image (a
	// restart); and a 409 or 503 answer is looked into there rather than
	// sent again blind.
	DataVolume func(ctx context.Context) (*cdiv1beta1.DataVolume, error)
	// Poll is how often the DataVolume is read; default one second.
	Poll time.Duration
}

// UploadError is the upload proxy's answer to a failed upload, or, with
// StatusCode 0, CDI's upload server failing on an image it had taken (its
// pod restarted; Message is the DataVolume's Running condition).
type UploadError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Message is the response body: CDI puts the reason there.
	Message string
}

func (e *UploadError) Error() string {
	msg := strings.TrimSpace(e.Message)
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	if e.StatusCode == 0 {
		return "CDI's upload server failed on the image it took: " + msg
	}
	return fmt.Sprintf("upload proxy answered %d: %s", e.StatusCode, msg)
}

// The upload server's words (CDI v1.65.0): pkg/uploadserver/uploadserver.go
// handleStreamError prefixes every refusal with "Saving stream failed: "
// and answers 400 for lack of space (importer.IsNoCapacityError, which
// takes in every image validation error) and 500 for everything else;
// cmd/cdi-uploadserver logs "UploadServer failed: " before its pod restarts
// on a failure after it answered. pkg/image/qemu.go checkIfURLIsValid says
// how large the image is against the room in the claim.
var (
	serverRefusal = regexp.MustCompile(`Saving stream failed: |UploadServer failed: `)
	sizeRefusal   = regexp.MustCompile(`(?i)virtual image size (\d+) is larger than the reported available storage (\d+)`)
	// A transfer that was cut off is refused in the same words; sent
	// again, it can succeed.
	cutOff = regexp.MustCompile(`(?i)unexpected EOF|connection reset|broken pipe|i/o timeout|context canceled|use of closed network connection`)
)

// Refused reports whether CDI's upload server refused the image itself (it
// would refuse the same bytes again), rather than the request failing on
// the way.
func (e *UploadError) Refused() bool {
	return serverRefusal.MatchString(e.Message) && !cutOff.MatchString(e.Message)
}

// SizeRefusal returns, when the server refused the image for lack of room,
// the image's virtual size and the bytes the claim offered it.
func (e *UploadError) SizeRefusal() (virtual, available int64, ok bool) {
	m := sizeRefusal.FindStringSubmatch(e.Message)
	if m == nil {
		return 0, 0, false
	}
	virtual, err1 := strconv.ParseInt(m[1], 10, 64)
	available, err2 := strconv.ParseInt(m[2], 10, 64)
	return virtual, available, err1 == nil && err2 == nil
}

// Class classifies the answer. A refusal of the image by the upload server
// is Permanent whatever the status (the server answers 500 for most of
// them); otherwise 401 means the token was refused (expired: request a new
// one and retry); 409 and 503 that the target is busy, done, or not ready;
// other 5xx server or proxy trouble; 404/405/403 a wrong proxy URL; other
// 4xx a bad request.
func (e *UploadError) Class() Class {
	code := e.StatusCode
	switch {
	case e.Refused():
		return Permanent
	case code == 0:
		return Transient
	case code == http.StatusUnauthorized, code == http.StatusServiceUnavailable, code == http.StatusConflict,
		code == http.StatusTooManyRequests, code >= 500:
		return Transient
	case code == http.StatusNotFound, code == http.StatusMethodNotAllowed, code == http.StatusForbidden:
		return NeedsHuman
	}
	return Permanent
}

// Upload streams opts.Body to CDI's upload proxy and, when opts.DataVolume
// is set, follows the DataVolume until CDI has written the image to the
// claim. Attempts that fail transiently are retried with backoff while no
// byte was sent (the request asks for "100-continue", so a proxy that
// refuses does so before the body leaves), or from the start when Body can
// seek. A 409 or 503 is first looked into on the DataVolume: a target that
// has its image already is done, one that is still busy is waited for.
// Errors are *Error values classified like the rest of this package.
func Upload(ctx context.Context, opts UploadOptions) error {
	u := &uploader{opts: opts}
	if err := u.prepare(ctx); err != nil {
		return err
	}
	if u.ownClient {
		defer func() { u.hc.CloseIdleConnections() }()
	}
	attempts := opts.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		sent, err := uploadOnce(ctx, u.hc, u.target, u.opts)
		var ue *UploadError
		isUE := errors.As(err, &ue)
		if opts.DataVolume != nil && (err == nil || isUE && (ue.StatusCode == http.StatusConflict || ue.StatusCode == http.StatusServiceUnavailable)) {
			// Taken (200), done already (409), or busy or not ready
			// (503): the DataVolume says which.
			done, ferr := followUpload(ctx, u.opts, u.restarts, err == nil || ue.StatusCode == http.StatusConflict)
			switch {
			case done:
				return nil
			case ferr != nil:
				return u.fail(classOf(ferr), ferr)
			}
			// Ready for an upload again: send it, if tries are left.
		} else if err == nil {
			return nil
		}
		if u.reread && isVerifyError(err) {
			if rerr := u.rereadCA(ctx, err); rerr != nil {
				return rerr
			}
			attempt--
			continue
		}
		class := classOf(err)
		// A 401 will not heal by itself: the caller needs a new token.
		retry := class == Transient && attempt < attempts && ctx.Err() == nil &&
			(ue == nil || ue.StatusCode != http.StatusUnauthorized)
		if retry && sent > 0 {
			retry = u.rewind()
		}
		if !retry {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (after %d bytes)", ctx.Err(), sent)
				class = Transient
			}
			return u.fail(class, err)
		}
		select {
		case <-ctx.Done():
			return u.fail(Transient, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// uploader is one Upload's state between its attempts.
type uploader struct {
	opts      UploadOptions
	target    string
	hc        *http.Client
	ownClient bool // hc was made here, and is closed when the upload ends
	// reread: the cluster's CA bundle may be read once more when the
	// proxy's certificate does not verify.
	reread bool
	// seeker rewinds the body to start for another attempt, when it can.
	seeker   io.Seeker
	canSeek  bool
	start    int64
	restarts int32 // the upload server's restarts before this upload
}

func (u *uploader) fail(class Class, err error) error {
	return &Error{Op: "upload", Kind: "DataVolume", Namespace: u.opts.Namespace, Name: u.opts.Name, Class: class, Err: err}
}

// prepare resolves the target, the CA and the HTTP client, where the body
// starts, and the upload server's restarts so far (one more after the
// upload means it failed on what it took).
func (u *uploader) prepare(ctx context.Context) error {
	var err error
	if u.target, err = uploadURL(u.opts.ProxyURL); err != nil {
		return u.fail(NeedsHuman, err)
	}
	if u.opts.InsecureSkipVerify {
		u.opts.CABundle = nil
	}
	if u.opts.CABundle != nil && len(u.opts.CACertPEM) == 0 {
		if u.opts.CACertPEM, err = u.opts.CABundle(ctx); err != nil {
			return u.fail(Classify(err), err)
		}
	}
	u.hc = u.opts.HTTPClient
	if u.hc == nil {
		if u.hc, err = uploadHTTPClient(u.opts); err != nil {
			return u.fail(NeedsHuman, err)
		}
		u.ownClient = true
	}
	u.reread = u.opts.CABundle != nil && u.opts.HTTPClient == nil
	u.seeker, u.canSeek = u.opts.Body.(io.Seeker)
	if u.canSeek {
		if u.start, err = u.seeker.Seek(0, io.SeekCurrent); err != nil {
			u.canSeek = false
		}
	}
	if u.opts.DataVolume != nil {
		dv, err := u.opts.DataVolume(ctx)
		if err != nil {
			if u.ownClient {
				u.hc.CloseIdleConnections()
			}
			return u.fail(Classify(err), err)
		}
		u.restarts = dv.Status.RestartCount
	}
	return nil
}

// rereadCA: the proxy's CA may have been renewed since the bundle (or the
// configured CA) was read: read the cluster's bundle once more and make a
// client that trusts it. verifyErr is the failed attempt's error.
func (u *uploader) rereadCA(ctx context.Context, verifyErr error) error {
	u.reread = false
	bundle, err := u.opts.CABundle(ctx)
	if err != nil {
		return u.fail(Classify(err), err)
	}
	if len(bundle) == 0 {
		return u.fail(classOf(verifyErr), verifyErr)
	}
	u.opts.CACertPEM = bundle
	u.hc.CloseIdleConnections()
	if u.hc, err = uploadHTTPClient(u.opts); err != nil {
		return u.fail(NeedsHuman, err)
	}
	return nil
}

// rewind puts the body back where the upload started, for another
// attempt; false when it cannot.
func (u *uploader) rewind() bool {
	if !u.canSeek {
		return false
	}
	_, err := u.seeker.Seek(u.start, io.SeekStart)
	return err == nil
}

// isVerifyError reports a proxy certificate that did not verify.
func isVerifyError(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var certInvalid x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	return errors.As(err, &unknownAuthority) || errors.As(err, &certInvalid) || errors.As(err, &verifyErr)
}

// classOf classifies an upload attempt's error.
func classOf(err error) Class {
	var ue *UploadError
	if errors.As(err, &ue) {
		return ue.Class()
	}
	return classify(err)
}

// followUpload reads the DataVolume after the proxy took the image or
// answered 409 or 503. It returns done once the DataVolume is Succeeded; an
// error when it failed, or when the upload server restarted (more than
// restarts) after failing on the image, with the reason CDI gives; and
// neither when the target is ready for an upload and taken is false (a 503:
// nothing of this upload is there). taken says the server has the image (200
// or 409): then the DataVolume is followed until one of the first two.
func followUpload(ctx context.Context, opts UploadOptions, restarts int32, taken bool) (bool, error) {
	poll := opts.Poll
	if poll <= 0 {
		poll = time.Second
	}
	for {
		dv, err := opts.DataVolume(ctx)
		if err != nil && !IsNotFound(err) && Classify(err) != Transient {
			return false, err
		}
		if err == nil {
			st := dv.Status
			reason, msg := runningCondition(dv)
			switch {
			case st.Phase == cdiv1beta1.Succeeded:
				return true, nil
			case st.Phase == cdiv1beta1.Failed:
				return false, fmt.Errorf("DataVolume failed: %s: %s", reason, msg)
			case st.RestartCount > restarts:
				return false, &UploadError{Message: msg}
			case !taken && st.Phase == cdiv1beta1.UploadReady:
				return false, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// runningCondition returns the reason and message of dv's Running
// condition, where CDI reports its transfer pod's state.
func runningCondition(dv *cdiv1beta1.DataVolume) (string, string) {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1beta1.DataVolumeRunning {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

func uploadOnce(ctx context.Context, hc *http.Client, target string, opts UploadOptions) (int64, error) {
	body := &countingReader{r: opts.Body, progress: opts.Progress}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, io.NopCloser(body))
	if err != nil {
		return 0, err
	}
	if opts.Size > 0 {
		req.ContentLength = opts.Size
	} else {
		req.ContentLength = -1
	}
	req.Header.Set("Authorization", "Bearer "+opts.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Expect", "100-continue")
	resp, err := hc.Do(req)
	if err != nil {
		return body.n, err
	}
	defer resp.Body.Close()
	// The answer is drained (up to 64 KiB, so that the connection can be
	// reused) but only its start is kept: an error page must not end up
	// whole in the migration record.
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return body.n, &UploadError{StatusCode: resp.StatusCode, Message: shortBody(msg, maxUploadErrorBody)}
	}
	return body.n, nil
}

type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		if c.progress != nil {
			c.progress(c.n)
		}
	}
	return n, err
}

func uploadURL(proxy string) (string, error) {
	u, err := url.Parse(proxy)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("upload proxy URL %q is not an http(s) URL", proxy)
	}
	if !strings.HasSuffix(u.Path, UploadPath) && !strings.HasSuffix(u.Path, uploadPathSync) {
		u.Path = strings.TrimSuffix(u.Path, "/") + UploadPath
	}
	return u.String(), nil
}

func uploadHTTPClient(opts UploadOptions) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: opts.InsecureSkipVerify, ServerName: opts.ServerName} //nolint:gosec // the user's explicit choice
	if len(opts.CACertPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.CACertPEM) {
			return nil, errors.New("the upload proxy CA certificate is not PEM")
		}
		tlsCfg.RootCAs = pool
	}
	if !opts.InsecureSkipVerify && opts.ServerName == "" && len(opts.AltServerNames) > 0 {
		u, err := url.Parse(opts.ProxyURL)
		if err != nil {
			return nil, err
		}
		names := append([]string{u.Hostname()}, opts.AltServerNames...)
		roots := tlsCfg.RootCAs
		// Verified in full by VerifyConnection: the chain to the CA as
		// always, the name against any of names.
		tlsCfg.InsecureSkipVerify = true //nolint:gosec // see VerifyConnection
		tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyAnyName(cs, roots, names) }
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // validation of a large image takes a while
		ExpectContinueTimeout: 5 * time.Second,
		ForceAttemptHTTP2:     false,
	}
	return &http.Client{Transport: tr}, nil
}

// verifyAnyName checks the peer's certificate as crypto/tls would (its
// chain to roots, or the system's when nil) and that it holds one of names,
// with the errors crypto/tls gives, so that callers tell a stale CA from a
// wrong name as they always do.
func verifyAnyName(cs tls.ConnectionState, roots *x509.CertPool, names []string) error {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return errors.New("the upload proxy presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
	}
	for _, n := range names {
		if certs[0].VerifyHostname(n) == nil {
			return nil
		}
	}
	return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: x509.HostnameError{Certificate: certs[0], Host: names[0]}}
}

// UploadProxySignerBundle is the ConfigMap in CDI's namespace where CDI's
// operator publishes the CAs that sign the upload proxy's certificate
// (v1.65.0, pkg/operator/resources/cert/factory.go), under
// UploadProxySignerBundleKey: the current CA and those not yet expired.
const (
	UploadProxySignerBundle    = "cdi-uploadproxy-signer-bundle"
	UploadProxySignerBundleKey = "ca-bundle.crt"
)

// UploadProxyCABundle reads the CA bundle of CDI's upload proxy from the
// cluster: ConfigMap cdi-uploadproxy-signer-bundle in namespace cdiNamespace.
func (c *Client) UploadProxyCABundle(ctx context.Context, cdiNamespace string) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := c.get(ctx, "ConfigMap", cdiNamespace, UploadProxySignerBundle, cm); err != nil {
		return nil, err
	}
	b := cm.Data[UploadProxySignerBundleKey]
	if b == "" {
		return nil, &Error{Op: "get", Kind: "ConfigMap", Namespace: cdiNamespace, Name: UploadProxySignerBundle, Class: Transient,
			Err: fmt.Errorf("no %s in it yet", UploadProxySignerBundleKey)}
	}
	return []byte(b), nil
}

// PublishedUploadProxyURL returns the upload proxy URL the cluster
// publishes in CDIConfig config's status.uploadProxyURL (CDI's config
// controller sets it from spec.uploadProxyURLOverride or the proxy's Route
// or Ingress), or "" when it publishes none.
func (c *Client) PublishedUploadProxyURL(ctx context.Context) (string, error) {
	cfg := &cdiv1beta1.CDIConfig{}
	err := c.get(ctx, "CDIConfig", "", "config", cfg)
	switch {
	case IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	case cfg.Status.UploadProxyURL == nil:
		return "", nil
	}
	u := *cfg.Status.UploadProxyURL
	if !strings.Contains(u, "://") {
		// CDI publishes a host name (a Route's or an Ingress's).
		u = "https://" + u
	}
	return u, nil
}

// WaitDataVolume polls the DataVolume until done says it has reached the
// wanted state, and returns it. A DataVolume that does not exist yet is
// waited for; one that is Failed ends the wait with an error carrying its
// reason (Transient, since CDI's failures are retried by recreating it).
func (c *Client) WaitDataVolume(ctx context.Context, namespace, name string, done func(*cdiv1beta1.DataVolume) bool) (*cdiv1beta1.DataVolume, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		dv, err := c.GetDataVolume(ctx, namespace, name)
		switch {
		case err == nil && done(dv):
			return dv, nil
		case err == nil && dv.Status.Phase == cdiv1beta1.Failed:
			reason, msg := "", ""
			for _, cond := range dv.Status.Conditions {
				if cond.Type == cdiv1beta1.DataVolumeRunning {
					reason, msg = cond.Reason, cond.Message
				}
			}
			return dv, &Error{Op: "wait", Kind: "DataVolume", Namespace: namespace, Name: name, Class: Transient,
				Err: fmt.Errorf("DataVolume failed: %s: %s", reason, msg)}
		case err != nil && !IsNotFound(err) && Classify(err) != Transient:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return dv, &Error{Op: "wait", Kind: "DataVolume", Namespace: namespace, Name: name, Class: Transient, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// DataVolumeInPhase returns a WaitDataVolume condition for phase.
func DataVolumeInPhase(phase cdiv1beta1.DataVolumePhase) func(*cdiv1beta1.DataVolume) bool {
	return func(dv *cdiv1beta1.DataVolume) bool { return dv.Status.Phase == phase }
}

// maxUploadErrorBody is how much of an upload proxy's error answer an
// UploadError keeps.
const maxUploadErrorBody = 512

// shortBody returns at most limit bytes of b (cut at a UTF-8 boundary),
// saying how long it was when cut.
func shortBody(b []byte, limit int) string {
	if len(b) <= limit {
		return string(b)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes in all)", b[:cut], len(b))
}
