package engine_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// The http transport's images sit in an unlistable folder under a random
// name, readable by their owner only, and are gone once imported.
func TestHTTPStagingIsPrivate(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("hs1", esxisim.PoweredOff))
	staging := t.TempDir()
	type seen struct {
		path                      string
		file, token, name, nsMode os.FileMode
	}
	var mu sync.Mutex
	var gets []seen
	files := http.FileServer(http.Dir(staging))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := filepath.Join(staging, filepath.FromSlash(r.URL.Path))
		s := seen{path: r.URL.Path}
		mode := func(p string) os.FileMode {
			fi, err := os.Stat(p)
			if err != nil {
				return 0
			}
			return fi.Mode().Perm()
		}
		s.file, s.token = mode(local), mode(filepath.Dir(local))
		s.name, s.nsMode = mode(filepath.Dir(filepath.Dir(local))), mode(filepath.Dir(filepath.Dir(filepath.Dir(local))))
		mu.Lock()
		gets = append(gets, s)
		mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	spec := e.spec("hs1", "hs1")
	spec.Transport = engine.Transport{Kind: engine.TransportHTTP, StagingDir: staging, StagingURL: srv.URL}
	var leftAtCreate []string
	hook := func(ev engine.Event) {
		if ev.Kind == engine.EventPhase && ev.Phase == record.PhaseCreatingVM {
			_ = filepath.Walk(staging, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					leftAtCreate = append(leftAtCreate, p)
				}
				return nil
			})
		}
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)

	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(rec.StagingToken) {
		t.Fatalf("staging token %q", rec.StagingToken)
	}
	wantPath := "/" + e.ns + "/hs1/" + rec.StagingToken + "/disk-0.raw"
	if rec.Disks[0].ArtifactURL != srv.URL+wantPath {
		t.Errorf("URL = %s, want %s", rec.Disks[0].ArtifactURL, srv.URL+wantPath)
	}
	mu.Lock()
	defer mu.Unlock()
	served := false
	for _, g := range gets {
		if g.path != wantPath || g.file == 0 {
			continue
		}
		served = true
		if g.file != 0o600 || g.token != 0o700 || g.name != 0o311 || g.nsMode != 0o711 {
			t.Errorf("modes while served: file %o, token folder %o, migration folder %o, namespace folder %o", g.file, g.token, g.name, g.nsMode)
		}
	}
	if !served {
		t.Fatalf("the image was never served at %s: %+v", wantPath, gets)
	}
	if len(leftAtCreate) != 0 {
		t.Errorf("images still served after the import: %s", strings.Join(leftAtCreate, ", "))
	}
	if entries, _ := os.ReadDir(staging); len(entries) != 0 {
		t.Errorf("staging left behind: %v", entries)
	}
}
