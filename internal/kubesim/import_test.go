package kubesim

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func itoa(i int) string { return strconv.Itoa(i) }

// slowFileServer serves path on 127.0.0.1 in 16 chunks, pausing between
// them, so that progress can be seen.
func slowFileServer(t *testing.T, path string, pause time.Duration) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/disk.img" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", itoa(len(b)))
		chunk := (len(b) + 15) / 16
		for off := 0; off < len(b); off += chunk {
			end := min(off+chunk, len(b))
			if _, err := w.Write(b[off:end]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(pause):
			}
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func TestHTTPImport(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	path, sum := image(t, "raw", "8M")
	base := slowFileServer(t, path, 60*time.Millisecond)

	dv := dataVolume(ns, "imported", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: base + "/disk.img"}})
	if err := cl.Create(t.Context(), dv); err != nil {
		t.Fatal(err)
	}
	seen := map[cdiv1.DataVolumePhase]bool{}
	var progress []string
	eventually(t, 20*time.Second, "import Succeeded", func() string {
		dv := getDV(t, cl, ns, "imported")
		seen[dv.Status.Phase] = true
		if dv.Status.Phase == cdiv1.ImportInProgress && progressRE.MatchString(string(dv.Status.Progress)) {
			progress = append(progress, string(dv.Status.Progress))
		}
		if dv.Status.Phase != cdiv1.Succeeded {
			return string(dv.Status.Phase) + " " + string(dv.Status.Progress)
		}
		return ""
	})
	for _, p := range []cdiv1.DataVolumePhase{cdiv1.ImportScheduled, cdiv1.ImportInProgress} {
		if !seen[p] {
			t.Errorf("phase %s never seen (saw %v)", p, seen)
		}
	}
	if len(progress) < 2 {
		t.Errorf("saw progress %v, want it to advance through at least two values like 37.50%%", progress)
	}
	if got := getDV(t, cl, ns, "imported").Status.Progress; got != "100.0%" {
		t.Errorf("final progress %q, want 100.0%%", got)
	}
	if got, _ := s.ReceivedSHA256(ns, "imported"); got != sum {
		t.Errorf("ReceivedSHA256 = %q, want %q", got, sum)
	}

	t.Run("non-loopback URL refused", func(t *testing.T) {
		// 192.0.2.1 is TEST-NET-1: never contacted, refused before dialling.
		dv := dataVolume(ns, "remote", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://192.0.2.1/disk.img"}})
		if err := cl.Create(t.Context(), dv); err != nil {
			t.Fatal(err)
		}
		got := waitRestarts(t, cl, ns, "remote", 1)
		if r := dvCondition(got, cdiv1.DataVolumeRunning); !strings.Contains(r.Message, "127.0.0.1 or localhost") {
			t.Errorf("Running condition %+v, want the loopback-only message", r)
		}
	})
	// As CDI's importer pod (RestartPolicy OnFailure): a failing import
	// restarts, restartCount grows and Running=False says why; the
	// DataVolume never fails for it.
	t.Run("missing file restarts the importer", func(t *testing.T) {
		dv := dataVolume(ns, "missing", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: base + "/nope.img"}})
		if err := cl.Create(t.Context(), dv); err != nil {
			t.Fatal(err)
		}
		got := waitRestarts(t, cl, ns, "missing", 4)
		if r := dvCondition(got, cdiv1.DataVolumeRunning); !strings.Contains(r.Message, "got 404") || r.Reason != ReasonError {
			t.Errorf("Running condition %+v, want reason Error and the 404", r)
		}
	})
}

// waitRestarts waits until the importer of DataVolume ns/name has
// restarted at least n times, checking that it never leaves
// ImportInProgress and that Running is False between restarts.
func waitRestarts(t *testing.T, cl client.Client, ns, name string, n int32) *cdiv1.DataVolume {
	t.Helper()
	var dv *cdiv1.DataVolume
	eventually(t, 30*time.Second, "DataVolume "+name+" restarts", func() string {
		dv = getDV(t, cl, ns, name)
		switch dv.Status.Phase {
		case cdiv1.Failed, cdiv1.Succeeded:
			t.Fatalf("DataVolume %s is %s, want its importer restarting in ImportInProgress", name, dv.Status.Phase)
		}
		r := dvCondition(dv, cdiv1.DataVolumeRunning)
		if dv.Status.Phase != cdiv1.ImportInProgress || dv.Status.RestartCount < n || r.Status != "False" {
			return fmt.Sprintf("phase %s, restarts %d, Running %+v", dv.Status.Phase, dv.Status.RestartCount, r)
		}
		return ""
	})
	return dv
}
