package kube

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// serverTarget is a namespace with the simulated cluster, whose upload proxy
// hands uploads to CDI's own upload server, and a way to make upload
// DataVolumes there.
type serverTarget struct {
	t   *testing.T
	kc  *Client
	sim *kubesim.Sim
	ns  string
}

func newServerTarget(t *testing.T) *serverTarget {
	t.Helper()
	c := cluster.Get(t)
	kc := NewForRESTConfig(c.RESTConfig())
	ns := strings.ReplaceAll("kube-usrv-"+time.Now().Format("150405.000000"), ".", "")
	if err := c.AdminClient().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	sim, err := kubesim.Start(t.Context(), kubesim.Options{Cluster: c, Namespaces: []string{ns}, Step: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("stopping kubesim: %v", err)
		}
	})
	return &serverTarget{t: t, kc: kc, sim: sim, ns: ns}
}

// dataVolume creates an upload DataVolume of size, waits for it to take
// uploads and returns options for an upload of the image at path into it.
func (st *serverTarget) dataVolume(name, size, path string) UploadOptions {
	t := st.t
	t.Helper()
	dv := &cdiv1beta1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: name},
		Spec: cdiv1beta1.DataVolumeSpec{
			Source: &cdiv1beta1.DataVolumeSource{Upload: &cdiv1beta1.DataVolumeSourceUpload{}},
			Storage: &cdiv1beta1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			}},
		},
	}
	if err := st.kc.CreateDataVolume(t.Context(), dv); err != nil {
		t.Fatal(err)
	}
	if _, err := st.kc.WaitDataVolume(t.Context(), st.ns, name, DataVolumeInPhase(cdiv1beta1.UploadReady)); err != nil {
		t.Fatal(err)
	}
	token, err := st.kc.RequestUploadToken(t.Context(), st.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, _ := f.Stat()
	return UploadOptions{
		ProxyURL: st.sim.UploadProxyURL(), ServerName: st.sim.UploadProxyServerName(), CACertPEM: st.sim.UploadProxyCACertPEM(), Token: token,
		Body: f, Size: fi.Size(), Namespace: st.ns, Name: name, Poll: 50 * time.Millisecond,
		DataVolume: func(ctx context.Context) (*cdiv1beta1.DataVolume, error) {
			return st.kc.GetDataVolume(ctx, st.ns, name)
		},
	}
}

func qemuImage(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %v: %v: %s", args, err, out)
	}
}

// Uploads go to the asynchronous endpoint, as virtctl's do, and Upload
// returns once CDI has written the claim: the DataVolume is Succeeded. A
// second upload whose answer was lost meets 503 (the claim is done) and is
// looked into on the DataVolume, not sent again blind: it is done.
func TestUploadAsyncFollowsTheDataVolume(t *testing.T) {
	st := newServerTarget(t)
	img := filepath.Join(t.TempDir(), "disk.qcow2")
	qemuImage(t, "create", "-f", "qcow2", img, "64M")
	opts := st.dataVolume("disk", "1Gi", img)
	if err := Upload(t.Context(), opts); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	if got := st.sim.UploadRequests(); !slices.Equal(got, []string{UploadPath}) || UploadPath != "/v1beta1/upload-async" {
		t.Errorf("upload requests %v, want one to /v1beta1/upload-async", got)
	}
	dv, err := st.kc.GetDataVolume(t.Context(), st.ns, "disk")
	if err != nil || dv.Status.Phase != cdiv1beta1.Succeeded {
		t.Fatalf("DataVolume after Upload returned: %v, %v; want Succeeded", dv.Status.Phase, err)
	}

	// The same upload again, as after a reply lost on the way.
	if _, err := opts.Body.(*os.File).Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	opts.Attempts = 1
	if err := Upload(t.Context(), opts); err != nil {
		t.Errorf("an upload into a DataVolume that has its image: %v, want done", err)
	}
	if n := len(st.sim.UploadRequests()); n != 2 {
		t.Errorf("%d upload requests, want 2 (the second answered 503 and not sent again)", n)
	}
}

// CDI's upload server answers 500 for every refusal but lack of space: the
// provider classes the refusal by the server's words, permanent, sent once.
// Lack of space is 400 and says the sizes.
func TestUploadRefusalsByTheServersWords(t *testing.T) {
	st := newServerTarget(t)
	dir := t.TempDir()
	t.Run("corrupt gzip", func(t *testing.T) {
		gz := filepath.Join(dir, "disk.img.gz")
		if err := os.WriteFile(gz, append([]byte("\x1f\x8b\x08\x00"), strings.Repeat("not gzip ", 1000)...), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := st.dataVolume("gz", "1Gi", gz)
		err := Upload(t.Context(), opts)
		var ue *UploadError
		if !errors.As(err, &ue) || ue.StatusCode != http.StatusInternalServerError || !ue.Refused() {
			t.Fatalf("got %v, want a 500 refusal from the upload server", err)
		}
		wantClass(t, "a refused image", err, Permanent)
		if n := len(st.sim.UploadRequests()); n != 1 {
			t.Errorf("%d upload requests, want 1: a refused image is not sent again", n)
		}
	})
	t.Run("too large", func(t *testing.T) {
		big := filepath.Join(dir, "big.qcow2")
		qemuImage(t, "create", "-f", "qcow2", big, "2G")
		opts := st.dataVolume("small", "1Gi", big)
		err := Upload(t.Context(), opts)
		var ue *UploadError
		if !errors.As(err, &ue) || ue.StatusCode != http.StatusBadRequest {
			t.Fatalf("got %v, want 400", err)
		}
		wantClass(t, "an image too large", err, Permanent)
		if v, a, ok := ue.SizeRefusal(); !ok || v != 2<<30 || a != 1<<30 {
			t.Errorf("SizeRefusal = %d, %d, %v; want %d, %d", v, a, ok, 2<<30, 1<<30)
		}
	})
}
