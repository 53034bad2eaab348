package engine_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
)

// thinVM has one 64 MiB thin disk holding 2 MiB of data.
func thinVM(name string) esxisim.VMSpec {
	vm := smallVM(name, esxisim.PoweredOff)
	vm.Disks = []esxisim.DiskSpec{{CapacityBytes: 64 * mib, Thin: true, Content: []esxisim.Extent{
		{Offset: 0, Length: mib, Seed: 7},
		{Offset: 40 * mib, Length: mib, Seed: 8},
	}}}
	return vm
}

// The raw image goes to the upload proxy as qcow2: the bytes on the wire
// follow the 2 MiB of data, not the 64 MiB disk, and the claim holds the
// source disk (CDI converts the qcow2 to raw).
func TestUploadCarriesHoles(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, thinVM("thin1"))
	before := e.sim.UploadProxyBytes()
	spec := e.spec("thin1", "thin1")
	rec := e.mustComplete(e.engine(), spec)
	wire := e.sim.UploadProxyBytes() - before
	t.Logf("64 MiB thin disk with 2 MiB of data: %d bytes on the wire to the upload proxy (raw: %d)", wire, 64*mib)
	if wire < 2*mib || wire > 2*mib+512<<10 {
		t.Errorf("upload proxy received %d bytes, want the 2 MiB of data plus at most 512 KiB of qcow2 metadata", wire)
	}
	d := rec.Disks[0]
	want := files.Disks[0].SHA256()
	if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != want || d.SourceSHA256 != want {
		t.Errorf("claim holds sha256 %q (%v), source %s, want %s", got, ok, d.SourceSHA256, want)
	}
	got, _ := e.sim.ReceivedImage(e.ns, d.DataVolume)
	if d.UploadFormat != "qcow2" || d.UploadBytes != wire || d.UploadSHA256 != got.SentSHA256 || got.SentFormat != "qcow2" {
		t.Errorf("record says %s, %d bytes, sha256 %s were sent; the proxy received %s, %d bytes, sha256 %s",
			d.UploadFormat, d.UploadBytes, d.UploadSHA256, got.SentFormat, wire, got.SentSHA256)
	}
	if _, err := os.Stat(filepath.Join(spec.WorkDir, e.ns, "thin1")); !os.IsNotExist(err) {
		t.Errorf("staging folder left behind: %v", err)
	}
}

// An upload cut off half-way is sent again by the next run, in full, and
// the claim holds the source disk.
func TestUploadInterruptedIsSentAgain(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, thinVM("thin2"))
	spec := e.spec("thin2", "thin2")
	var calls atomic.Int32
	cut := func(d *engine.Deps) {
		real := engine.NewCDIUploader(e.kube)
		d.Uploader = uploaderFunc(func(ctx context.Context, req engine.UploadRequest) error {
			if calls.Add(1) > 1 {
				return real.Upload(ctx, req)
			}
			// The first attempt breaks off after 1 MiB of the body.
			token, err := e.kube.RequestUploadToken(ctx, req.Namespace, req.DataVolume)
			if err != nil {
				return err
			}
			f, err := os.Open(req.Path)
			if err != nil {
				return err
			}
			defer f.Close()
			return kube.Upload(ctx, kube.UploadOptions{
				ProxyURL: req.ProxyURL, CACertPEM: []byte(req.CAPEM), Token: token, Size: req.Size, Attempts: 1,
				Body: io.MultiReader(io.LimitReader(f, mib), iotest.ErrReader(syscall.ECONNRESET)),
			})
		})
	}
	rec, err := e.engine(cut).Run(e.ctx(60*time.Second), spec)
	if err == nil && rec.Phase == record.PhaseCompleted && calls.Load() == 1 {
		t.Fatalf("the first run completed although its upload was cut off")
	}
	rec = e.mustComplete(e.engine(cut), spec)
	if calls.Load() < 2 {
		t.Fatalf("upload called %d times, want a second attempt", calls.Load())
	}
	d := rec.Disks[0]
	want := files.Disks[0].SHA256()
	if got, ok := e.sim.ReceivedSHA256(e.ns, d.DataVolume); !ok || got != want {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, want)
	}
	if got, _ := e.sim.ReceivedImage(e.ns, d.DataVolume); !d.Uploaded || d.UploadFormat != "qcow2" || d.UploadSHA256 != got.SentSHA256 || got.SentBytes != d.UploadBytes {
		t.Errorf("record %+v does not describe what arrived %+v", d, got)
	}
}

type uploaderFunc func(context.Context, engine.UploadRequest) error

func (f uploaderFunc) Upload(ctx context.Context, req engine.UploadRequest) error { return f(ctx, req) }

// The upload proxy reached at an address its certificate does not name,
// with upload_proxy_server_name, and a CA that CDI renewed after it was
// configured: the provider reads the cluster's signer bundle again and the
// migration completes.
func TestUploadProxyRenewedCAAndServerName(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, thinVM("renewed"))
	spec := e.spec("renewed", "renewed")
	spec.Transport.UploadProxyURL = strings.Replace(e.sim.UploadProxyURL(), "127.0.0.1", "localhost", 1)
	spec.Transport.UploadProxyServerName = e.sim.UploadProxyServerName()
	if err := e.sim.RotateUploadProxyCA(t.Context()); err != nil {
		t.Fatal(err)
	}
	if spec.Transport.UploadProxyCAPEM == string(e.sim.UploadProxyCACertPEM()) {
		t.Fatal("the CA did not change")
	}
	rec := e.mustComplete(e.engine(), spec)
	if got, ok := e.sim.ReceivedSHA256(e.ns, rec.Disks[0].DataVolume); !ok || got != files.Disks[0].SHA256() {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, files.Disks[0].SHA256())
	}
}

// CDI's upload proxy certificate names only its Service: a configured URL
// by address (a port-forward) without upload_proxy_server_name stops before
// any byte is taken, saying what the certificate names and which setting
// to add; with the setting the same URL works (TestUploadProxyRenewedCAAndServerName).
func TestUploadProxyCertificateNameStops(t *testing.T) {
	e := newEnv(t)
	e.host.AddVM(t, thinVM("byaddr"))
	spec := e.spec("byaddr", "byaddr")
	spec.Transport.UploadProxyServerName = ""
	_, err := e.engine().Run(e.ctx(60*time.Second), spec)
	se := stopErr(t, err)
	if se.State != record.PhaseManualInterventionRequired || se.Reason != "UploadProxyCertificateName" || se.Field != engine.FieldUploadProxyName ||
		!strings.Contains(se.Message, "does not name 127.0.0.1") || !strings.Contains(se.Message, e.sim.UploadProxyServerName()) ||
		!strings.Contains(se.Action, "upload_proxy_server_name") {
		t.Errorf("stop %s %s %q: %s; %s", se.State, se.Reason, se.Field, se.Message, se.Action)
	}
	if n := len(e.sim.UploadRequests()); n != 0 {
		t.Errorf("the proxy took %d uploads through a certificate that does not verify", n)
	}
}

// With no upload_proxy_url the provider uploads through the URL the cluster
// publishes in CDIConfig's status.uploadProxyURL, with the CA from the
// cluster's signer bundle.
func TestUploadThroughThePublishedURL(t *testing.T) {
	e := newEnv(t)
	_, files := e.host.AddVM(t, thinVM("published"))
	spec := e.spec("published", "published")
	spec.Transport = engine.Transport{Kind: engine.TransportCDIUpload}
	rec := e.mustComplete(e.engine(), spec)
	if got, ok := e.sim.ReceivedSHA256(e.ns, rec.Disks[0].DataVolume); !ok || got != files.Disks[0].SHA256() {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, files.Disks[0].SHA256())
	}
	if route := rec.Disks[0].UploadRoute; !strings.Contains(route, "publishes, "+e.sim.UploadProxyURL()) {
		t.Errorf("upload route %q, want the published %s", route, e.sim.UploadProxyURL())
	}
}

// With no upload_proxy_url and none published, the provider reaches the
// upload proxy through the API server: a port-forward (pods/portforward,
// served by the node's kubelet) to a Running pod behind Service
// cdi/cdi-uploadproxy, the proxy's certificate checked against its
// in-cluster name and the cluster's signer bundle. The route is recorded,
// the tunnel is closed afterwards, and the claim holds the disk.
func TestUploadThroughTheAPIServerTunnel(t *testing.T) {
	e := newEnv(t, func(o *kubesim.Options) { o.NoUploadProxyURL = true })
	_, files := e.host.AddVM(t, thinVM("tunnel"))
	spec := e.spec("tunnel", "tunnel")
	spec.Transport = engine.Transport{Kind: engine.TransportCDIUpload}
	rec := e.mustComplete(e.engine(), spec)
	if got, ok := e.sim.ReceivedSHA256(e.ns, rec.Disks[0].DataVolume); !ok || got != files.Disks[0].SHA256() {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, files.Disks[0].SHA256())
	}
	pod := e.sim.UploadProxyPod()
	if route := rec.Disks[0].UploadRoute; pod == "" || !strings.Contains(route, "port-forward") || !strings.Contains(route, "cdi/"+pod) ||
		!strings.Contains(route, e.sim.UploadProxyServerName()) {
		t.Errorf("upload route %q, want a port-forward to cdi/%s checked for %s", route, pod, e.sim.UploadProxyServerName())
	}
	if len(e.sim.UploadRequests()) == 0 {
		t.Error("the upload proxy took no upload")
	}
	logged := false
	for _, ev := range e.eventsOf(engine.EventInfo) {
		logged = logged || strings.Contains(ev.Message, "uploading through a port-forward")
	}
	if !logged {
		t.Error("no event says the upload went through the port-forward")
	}
}

// A published URL that does not answer from here (a Route this runner
// cannot reach) is passed by: the upload goes through the API server's
// port-forward all the same.
func TestUploadTunnelsPastAnUnreachablePublishedURL(t *testing.T) {
	e := newEnv(t, func(o *kubesim.Options) { o.NoUploadProxyURL = true })
	// A port nothing listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String()
	_ = l.Close()
	cfg := &cdiv1beta1.CDIConfig{}
	if err := e.admin.Get(t.Context(), client.ObjectKey{Name: kubesim.CDIConfigName}, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Status.UploadProxyURL = &dead
	if err := e.admin.Status().Update(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	_, files := e.host.AddVM(t, thinVM("pastdead"))
	spec := e.spec("pastdead", "pastdead")
	spec.Transport = engine.Transport{Kind: engine.TransportCDIUpload}
	rec := e.mustComplete(e.engine(), spec)
	if got, ok := e.sim.ReceivedSHA256(e.ns, rec.Disks[0].DataVolume); !ok || got != files.Disks[0].SHA256() {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, files.Disks[0].SHA256())
	}
	if route := rec.Disks[0].UploadRoute; !strings.Contains(route, "port-forward") {
		t.Errorf("upload route %q, want the port-forward past %s", route, dead)
	}
}

// A tunnel that breaks in the middle of an upload (the kubelet drops its
// port-forwards) fails that upload transiently; the next attempt opens a
// new tunnel and the disk arrives intact.
func TestUploadTunnelBrokenIsOpenedAgain(t *testing.T) {
	e := newEnv(t, func(o *kubesim.Options) { o.NoUploadProxyURL = true })
	_, files := e.host.AddVM(t, thinVM("broken"))
	spec := e.spec("broken", "broken")
	spec.Transport = engine.Transport{Kind: engine.TransportCDIUpload}
	real := engine.NewCDIUploader(e.kube)
	var dropped, calls atomic.Int32
	up := uploaderFunc(func(ctx context.Context, req engine.UploadRequest) error {
		calls.Add(1)
		progress := req.Progress
		req.Progress = func(sent int64) {
			if sent > 0 && dropped.CompareAndSwap(0, 1) {
				e.sim.DropPortForwards()
			}
			if progress != nil {
				progress(sent)
			}
		}
		return real.Upload(ctx, req)
	})
	rec := e.mustComplete(e.engine(func(d *engine.Deps) { d.Uploader = up }), spec)
	if dropped.Load() != 1 || calls.Load() < 2 {
		t.Errorf("dropped %d times, %d uploads: want the tunnel dropped once and the upload made again", dropped.Load(), calls.Load())
	}
	if got, ok := e.sim.ReceivedSHA256(e.ns, rec.Disks[0].DataVolume); !ok || got != files.Disks[0].SHA256() {
		t.Errorf("claim holds sha256 %q (%v), want %s", got, ok, files.Disks[0].SHA256())
	}
	broke := false
	e.mu.Lock()
	for _, ev := range e.events {
		broke = broke || strings.Contains(ev.Message, "broke during the upload")
	}
	e.mu.Unlock()
	// Which error ended the first upload depends on where the cut met
	// it; that the tunnel broke is said when the client saw it end.
	t.Logf("an event names the broken tunnel: %v", broke)
}
