package kubesim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Upload proxy paths, as CDI's.
const (
	UploadPathSync  = "/v1beta1/upload"
	UploadPathAsync = "/v1beta1/upload-async"
)

// imagePath is the image file of the claim namespace/name: disk.img in the
// claim's folder, as CDI's importer and upload server write it to the
// claim mounted on /data.
func imagePath(dir, namespace, name string) string {
	return filepath.Join(dir, namespace, name, diskImageName)
}

// receive streams r to a scratch file beside the claim's image (as CDI's
// upload server and importer keep what arrives in scratch space until
// qemu-img has converted it), hashing as it goes, and refuses more than
// limit bytes. count is called with the running total. The Received it
// returns describes the bytes as they arrived; settle moves them into the
// claim.
func receive(r io.Reader, path string, limit int64, count func(int64)) (Received, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Received{}, err
	}
	scratch := path + scratchSuffix
	f, err := os.Create(scratch)
	if err != nil {
		return Received{}, err
	}
	h := diskdigest.New()
	w := io.MultiWriter(f, h, countWriter(count))
	n, err := io.Copy(w, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = errTooLarge
	}
	if err != nil {
		_ = os.Remove(scratch)
		return Received{}, err
	}
	return Received{Path: scratch, SentSHA256: hex.EncodeToString(h.Sum(nil)), SentBytes: n}, nil
}

// scratchSuffix names the scratch file of a claim's image.
const scratchSuffix = ".scratch"

// settle writes a validated arrival into the claim the way CDI does: a
// qcow2 image is converted to raw with qemu-img (the claim holds the disk
// as the guest sees it), a raw one is moved as it is. rec then describes
// the claim's content: Path, Format raw, and SHA256 and Size of the raw
// bytes, while the Sent fields keep what crossed the wire.
func (s *Sim) settle(ctx context.Context, rec *Received, path string) error {
	scratch := rec.Path
	defer os.Remove(scratch)
	switch rec.SentFormat {
	case "raw":
		if err := os.Rename(scratch, path); err != nil {
			return err
		}
		rec.SHA256, rec.Size = rec.SentSHA256, rec.SentBytes
	case "qcow2":
		part := path + ".part"
		out, err := exec.CommandContext(ctx, s.opts.QemuImg, "convert", "-f", "qcow2", "-O", "raw", scratch, part).CombinedOutput()
		if err != nil {
			_ = os.Remove(part)
			return fmt.Errorf("qemu-img convert: %v: %s", err, out)
		}
		if err := os.Rename(part, path); err != nil {
			return err
		}
		rec.claimHash = &lazyHash{path: path} // hashed when first asked for
	default:
		return fmt.Errorf("cannot write a %s image to the claim", rec.SentFormat)
	}
	rec.Path, rec.Format = path, "raw"
	return nil
}

// hashFile is the disk digest (package diskdigest) and size of the file
// at path, as the provider records a disk's.
func hashFile(path string) (string, int64, error) {
	s, err := sparsefile.Hash(context.Background(), path)
	return s.SHA256, s.Bytes, err
}

var errTooLarge = errors.New("image is larger than the claim")

type countWriter func(int64)

func (c countWriter) Write(p []byte) (int, error) {
	if c != nil {
		c(int64(len(p)))
	}
	return len(p), nil
}

// validate runs qemu-img info on the received image and checks it as CDI
// does before writing it to the claim: raw or qcow2, no backing file, and a
// virtual size that fits the available space.
func (s *Sim) validate(ctx context.Context, rec *Received, available int64) *transferResult {
	out, err := exec.CommandContext(ctx, s.opts.QemuImg, "info", "--output=json", rec.Path).Output()
	if err != nil {
		msg := err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		return &transferResult{reason: ReasonError, message: "Unable to process data: qemu-img info: " + msg}
	}
	var info struct {
		Format          string `json:"format"`
		VirtualSize     int64  `json:"virtual-size"`
		BackingFilename string `json:"backing-filename"`
		FormatSpecific  struct {
			Data struct {
				DataFile string `json:"data-file"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return &transferResult{reason: ReasonError, message: "Unable to process data: qemu-img info output: " + err.Error()}
	}
	rec.SentFormat, rec.VirtualSize = info.Format, info.VirtualSize
	switch {
	case info.Format != "raw" && info.Format != "qcow2":
		return &transferResult{reason: ReasonError, message: fmt.Sprintf("Unable to process data: Invalid format %s for image %s", info.Format, filepath.Base(rec.Path))}
	case info.BackingFilename != "":
		return &transferResult{reason: ReasonError, message: "Unable to process data: Image is invalid: backing file " + info.BackingFilename}
	case info.FormatSpecific.Data.DataFile != "":
		return &transferResult{reason: ReasonError, message: "Unable to process data: Image is invalid: external data file " + info.FormatSpecific.Data.DataFile}
	case info.VirtualSize > available:
		return &transferResult{reason: ReasonError, message: fmt.Sprintf(
			"Virtual image size %d is larger than the reported available storage %d. A larger PVC is required.", info.VirtualSize, available)}
	}
	return &transferResult{ok: true}
}

// validateAndSettle validates an arrival and writes it into the claim at
// path; a failure leaves nothing there.
func (s *Sim) validateAndSettle(ctx context.Context, rec *Received, path string, available int64) *transferResult {
	res := s.validate(ctx, rec, available)
	if !res.ok {
		_ = os.Remove(rec.Path)
		return res
	}
	if err := s.settle(ctx, rec, path); err != nil {
		return &transferResult{reason: ReasonError, message: "Unable to process data: " + err.Error()}
	}
	return res
}

// startUploadProxy serves CDI's upload proxy API on a free port.
func (s *Sim) startUploadProxy() error {
	s.proxyCerts = &proxyCerts{renewal: s.opts.UploadProxyCARenewal}
	if err := s.proxyCerts.rotate(); err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	mux.HandleFunc(UploadPathSync, s.serveUpload(false))
	mux.HandleFunc(UploadPathAsync, s.serveUpload(true))
	var err error
	s.proxy, err = s.serveTLS(mux, func(srv *http.Server) {
		srv.TLSConfig = &tls.Config{GetCertificate: s.proxyCerts.getCertificate, MinVersion: tls.VersionTLS12}
	})
	return err
}

// UploadProxyURL returns the upload proxy's base URL,
// https://127.0.0.1:<port>.
func (s *Sim) UploadProxyURL() string { return fmt.Sprintf("https://127.0.0.1:%d", s.proxy.port) }

// UploadProxyBytes returns how many request body bytes the upload proxy
// has received since the sim started, over all uploads and attempts: what
// crossed the wire to it.
func (s *Sim) UploadProxyBytes() int64 { return s.proxyBytes.Load() }

// UploadRequest is an upload request the proxy took (with a valid token):
// the claim its token is for, its path, and when it arrived.
type UploadRequest struct {
	Namespace, Name, Path string
	At                    time.Time
}

// UploadRequests returns the paths of the upload requests the proxy has
// taken (with a valid token), in order.
func (s *Sim) UploadRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths := make([]string, len(s.uploads))
	for i, u := range s.uploads {
		paths[i] = u.Path
	}
	return paths
}

// UploadRequestLog returns the upload requests the proxy has taken, in
// order: a test tells by their times which came after an event such as
// RotateUploadProxyCA.
func (s *Sim) UploadRequestLog() []UploadRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]UploadRequest(nil), s.uploads...)
}

// UploadProxyCACertPEM returns the CA certificate that signed the upload
// proxy's current serving certificate (it changes when the CA is renewed:
// see RotateUploadProxyCA).
func (s *Sim) UploadProxyCACertPEM() []byte { return s.proxyCerts.current() }

// UploadProxyServerName is a name the upload proxy's certificate holds.
func (s *Sim) UploadProxyServerName() string { return uploadProxyNames[2] }

var authHeader = regexp.MustCompile(`(?i)^Bearer\s+([A-Za-z0-9\-\._~\+\/]+)$`)

// serveUpload is CDI's upload proxy (v1.65.0,
// pkg/uploadproxy/uploadproxy.go, handleUploadRequest): it checks the token,
// waits for the claim's upload pod to be ready, and forwards the request,
// body and path as they came, to that pod's upload server over mutual TLS.
// The server's answer is the client's.
func (s *Sim) serveUpload(async bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		switch {
		case r.Method == http.MethodHead && async:
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		m := authHeader.FindStringSubmatch(r.Header.Get("Authorization"))
		if m == nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		claims, err := s.tokens.validate(m[1])
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if claims.Operation != "Upload" || claims.Resource != "persistentvolumeclaims" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return
		}
		s.mu.Lock()
		s.uploads = append(s.uploads, UploadRequest{Namespace: claims.Namespace, Name: claims.Name, Path: r.URL.Path, At: time.Now()})
		s.mu.Unlock()
		dv, err := s.waitUploadReady(r.Context(), claims.Namespace, claims.Name)
		if err != nil {
			// As CDI's proxy: 503 with the reason in the body, before
			// reading any of it.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		pod := s.pods[dv.UID]
		s.mu.Unlock()
		body := newTeeBody(r.Body, func(n int64) { s.proxyBytes.Add(n) })
		r.Body = body
		var errLog bytes.Buffer
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "https", uploadServiceName(dv.Namespace, dv.Name)
				pr.Out.Host = ""
			},
			Transport: s.upload.proxyClient,
			ErrorLog:  log.New(&errLog, "", 0),
			ModifyResponse: func(resp *http.Response) error {
				if resp.StatusCode == http.StatusOK && pod != nil {
					pod.mu.Lock()
					pod.sent = body.image()
					pod.mu.Unlock()
				}
				return nil
			},
		}
		rp.ServeHTTP(w, r)
		if errLog.Len() > 0 {
			fmt.Fprintf(w, "error in upload-proxy: %s", errLog.String())
		}
	}
}

// waitUploadReady waits, as CDI's proxy does, for the DataVolume to be
// UploadReady, and says why not when it gives up.
func (s *Sim) waitUploadReady(ctx context.Context, namespace, name string) (*cdiv1.DataVolume, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.UploadReadyWait)
	defer cancel()
	phase := "unknown"
	for {
		dv := &cdiv1.DataVolume{}
		err := s.cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dv)
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s that doesn't exist", name)
		case err != nil:
			phase = "unknown: " + err.Error()
		case dv.Spec.Source == nil || dv.Spec.Source.Upload == nil:
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s that is not an upload target", name)
		case dv.Status.Phase == cdiv1.Succeeded:
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s that already finished uploading", name)
		case dv.Status.Phase == cdiv1.Failed:
			return nil, fmt.Errorf("rejecting Upload Request for PVC %s whose DataVolume failed", name)
		case dv.Status.Phase == cdiv1.UploadReady && s.uploadPodReady(dv.UID):
			return dv, nil
		case dv.Status.Phase == cdiv1.UploadReady:
			phase = "UploadReady, upload pod not ready"
		default:
			phase = string(dv.Status.Phase)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("upload not ready: DataVolume %s/%s is in phase %q after %v", namespace, name, phase, s.opts.UploadReadyWait)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sim) recordReceived(ns, name string, rec *Received) {
	s.mu.Lock()
	s.received[ns+"/"+name] = *rec
	s.mu.Unlock()
}

// startImport starts downloading the DataVolume's http source in the
// background. Only loopback URLs are fetched.
func (s *Sim) startImport(dv *cdiv1.DataVolume, roots *x509.CertPool) {
	ctx, cancel := context.WithCancel(s.ctx)
	t := &transfer{cancel: cancel, active: true}
	s.mu.Lock()
	if old := s.imports[dv.UID]; old != nil && old.cancel != nil {
		old.cancel()
	}
	s.imports[dv.UID] = t
	s.mu.Unlock()
	requested, available, _ := capacity(dv, s.opts.FilesystemOverhead)
	path := imagePath(s.dir, dv.Namespace, dv.Name)
	src := dv.Spec.Source.HTTP.URL
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		res, rec := s.download(ctx, t, src, roots, path, requested+requested/10+1<<20, available)
		s.mu.Lock()
		t.active, t.result = false, res
		s.mu.Unlock()
		if res.ok {
			s.recordReceived(dv.Namespace, dv.Name, rec)
		}
		s.poke()
	}()
}

func (s *Sim) download(ctx context.Context, t *transfer, src string, roots *x509.CertPool, path string, limit, available int64) (*transferResult, *Received) {
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return &transferResult{reason: ReasonError, message: fmt.Sprintf("Unable to connect to http data source: invalid URL %q", src)}, nil
	}
	if !isLoopbackHost(u.Hostname()) {
		return &transferResult{reason: ReasonError, message: fmt.Sprintf(
			"kubesim refuses to import from %s: tests may only use 127.0.0.1 or localhost URLs", u.Host)}, nil
	}
	hc := &http.Client{Transport: &http.Transport{
		Proxy: nil,
		// What CDI's importer trusts (see importerRoots).
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return &transferResult{reason: ReasonError, message: err.Error()}, nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &transferResult{reason: ReasonError, message: "Unable to connect to http data source: " + err.Error()}, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &transferResult{reason: ReasonError, message: fmt.Sprintf(
			"Unable to connect to http data source: expected status code 200, got %d. Status: %s", resp.StatusCode, resp.Status)}, nil
	}
	s.mu.Lock()
	t.total = resp.ContentLength
	s.mu.Unlock()
	rec, err := receive(resp.Body, path, limit, func(n int64) {
		s.mu.Lock()
		t.received += n
		s.mu.Unlock()
	})
	switch {
	case errors.Is(err, errTooLarge):
		return &transferResult{reason: ReasonError, message: "Unable to process data: image is larger than the claim"}, nil
	case err != nil:
		return &transferResult{reason: ReasonError, message: "Unable to process data: " + err.Error()}, nil
	}
	return s.validateAndSettle(ctx, &rec, path, available), &rec
}
