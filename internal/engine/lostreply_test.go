package engine_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
)

// lossyTransport lets requests reach the API server and then loses the
// reply of chosen ones, as a connection reset after the server applied
// the change does.
type lossyTransport struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	rules []*lossRule
}

type lossRule struct {
	method, path string
	// skip replies are delivered first; then lose replies are lost.
	skip, lose int
	lost       int
}

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rules {
		if req.Method != r.method || !strings.Contains(req.URL.Path, r.path) || resp.StatusCode >= 300 {
			continue
		}
		if r.skip > 0 {
			r.skip--
			continue
		}
		if r.lose > 0 {
			r.lose--
			r.lost++
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return nil, fmt.Errorf("reading the reply of %s %s: %w", req.Method, req.URL.Path, syscall.ECONNRESET)
		}
	}
	return resp, nil
}

// Every reply a migration acts on can be lost after the change was made:
// the record's update, the DataVolume's and the VirtualMachine's
// creation, the power-off. The migration re-observes and goes on without
// doing anything twice and without calling its own write a conflict.
func TestLostRepliesAreReobserved(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("lost1", esxisim.PoweredOn))
	spec := e.spec("lost1", "lost1")
	spec.PowerOffPolicy = engine.PolicyHard
	lossy := &lossyTransport{rules: []*lossRule{
		{method: http.MethodPut, path: "/configmaps/" + coord.RecordName("lost1"), skip: 2, lose: 1},
		{method: http.MethodPut, path: "/configmaps/" + coord.RecordName("lost1"), skip: 6, lose: 1},
		{method: http.MethodPost, path: "/datavolumes", lose: 1},
		{method: http.MethodPost, path: "/namespaces/" + e.ns + "/configmaps", lose: 1},
		{method: http.MethodPost, path: "/namespaces/" + coord.DefaultClaimNamespace + "/configmaps", lose: 1},
		{method: http.MethodPatch, path: "/virtualmachines/lost1", lose: 1},
	}}
	cfg := rest.CopyConfig(e.c.RESTConfig())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lossy.rt = rt; return lossy }
	kc := kube.NewForRESTConfig(cfg)
	e.host.DropAfterRunning("vmsvc/power.off", 1)

	en := e.engine(func(d *engine.Deps) { d.Kube = kc; d.Uploader = engine.NewCDIUploader(e.kube) })
	rec := e.mustComplete(en, spec)

	if n := e.host.LostReplies(); n != 1 {
		t.Errorf("the power-off's reply was lost %d times, want 1", n)
	}
	for _, r := range lossy.rules {
		if r.lost != 1 {
			t.Errorf("%s %s: %d replies lost, want 1", r.method, r.path, r.lost)
		}
	}
	if offs := e.commands("vmsvc/power.off"); len(offs) != 1 {
		t.Errorf("power.off sent %d times: %q", len(offs), offs)
	}
	if n := len(e.dataVolumes()); n != 1 {
		t.Errorf("%d DataVolumes", n)
	}
	if n := len(e.vms()); n != 1 {
		t.Errorf("%d VirtualMachines", n)
	}
	// Each lost reply was seen through at once, not retried as a failure.
	for _, h := range rec.Errors {
		if h.Class != record.ClassTransient || h.Phase != record.PhasePreparing {
			t.Errorf("history: %+v", h)
		}
		if h.Reason == "RecordConflict" || h.Class == record.ClassInterrupted {
			t.Errorf("history: %+v", h)
		}
	}
}

// A guest shutdown whose reply was lost is not sent again while the guest
// is still shutting down.
func TestLostShutdownReplyNotResent(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, smallVM("lost2", esxisim.PoweredOn))
	spec := e.spec("lost2", "lost2")
	e.host.DropAfterRunning("vmsvc/power.shutdown", 1)
	rec := e.mustComplete(e.engine(), spec)
	if n := e.host.LostReplies(); n != 1 {
		t.Errorf("the shutdown's reply was lost %d times, want 1", n)
	}
	if cmds := e.commands("vmsvc/power.shutdown"); len(cmds) != 1 {
		t.Errorf("power.shutdown sent %d times: %q", len(cmds), cmds)
	}
	if rec.PowerOff == nil || !rec.PowerOff.Done || rec.PowerOff.Action != record.PowerActionGraceful {
		t.Errorf("powerOff = %+v", rec.PowerOff)
	}
}
