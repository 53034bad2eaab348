package engine_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
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
	if err == nil && rec.Phase == engine.PhaseCompleted && calls.Load() == 1 {
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
