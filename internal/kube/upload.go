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
	"strings"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	uploadv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/upload/v1beta1"
)

// UploadPath is the upload proxy's synchronous upload endpoint: it answers
// once the image has been received and validated.
const UploadPath = "/v1beta1/upload"

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
	if _, err := c.Raw(); err != nil {
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
}

// UploadError is the upload proxy's answer to a failed upload.
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
	return fmt.Sprintf("upload proxy answered %d: %s", e.StatusCode, msg)
}

// uploadClass classifies the upload proxy's answers: 400 means the image
// was refused (validation failed, a bad request); 401 means the token was
// refused (expired: request a new one and retry); 503 means the upload
// target is not ready yet; 5xx other server trouble; 404/405 a wrong proxy
// URL.
func uploadClass(code int) Class {
	switch {
	case code == http.StatusUnauthorized, code == http.StatusServiceUnavailable,
		code == http.StatusTooManyRequests, code >= 500:
		return Transient
	case code == http.StatusNotFound, code == http.StatusMethodNotAllowed, code == http.StatusForbidden:
		return NeedsHuman
	}
	return Permanent
}

// Upload streams opts.Body to CDI's upload proxy and returns once the proxy
// has received and validated it (the DataVolume then turns Succeeded).
// Attempts that fail transiently are retried with backoff while no byte
// was sent (the request asks for "100-continue", so a proxy that refuses
// does so before the body leaves), or from the start when Body can seek.
// Errors are *Error values classified like the rest of this package.
func Upload(ctx context.Context, opts UploadOptions) error {
	fail := func(class Class, err error) error {
		return &Error{Op: "upload", Kind: "DataVolume", Namespace: opts.Namespace, Name: opts.Name, Class: class, Err: err}
	}
	target, err := uploadURL(opts.ProxyURL)
	if err != nil {
		return fail(NeedsHuman, err)
	}
	hc := opts.HTTPClient
	if hc == nil {
		if hc, err = uploadHTTPClient(opts); err != nil {
			return fail(NeedsHuman, err)
		}
		defer hc.CloseIdleConnections()
	}
	attempts := opts.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	var start int64
	seeker, canSeek := opts.Body.(io.Seeker)
	if canSeek {
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			canSeek = false
		}
	}
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		sent, err := uploadOnce(ctx, hc, target, opts)
		if err == nil {
			return nil
		}
		class := classify(err)
		var ue *UploadError
		if errors.As(err, &ue) {
			class = uploadClass(ue.StatusCode)
		}
		// A 401 will not heal by itself: the caller needs a new token.
		retry := class == Transient && attempt < attempts && ctx.Err() == nil &&
			(ue == nil || ue.StatusCode != http.StatusUnauthorized)
		if retry && sent > 0 {
			if canSeek {
				_, serr := seeker.Seek(start, io.SeekStart)
				retry = serr == nil
			} else {
				retry = false
			}
		}
		if !retry {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (after %d bytes)", ctx.Err(), sent)
				class = Transient
			}
			return fail(class, err)
		}
		select {
		case <-ctx.Done():
			return fail(Transient, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
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
	if !strings.HasSuffix(u.Path, UploadPath) {
		u.Path = strings.TrimSuffix(u.Path, "/") + UploadPath
	}
	return u.String(), nil
}

func uploadHTTPClient(opts UploadOptions) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: opts.InsecureSkipVerify} //nolint:gosec // the user's explicit choice
	if len(opts.CACertPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.CACertPEM) {
			return nil, errors.New("the upload proxy CA certificate is not PEM")
		}
		tlsCfg.RootCAs = pool
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
