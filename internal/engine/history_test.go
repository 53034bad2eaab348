package engine_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// An upload proxy answering with a 64 KiB error page leaves a short note
// in the record, not the page.
func TestUploadErrorBodyStaysOutOfRecord(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("h64", esxisim.PoweredOff))
	page := strings.Repeat("<p>proxy trouble</p>", 64<<10/20)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(proxy.Close)
	spec := e.spec("h64", "h64")
	spec.Transport.UploadProxyURL, spec.Transport.UploadProxyCAPEM = proxy.URL, ""
	_, err := e.engine().Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.Phase != record.PhaseImporting || !strings.Contains(se.Message, "proxy trouble") {
		t.Fatalf("stop = %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: coord.RecordName("h64")}, cm); err != nil {
		t.Fatal(err)
	}
	if n := len(cm.Data[coord.RecordKey]); n > 16<<10 {
		t.Errorf("the record is %d bytes", n)
	}
	rec, err := e.engine().Load(t.Context(), e.ns, "h64")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Errors) == 0 {
		t.Fatal("no error history")
	}
	for _, h := range rec.Errors {
		if len(h.Message) > record.MaxErrorMessageBytes {
			t.Errorf("history entry of %d bytes", len(h.Message))
		}
	}
}
