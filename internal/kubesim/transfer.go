package kubesim

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Upload proxy paths, as CDI's.
const (
	UploadPathSync  = "/v1beta1/upload"
	UploadPathAsync = "/v1beta1/upload-async"
)

func imagePath(dir, namespace, name string) string {
	return filepath.Join(dir, namespace, name+".img")
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
	h := sha256.New()
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

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
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
	pki, err := newServingPKI("cdi-uploadproxy", []string{"cdi-uploadproxy.cdi.svc", "localhost"})
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	mux.HandleFunc(UploadPathSync, s.serveUpload(false))
	mux.HandleFunc(UploadPathAsync, s.serveUpload(true))
	s.proxy, err = s.serveTLS(mux, func(srv *http.Server) {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12}
	})
	if err != nil {
		return err
	}
	s.proxyCA = pki.caPEM
	return nil
}

// UploadProxyURL returns the upload proxy's base URL,
// https://127.0.0.1:<port>.
func (s *Sim) UploadProxyURL() string { return fmt.Sprintf("https://127.0.0.1:%d", s.proxy.port) }

// UploadProxyBytes returns how many request body bytes the upload proxy
// has received since the sim started, over all uploads and attempts: what
// crossed the wire to it.
func (s *Sim) UploadProxyBytes() int64 { return s.proxyBytes.Load() }

// UploadProxyCACertPEM returns the CA certificate that signed the upload
// proxy's serving certificate.
func (s *Sim) UploadProxyCACertPEM() []byte { return s.proxyCA }

var authHeader = regexp.MustCompile(`(?i)^Bearer\s+([A-Za-z0-9\-\._~\+\/]+)$`)

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
		dv, err := s.waitUploadReady(r.Context(), claims.Namespace, claims.Name)
		if err != nil {
			// As CDI's proxy: 503 with the reason in the body, before
			// reading any of it.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		t, err := s.beginUpload(dv.UID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, available, _ := capacity(dv, s.opts.FilesystemOverhead)
		requested, _, _ := capacity(dv, s.opts.FilesystemOverhead)
		path := imagePath(s.dir, dv.Namespace, dv.Name)
		rec, err := receive(r.Body, path, requested+requested/10+1<<20, func(n int64) {
			s.proxyBytes.Add(n)
			s.mu.Lock()
			t.received += n
			s.mu.Unlock()
		})
		if errors.Is(err, errTooLarge) {
			res := &transferResult{reason: ReasonError, message: fmt.Sprintf("Unable to process data: image is larger than the %d-byte claim", requested)}
			s.endUpload(t, res, nil)
			http.Error(w, res.message, http.StatusBadRequest)
			return
		}
		if err != nil {
			// The client went away (or the disk failed): the upload
			// server waits for another attempt, as CDI's does.
			s.endUpload(t, nil, nil)
			http.Error(w, "receiving upload: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if async {
			w.WriteHeader(http.StatusOK)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		res := s.validateAndSettle(s.ctx, &rec, path, available)
		s.endUpload(t, res, &rec)
		if async {
			return
		}
		if !res.ok {
			http.Error(w, res.message, http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
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
		case dv.Status.Phase == cdiv1.UploadReady:
			return dv, nil
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

func (s *Sim) beginUpload(uid types.UID) (*transfer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.uploads[uid]
	switch {
	case t == nil:
		t = &transfer{}
		s.uploads[uid] = t
	case t.active:
		return nil, errors.New("an upload to this PVC is already in progress")
	case t.result != nil:
		return nil, errors.New("upload already processed")
	}
	t.active, t.received = true, 0
	return t, nil
}

func (s *Sim) endUpload(t *transfer, res *transferResult, rec *Received) {
	s.mu.Lock()
	t.active = false
	t.result = res
	s.mu.Unlock()
	if res != nil && res.ok && rec != nil {
		s.recordReceived(rec)
	}
	s.poke()
}

func (s *Sim) recordReceived(rec *Received) {
	ns := filepath.Base(filepath.Dir(rec.Path))
	name := filepath.Base(rec.Path)
	name = name[:len(name)-len(".img")]
	s.mu.Lock()
	s.received[ns+"/"+name] = *rec
	s.mu.Unlock()
}

// startImport starts downloading the DataVolume's http source in the
// background. Only loopback URLs are fetched.
func (s *Sim) startImport(dv *cdiv1.DataVolume) {
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
		res, rec := s.download(ctx, t, src, path, requested+requested/10+1<<20, available)
		s.mu.Lock()
		t.active, t.result = false, res
		s.mu.Unlock()
		if res.ok {
			s.recordReceived(rec)
		}
		s.poke()
	}()
}

func (s *Sim) download(ctx context.Context, t *transfer, src, path string, limit, available int64) (*transferResult, *Received) {
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
		// Test file servers use throwaway certificates.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback test servers only
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return &transferResult{reason: ReasonError, message: err.Error()}, nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &transferResult{retryable: true, reason: ReasonError, message: "Unable to connect to http data source: " + err.Error()}, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &transferResult{retryable: true, reason: ReasonError, message: fmt.Sprintf(
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
		return &transferResult{retryable: true, reason: ReasonError, message: "Unable to process data: " + err.Error()}, nil
	}
	return s.validateAndSettle(ctx, &rec, path, available), &rec
}
