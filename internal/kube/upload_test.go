package kube

import (
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

func TestUploadThroughKubesim(t *testing.T) {
	ctx := t.Context()
	c := cluster.Get(t)
	kc := NewForRESTConfig(c.RESTConfig())
	ns := "kube-upload-" + time.Now().Format("150405.000")
	ns = strings.ReplaceAll(ns, ".", "")
	if err := c.AdminClient().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// Without CDI's upload API there is nothing to retry: a human must
	// install CDI.
	_, err := kc.RequestUploadToken(ctx, ns, "disk")
	wantClass(t, "token without CDI", err, NeedsHuman)

	sim, err := kubesim.Start(ctx, kubesim.Options{Cluster: c, Namespaces: []string{ns}, Step: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("stopping kubesim: %v", err)
		}
	}()

	img := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sum := diskdigest.Bytes(b)

	dv := &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "disk"},
		Spec: cdiv1beta1.DataVolumeSpec{
			Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}},
			Storage: &cdiv1beta1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			}},
		},
	}
	if err := kc.CreateDataVolume(ctx, dv); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.WaitDataVolume(ctx, ns, "disk", DataVolumeInPhase(cdiv1beta1.UploadReady)); err != nil {
		t.Fatal(err)
	}
	token, err := kc.RequestUploadToken(ctx, ns, "disk")
	if err != nil {
		t.Fatalf("RequestUploadToken: %v", err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sent int64
	err = Upload(ctx, UploadOptions{
		ProxyURL: sim.UploadProxyURL(), ServerName: sim.UploadProxyServerName(), CACertPEM: sim.UploadProxyCACertPEM(), Token: token,
		Body: f, Size: int64(len(b)), Progress: func(n int64) { sent = n }, Namespace: ns, Name: "disk",
	})
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if sent != int64(len(b)) {
		t.Errorf("progress ended at %d, want %d", sent, len(b))
	}
	got, err := kc.WaitDataVolume(ctx, ns, "disk", DataVolumeInPhase(cdiv1beta1.Succeeded))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Progress != "100.0%" {
		t.Errorf("progress %q, want 100.0%%", got.Status.Progress)
	}
	// The proxy received the qcow2 as it was sent; as CDI does, the claim
	// holds its content as raw (an empty 64 MiB disk).
	zeros := diskdigest.Bytes(make([]byte, 64<<20))
	if rec, _ := sim.ReceivedImage(ns, "disk"); rec.SentSHA256 != sum || rec.SHA256 != zeros {
		t.Errorf("the proxy received %s and the claim holds %s, want %s and %s", rec.SentSHA256, rec.SHA256, sum, zeros)
	}

	t.Run("wrong CA", func(t *testing.T) {
		err := Upload(ctx, UploadOptions{ProxyURL: sim.UploadProxyURL(), ServerName: sim.UploadProxyServerName(), Token: token, Body: strings.NewReader("x"), Attempts: 1})
		wantClass(t, "unknown CA", err, NeedsHuman)
	})
}

// proxyStub is an upload proxy whose answers a test scripts.
func proxyStub(t *testing.T, answer func(attempt int32, w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int32, []byte) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != UploadPath || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "bad request "+r.URL.Path, http.StatusBadRequest)
			return
		}
		answer(n.Add(1), w, r)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, &n, ca
}

// oneShotReader is a body that cannot be rewound.
type oneShotReader struct{ io.Reader }

func TestUploadRetriesOnlyBeforeTheBody(t *testing.T) {
	ctx := t.Context()
	t.Run("503 before reading is retried", func(t *testing.T) {
		srv, n, ca := proxyStub(t, func(attempt int32, w http.ResponseWriter, r *http.Request) {
			if attempt == 1 {
				http.Error(w, "upload not ready", http.StatusServiceUnavailable)
				return
			}
			b, _ := io.ReadAll(r.Body)
			if string(b) != "image" {
				http.Error(w, "got "+string(b), http.StatusBadRequest)
			}
		})
		err := Upload(ctx, UploadOptions{ProxyURL: srv.URL, CACertPEM: ca, Token: "tok", Body: oneShotReader{strings.NewReader("image")}, Size: 5})
		if err != nil || n.Load() != 2 {
			t.Errorf("Upload = %v after %d attempts, want success after 2", err, n.Load())
		}
	})
	t.Run("failure after the body went is not retried without seeking", func(t *testing.T) {
		srv, n, ca := proxyStub(t, func(_ int32, w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			http.Error(w, "disk on fire", http.StatusInternalServerError)
		})
		err := Upload(ctx, UploadOptions{ProxyURL: srv.URL, CACertPEM: ca, Token: "tok", Body: oneShotReader{strings.NewReader("image")}, Size: 5})
		wantClass(t, "500 after the body", err, Transient)
		if n.Load() != 1 {
			t.Errorf("%d attempts, want 1", n.Load())
		}
	})
	t.Run("a seekable body is retried from its start", func(t *testing.T) {
		srv, n, ca := proxyStub(t, func(attempt int32, w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if attempt == 1 || string(b) != "image" {
				http.Error(w, "try again", http.StatusBadGateway)
			}
		})
		err := Upload(ctx, UploadOptions{ProxyURL: srv.URL, CACertPEM: ca, Token: "tok", Body: strings.NewReader("image"), Size: 5})
		if err != nil || n.Load() != 2 {
			t.Errorf("Upload = %v after %d attempts, want success after 2", err, n.Load())
		}
	})
}

func TestUploadErrorClasses(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		code int
		want Class
	}{
		{http.StatusBadRequest, Permanent},         // image refused
		{http.StatusUnauthorized, Transient},       // token expired: ask for a new one
		{http.StatusNotFound, NeedsHuman},          // wrong proxy URL
		{http.StatusServiceUnavailable, Transient}, // not ready yet
	} {
		t.Run(http.StatusText(tc.code), func(t *testing.T) {
			srv, n, ca := proxyStub(t, func(_ int32, w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "because", tc.code)
			})
			err := Upload(ctx, UploadOptions{ProxyURL: srv.URL, CACertPEM: ca, Token: "tok", Body: strings.NewReader("x"), Attempts: 2})
			wantClass(t, http.StatusText(tc.code), err, tc.want)
			var ue *UploadError
			if !errors.As(err, &ue) || ue.StatusCode != tc.code || !strings.Contains(err.Error(), "because") {
				t.Errorf("error %v, want an UploadError %d with the body", err, tc.code)
			}
			if wantAttempts := map[Class]int32{Transient: 2}[tc.want]; tc.code != http.StatusUnauthorized && wantAttempts > 0 && n.Load() != wantAttempts {
				t.Errorf("%d attempts, want %d", n.Load(), wantAttempts)
			}
			if tc.code == http.StatusUnauthorized && n.Load() != 1 {
				t.Errorf("a refused token was retried (%d attempts)", n.Load())
			}
		})
	}
	// CDI's upload server answers 500 for most refusals of the image: its
	// words, not the status, say it will not take the same bytes.
	for _, tc := range []struct {
		name string
		code int
		msg  string
		want Class
	}{
		{"refused with 500", http.StatusInternalServerError, "Saving stream failed: Unable to transfer source data to scratch space: qemu-img: Could not open backing file", Permanent},
		{"cut off", http.StatusInternalServerError, "Saving stream failed: Unable to transfer source data to scratch space: unexpected EOF", Transient},
		{"no room", http.StatusBadRequest, "Saving stream failed: effective image size is larger than the reported available storage: virtual image size 9 is larger than the reported available storage 8. A larger PVC is required", Permanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, n, ca := proxyStub(t, func(_ int32, w http.ResponseWriter, _ *http.Request) {
				http.Error(w, tc.msg, tc.code)
			})
			err := Upload(ctx, UploadOptions{ProxyURL: srv.URL, CACertPEM: ca, Token: "tok", Body: strings.NewReader("x"), Attempts: 2})
			wantClass(t, tc.name, err, tc.want)
			if want := map[Class]int32{Transient: 2, Permanent: 1}[tc.want]; n.Load() != want {
				t.Errorf("%d attempts, want %d", n.Load(), want)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		err = Upload(ctx, UploadOptions{ProxyURL: "https://" + addr, InsecureSkipVerify: true, Token: "tok", Body: strings.NewReader("x"), Attempts: 2})
		wantClass(t, "connection refused", err, Transient)
	})
	t.Run("bad URL", func(t *testing.T) {
		err := Upload(ctx, UploadOptions{ProxyURL: "cdi-uploadproxy", Token: "tok", Body: strings.NewReader("x")})
		wantClass(t, "bad URL", err, NeedsHuman)
	})
}
