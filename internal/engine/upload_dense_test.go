package engine_test

import (
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

// A disk that is all data goes to the upload proxy raw, as it is: a qcow2
// copy would save nothing on the wire and cost a local rewrite and CDI's
// conversion. The claim holds the source disk all the same.
func TestUploadSendsDenseImageRaw(t *testing.T) {
	e := newEnv(t)
	vm := smallVM("dense1", esxisim.PoweredOff)
	vm.Disks = []esxisim.DiskSpec{{CapacityBytes: 8 * mib, Content: []esxisim.Extent{{Offset: 0, Length: 8 * mib, Seed: 3}}}}
	_, files := e.host.AddVM(t, vm)
	before := e.sim.UploadProxyBytes()
	rec := e.mustComplete(e.engine(), e.spec("dense1", "dense1"))
	wire := e.sim.UploadProxyBytes() - before
	d := rec.Disks[0]
	got, _ := e.sim.ReceivedImage(e.ns, d.DataVolume)
	if d.UploadFormat != "raw" || d.UploadBytes != 8*mib || wire != 8*mib || got.SentFormat != "raw" {
		t.Errorf("record says %s, %d bytes were sent; the proxy received %s, %d bytes; want raw, %d", d.UploadFormat, d.UploadBytes, got.SentFormat, wire, 8*mib)
	}
	if want := files.Disks[0].SHA256(); got.SHA256 != want || d.SourceSHA256 != want || d.UploadSHA256 != want {
		t.Errorf("claim holds %s, record source %s, sent %s; want %s", got.SHA256, d.SourceSHA256, d.UploadSHA256, want)
	}
}
