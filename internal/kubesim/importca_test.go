package kubesim

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// As CDI's importer: an https source is verified against the system's CAs
// and those of the ConfigMap http.certConfigMap names. Without its CA the
// importer restarts; with it the import succeeds; while the ConfigMap is
// missing the importer cannot start.
func TestImportVerifiesTLS(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	path, sum := image(t, "raw", "4M")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(b) }))
	t.Cleanup(srv.Close)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))

	untrusted := dataVolume(ns, "untrusted", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: srv.URL + "/disk.img"}})
	if err := cl.Create(t.Context(), untrusted); err != nil {
		t.Fatal(err)
	}
	got := waitRestarts(t, cl, ns, "untrusted", 1)
	if r := dvCondition(got, cdiv1.DataVolumeRunning); !strings.Contains(r.Message, "certificate") {
		t.Errorf("Running condition %+v, want a certificate verification failure", r)
	}

	trusted := dataVolume(ns, "trusted", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: srv.URL + "/disk.img", CertConfigMap: "staging-ca"}})
	if err := cl.Create(t.Context(), trusted); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the importer waiting for its ConfigMap", func() string {
		dv := getDV(t, cl, ns, "trusted")
		if r := dvCondition(dv, cdiv1.DataVolumeRunning); dv.Status.Phase != cdiv1.ImportScheduled || r.Reason != ReasonContainerCreating {
			return string(dv.Status.Phase) + " " + r.Reason
		}
		return ""
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "staging-ca"}, Data: map[string]string{"ca.pem": ca}}
	if err := cl.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "trusted", cdiv1.Succeeded)
	if r, _ := s.ReceivedSHA256(ns, "trusted"); r != sum {
		t.Errorf("ReceivedSHA256 = %q, want %q", r, sum)
	}
}
