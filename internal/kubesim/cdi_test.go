package kubesim

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

func TestAPIServiceServesUploadTokens(t *testing.T) {
	c := cluster.Get(t)
	s := startSim(t, fast(c, "kubesim-none"))
	ok, why, err := s.APIServiceAvailable(t.Context())
	if err != nil || !ok {
		t.Fatalf("APIService Available = %v (%s, %v), want true", ok, why, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := dc.ServerResourcesForGroupVersion("upload.cdi.kubevirt.io/v1beta1")
	if err != nil {
		t.Fatalf("discovery through the API server: %v", err)
	}
	if len(list.APIResources) != 1 || list.APIResources[0].Name != "uploadtokenrequests" || !list.APIResources[0].Namespaced {
		t.Errorf("discovered %+v, want namespaced uploadtokenrequests", list.APIResources)
	}

	token, err := kube.NewForRESTConfig(c.RESTConfig()).RequestUploadToken(t.Context(), "default", "some-pvc")
	if err != nil {
		t.Fatalf("RequestUploadToken: %v", err)
	}
	claims, err := s.tokens.validate(token)
	if err != nil || claims.Namespace != "default" || claims.Name != "some-pvc" {
		t.Errorf("token claims = %+v, %v; want default/some-pvc", claims, err)
	}

	// RBAC applies: the API server authorizes before proxying.
	cfg, err := c.UserConfig("nobody")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.NewForRESTConfig(cfg).RequestUploadToken(t.Context(), "default", "some-pvc")
	if kube.Classify(err) != kube.NeedsHuman {
		t.Errorf("token request without rights: %v (class %v), want Forbidden (needs-human)", err, kube.Classify(err))
	}

	// Straight to the token server, not through the front proxy: refused.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.opts.RESTConfig.CAData)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+itoa(s.tokenAPI.port)+"/apis/upload.cdi.kubevirt.io/v1beta1", nil)
	req.Header.Set("X-Remote-User", "system:admin")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("request with a forged X-Remote-User and no front-proxy certificate: %d, want 401", resp.StatusCode)
	}
}

func TestUploadEndToEnd(t *testing.T) {
	for _, format := range []string{"qcow2", "raw"} {
		t.Run(format, func(t *testing.T) {
			s, cl, ns, kc := uploadSim(t)
			// The claim holds the guest-visible raw disk whatever format
			// is sent: sum is that content's hash, sentSum the file's.
			path, sum := image(t, "raw", "64M")
			sentSum := sum
			if format == "qcow2" {
				qcow := filepath.Join(t.TempDir(), "disk.qcow2")
				if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", path, qcow).CombinedOutput(); err != nil {
					t.Fatalf("qemu-img convert: %v: %s", err, out)
				}
				path, sentSum = qcow, fileSHA(t, qcow)
			}

			if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "disk-0", "100Mi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
				t.Fatal(err)
			}
			var phases []cdiv1.DataVolumePhase
			dv, err := kc.WaitDataVolume(t.Context(), ns, "disk-0", func(dv *cdiv1.DataVolume) bool {
				if n := len(phases); n == 0 || phases[n-1] != dv.Status.Phase {
					phases = append(phases, dv.Status.Phase)
				}
				return dv.Status.Phase == cdiv1.UploadReady
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(toStrings(phases), " "); !strings.HasSuffix(got, "UploadScheduled UploadReady") {
				t.Errorf("phases seen %q, want ... UploadScheduled UploadReady", got)
			}
			if b, r := dvCondition(dv, cdiv1.DataVolumeBound), dvCondition(dv, cdiv1.DataVolumeRunning); b.Status != "True" || r.Status != "True" {
				t.Errorf("UploadReady conditions Bound=%s Running=%s, want True True", b.Status, r.Status)
			}

			token, err := kc.RequestUploadToken(t.Context(), ns, "disk-0")
			if err != nil {
				t.Fatal(err)
			}
			f, size := openImage(t, path)
			var last int64
			err = kube.Upload(t.Context(), kube.UploadOptions{
				ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token,
				Body: f, Size: size, Progress: func(n int64) { last = n }, Namespace: ns, Name: "disk-0",
			})
			if err != nil {
				t.Fatalf("Upload: %v", err)
			}
			if last != size {
				t.Errorf("Progress ended at %d, want %d", last, size)
			}
			dv = waitDVPhase(t, cl, ns, "disk-0", cdiv1.Succeeded)
			if dv.Status.Progress != "100.0%" {
				t.Errorf("progress %q, want 100.0%%", dv.Status.Progress)
			}
			if r := dvCondition(dv, cdiv1.DataVolumeReady); r.Status != "True" {
				t.Errorf("Ready condition %+v, want True", r)
			}
			got, ok := s.ReceivedSHA256(ns, "disk-0")
			if !ok || got != sum {
				t.Errorf("ReceivedSHA256 = %q, %v; want %q", got, ok, sum)
			}
			// CDI's upload server grows the disk to the claim's usable
			// size: the sent disk, then zeros.
			if got, err := claimSHA(s.ReceivedPath(ns, "disk-0"), 64<<20); err != nil || got != sum {
				t.Errorf("file at ReceivedPath differs from what was sent: %v", err)
			}
			rec, _ := s.ReceivedImage(ns, "disk-0")
			if rec.Format != "raw" || rec.Size != 64<<20 || rec.VirtualSize != 64<<20 ||
				rec.SentFormat != format || rec.SentBytes != size || rec.SentSHA256 != sentSum {
				t.Errorf("ReceivedImage = %+v, want raw in the claim, 64MiB, %s sent (%d bytes, sha256 %s)", rec, format, size, sentSum)
			}
			if n := s.UploadProxyBytes(); n != size {
				t.Errorf("UploadProxyBytes = %d, want %d", n, size)
			}
			if _, err := os.Stat(filepath.Dir(s.ReceivedPath(ns, "disk-0")) + ".scratch"); !os.IsNotExist(err) {
				t.Errorf("scratch claim left behind: %v", err)
			}

			// A second upload into a finished DataVolume is refused.
			_, _ = f.Seek(0, 0)
			err = kube.Upload(t.Context(), kube.UploadOptions{ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token, Body: f, Size: size, Attempts: 1})
			var ue *kube.UploadError
			if !errors.As(err, &ue) || ue.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ue.Message, "already finished uploading") {
				t.Errorf("second upload: %v, want 503 already finished uploading", err)
			}
		})
	}
}

func toStrings(ps []cdiv1.DataVolumePhase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

func TestUploadRefusals(t *testing.T) {
	s, cl, ns, kc := uploadSim(t)
	small, _ := image(t, "qcow2", "1G")
	up := func(token, path string) error {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return kube.Upload(t.Context(), kube.UploadOptions{ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token, Body: f, Attempts: 1})
	}
	status := func(err error) int {
		var ue *kube.UploadError
		if errors.As(err, &ue) {
			return ue.StatusCode
		}
		return 0
	}

	t.Run("unknown token", func(t *testing.T) {
		err := up("not.a-token", small)
		if status(err) != http.StatusUnauthorized || kube.Classify(err) != kube.Transient {
			t.Errorf("got %v (class %v), want 401, transient (ask for a new token)", err, kube.Classify(err))
		}
	})
	t.Run("expired token", func(t *testing.T) {
		old := s.tokens.ttl
		s.tokens.ttl = -time.Second
		token, _ := s.tokens.issue(ns, "x")
		s.tokens.ttl = old
		if err := up(token, small); status(err) != http.StatusUnauthorized {
			t.Errorf("got %v, want 401", err)
		}
	})
	t.Run("no such DataVolume", func(t *testing.T) {
		token, _ := kc.RequestUploadToken(t.Context(), ns, "missing")
		err := up(token, small)
		if status(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "doesn't exist") {
			t.Errorf("got %v, want 503 doesn't exist", err)
		}
	})
	// CDI's upload server refuses an image whose virtual size does not fit
	// with 400 and the sizes, and the DataVolume stays UploadReady: real
	// CDI never fails it for a refused upload.
	t.Run("virtual size too large", func(t *testing.T) {
		if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "too-small", "512Mi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
			t.Fatal(err)
		}
		waitDVPhase(t, cl, ns, "too-small", cdiv1.UploadReady)
		token, _ := kc.RequestUploadToken(t.Context(), ns, "too-small")
		err := up(token, small)
		var ue *kube.UploadError
		if status(err) != http.StatusBadRequest || kube.Classify(err) != kube.Permanent || !errors.As(err, &ue) {
			t.Fatalf("got %v (class %v), want 400, permanent", err, kube.Classify(err))
		}
		if v, a, ok := ue.SizeRefusal(); !ok || v != 1<<30 || a != 512<<20 {
			t.Errorf("SizeRefusal = %d, %d, %v; want %d, %d (the server's message: %s)", v, a, ok, 1<<30, 512<<20, ue.Message)
		}
		stays(t, cl, ns, "too-small", cdiv1.UploadReady)
		if _, ok := s.ReceivedSHA256(ns, "too-small"); ok {
			t.Error("ReceivedSHA256 reports an image that failed validation")
		}
	})
	// Every image validation error comes back as lack of room (400; CDI's
	// IsNoCapacityError takes in ValidationSizeError), permanent; the
	// DataVolume stays UploadReady.
	t.Run("backing file", func(t *testing.T) {
		if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "backed", "2Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
			t.Fatal(err)
		}
		waitDVPhase(t, cl, ns, "backed", cdiv1.UploadReady)
		token, _ := kc.RequestUploadToken(t.Context(), ns, "backed")
		err := up(token, backedImage(t))
		if status(err) != http.StatusBadRequest || kube.Classify(err) != kube.Permanent || !strings.Contains(err.Error(), "invalid backing file") {
			t.Errorf("got %v (class %v), want 400 invalid backing file, permanent", err, kube.Classify(err))
		}
		stays(t, cl, ns, "backed", cdiv1.UploadReady)
	})
	// Any other processing error is a 500 ("Saving stream failed: ..."),
	// a refusal all the same.
	t.Run("corrupt gzip", func(t *testing.T) {
		if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "gz", "2Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
			t.Fatal(err)
		}
		waitDVPhase(t, cl, ns, "gz", cdiv1.UploadReady)
		token, _ := kc.RequestUploadToken(t.Context(), ns, "gz")
		err := up(token, corruptGzip(t))
		if status(err) != http.StatusInternalServerError || kube.Classify(err) != kube.Permanent || !strings.Contains(err.Error(), "Saving stream failed") {
			t.Errorf("got %v (class %v), want 500 Saving stream failed, permanent", err, kube.Classify(err))
		}
		stays(t, cl, ns, "gz", cdiv1.UploadReady)
	})
	// qemu-img, which converts what arrived, takes a VMDK as a VMDK: the
	// claim holds its disk.
	t.Run("a VMDK is converted", func(t *testing.T) {
		if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "vmdk", "2Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
			t.Fatal(err)
		}
		vmdk, _ := image(t, "vmdk", "64M")
		waitDVPhase(t, cl, ns, "vmdk", cdiv1.UploadReady)
		token, _ := kc.RequestUploadToken(t.Context(), ns, "vmdk")
		if err := up(token, vmdk); err != nil {
			t.Fatalf("got %v, want it taken", err)
		}
		waitDVPhase(t, cl, ns, "vmdk", cdiv1.Succeeded)
		zeros := diskdigest.Bytes(make([]byte, 64<<20))
		if rec, _ := s.ReceivedImage(ns, "vmdk"); rec.SHA256 != zeros || rec.VirtualSize != 64<<20 {
			t.Errorf("the claim holds %s (virtual size %d), want the VMDK's empty 64 MiB disk", rec.SHA256, rec.VirtualSize)
		}
	})
}

// corruptGzip is a file that starts as gzip and is not.
func corruptGzip(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img.gz")
	if err := os.WriteFile(path, append([]byte("\x1f\x8b\x08\x00"), strings.Repeat("not gzip ", 1000)...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// backedImage makes a qcow2 image with a backing file that is gone (the
// upload server's mount namespace sees this machine's other files, a pod
// would not).
func backedImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base, top := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "top.qcow2")
	for _, args := range [][]string{
		{"create", "-f", "qcow2", base, "64M"},
		{"create", "-f", "qcow2", "-b", base, "-F", "qcow2", top},
	} {
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	if err := os.Remove(base); err != nil {
		t.Fatal(err)
	}
	return top
}

// stays checks that the DataVolume is in phase and stays there for a while.
func stays(t *testing.T, cl client.Client, ns, name string, phase cdiv1.DataVolumePhase) {
	t.Helper()
	for range 10 {
		if dv := getDV(t, cl, ns, name); dv.Status.Phase != phase {
			t.Fatalf("DataVolume %s is %s, want it to stay %s", name, dv.Status.Phase, phase)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func TestUploadNotReady(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	opts := fast(c, ns)
	opts.Step, opts.UploadReadyWait = 3*time.Second, 300*time.Millisecond
	s := startSim(t, opts)
	kc := kube.NewForRESTConfig(c.RESTConfig())
	if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "later", "2Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
		t.Fatal(err)
	}
	token, err := kc.RequestUploadToken(t.Context(), ns, "later")
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	err = kube.Upload(t.Context(), kube.UploadOptions{
		ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token, Attempts: 2,
		Body: strings.NewReader(strings.Repeat("x", 1<<20)), Size: 1 << 20, Progress: func(int64) { sent++ },
	})
	var ue *kube.UploadError
	if !errors.As(err, &ue) || ue.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ue.Message, "upload not ready") || kube.Classify(err) != kube.Transient {
		t.Errorf("got %v (class %v), want 503 upload not ready, transient", err, kube.Classify(err))
	}
	if sent != 0 {
		t.Errorf("%d reads of the body before the proxy refused; want none (Expect: 100-continue)", sent)
	}
}

var progressRE = regexp.MustCompile(`^\d{1,2}\.\d\d%$`)

// As CDI's upload server: a body cut off part way fails with 500 and
// leaves the DataVolume UploadReady, nothing kept; the next upload, with
// the same token, is taken in full from its first byte (CDI's e2e test
// "Upload datavolume should succeed on retry after failure"). A second
// upload while one is under way is refused with 503. The provider's
// Importing step relies on this when a disk sent as it copies is cut off.
func TestUploadRetryAfterCutOff(t *testing.T) {
	s, cl, ns, kc := uploadSim(t)
	path, sum := image(t, "raw", "64M")
	if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "retry", "100Mi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "retry", cdiv1.UploadReady)
	token, err := kc.RequestUploadToken(t.Context(), ns, "retry")
	if err != nil {
		t.Fatal(err)
	}
	f, size := openImage(t, path)
	opts := func(body io.Reader) kube.UploadOptions {
		return kube.UploadOptions{ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token,
			Body: body, Size: size, Namespace: ns, Name: "retry", Attempts: 1}
	}

	// Cut off after 8 MiB, while a second upload tries to start.
	held := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- kube.Upload(t.Context(), opts(io.MultiReader(
			io.LimitReader(f, 8<<20),
			// Then the sender stops, as a client that dies part way.
			readerFunc(func([]byte) (int, error) { close(held); <-release; return 0, errors.New("the sender stopped") }),
		)))
	}()
	select {
	case <-held:
	case err := <-first:
		t.Fatalf("the first upload ended before it was cut off: %v", err)
	}
	eventually(t, 10*time.Second, "the first upload under way", func() string {
		if s.UploadProxyBytes() == 0 {
			return "nothing received yet"
		}
		return ""
	})
	other, _ := openImage(t, path)
	err = kube.Upload(t.Context(), opts(other))
	var ue *kube.UploadError
	if !errors.As(err, &ue) || ue.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("upload beside one under way: %v, want 503", err)
	}
	close(release)
	if err := <-first; err == nil {
		t.Fatal("an upload cut off part way reported success")
	}
	if _, ok := s.ReceivedSHA256(ns, "retry"); ok {
		t.Error("the cut-off upload was kept as received")
	}
	if dv := getDV(t, cl, ns, "retry"); dv.Status.Phase == cdiv1.Failed || dv.Status.Phase == cdiv1.Succeeded {
		t.Fatalf("DataVolume %s after a cut-off upload, want it still taking uploads", dv.Status.Phase)
	}

	// The retry, same token, whole image.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	// Until the server has seen the first request end, it still counts as
	// under way (503); the provider's client retries that, as here.
	retry := opts(f)
	retry.Attempts = 5
	if err := kube.Upload(t.Context(), retry); err != nil {
		t.Fatalf("retry after the cut-off upload: %v", err)
	}
	waitDVPhase(t, cl, ns, "retry", cdiv1.Succeeded)
	if got, ok := s.ReceivedSHA256(ns, "retry"); !ok || got != sum {
		t.Errorf("ReceivedSHA256 = %q, %v; want %q", got, ok, sum)
	}
	if got, err := claimSHA(s.ReceivedPath(ns, "retry"), size); err != nil || got != sum {
		t.Errorf("the claim does not hold the retried image: %v", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// claimSHA returns the hex SHA-256 of the first n bytes of the claim's
// image at path, and an error unless every byte after them is zero.
func claimSHA(path string, n int64) (string, error) {
	sum, got, total, err := hashPrefix(path, n)
	switch {
	case err != nil:
		return "", err
	case got != n:
		return sum, fmt.Errorf("the claim's %d bytes are not the %d sent and zeros", total, n)
	}
	return sum, nil
}
