package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// addChainVM adds a running VM whose one disk runs on a three-level chain:
// a top delta in format top over a delta in format mid over a thin base on
// another datastore, which the first delta names by its absolute path.
func addChainVM(t *testing.T, e *env, name string, mid, top vmdk.Format) *esxisim.DiskChainFiles {
	t.Helper()
	const capacity = 24 << 20
	cs, err := esxisim.SnapshotChainSpec("datastore1", name, name, capacity, mid, top, "datastore2")
	if err != nil {
		t.Fatal(err)
	}
	_, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: name, GuestOS: "rhel9-64", Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: capacity, Thin: true, Content: cs.Base, Deltas: cs.Deltas, BaseDatastore: "datastore2"}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.5"},
	})
	ch := files.Disks[0].Chain
	if ch == nil || len(ch.Links) != 3 || !strings.HasPrefix(ch.Links[1].ParentFileNameHint, "/vmfs/volumes/datastore2/") {
		t.Fatalf("chain %+v: want three links, the base named by an absolute path", ch)
	}
	return ch
}

// guestContent reads the chain on the host's files with the vmdk reader:
// its SHA-256 is what the guest sees.
func guestContent(t *testing.T, ch *esxisim.DiskChainFiles) string {
	t.Helper()
	local := map[string]string{}
	for _, l := range ch.Links {
		local[l.Descriptor], local[l.Extent] = l.LocalDescriptor, l.LocalExtent
	}
	c, err := vmdk.OpenChain(ch.Links[0].LocalDescriptor, func(from, name string) (string, error) {
		if !strings.HasPrefix(name, "/") {
			return filepath.Join(filepath.Dir(from), name), nil
		}
		if p, ok := local[name]; ok {
			return p, nil
		}
		return "", fmt.Errorf("%s is not a file of the chain", name)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sum, err := c.SHA256()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// fileSums hashes every file of a chain on the host.
func fileSums(t *testing.T, ch *esxisim.DiskChainFiles) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range ch.Links {
		for host, p := range map[string]string{l.Descriptor: l.LocalDescriptor, l.Extent: l.LocalExtent} {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[host] = diskdigest.Bytes(b)
		}
	}
	return out
}

// A running VM on a three-level chain (vmfsSparse over seSparse over a
// thin base on another datastore) migrates cold: the DataVolume holds the
// guest-visible content, the record holds each file's SHA-256 and the
// guest's, and the source chain is left byte for byte as it was.
func TestChainMigratesCold(t *testing.T) {
	e := newEnv(t)
	ch := addChainVM(t, e, "chained", vmdk.SESparse, vmdk.VMFSSparse)
	want := guestContent(t, ch)
	if want != ch.SHA256 {
		t.Fatalf("the vmdk reader sees %s, the chain's spec %s", want, ch.SHA256)
	}
	before := fileSums(t, ch)

	spec := e.spec("chained", "chained")
	en := e.engine()
	plan, err := en.Preview(e.ctx(20*time.Second), spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge, ResumeFromRecord: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Blockers()) != 0 {
		t.Fatalf("blockers %+v", plan.Blockers())
	}
	var chainCheck *preflight.Check
	for i, c := range plan.Checks.Checks {
		if c.ID == preflight.CheckSnapshots {
			chainCheck = &plan.Checks.Checks[i]
		}
	}
	if chainCheck == nil || chainCheck.Passed || chainCheck.Severity != preflight.Warning ||
		!strings.Contains(chainCheck.Message, "a 3-link chain (vmfsSparse over seSparse over a thin base)") {
		t.Errorf("chain check = %+v, want a warning describing the 3-link chain", chainCheck)
	}

	rec := e.mustComplete(en, spec)
	d := rec.Disks[0]
	if d.GuestSHA256 != want || d.SourceSHA256 != want || d.ArtifactSHA256 != want {
		t.Errorf("disk evidence guest %s source %s artifact %s, want %s", d.GuestSHA256, d.SourceSHA256, d.ArtifactSHA256, want)
	}
	got, ok := e.sim.ReceivedSHA256(e.ns, "chained-disk-0")
	if !ok || got != want {
		t.Errorf("the DataVolume received %q (%v), want the guest-visible content %s", got, ok, want)
	}
	if len(d.Chain) != 6 {
		t.Fatalf("chain evidence %+v: want a descriptor and an extent per link", d.Chain)
	}
	formats := []string{"vmfsSparse", "seSparse", "vmfs"}
	for _, f := range d.Chain {
		if f.SHA256 != before[f.SourcePath] || f.SHA256 == "" {
			t.Errorf("%s %s: recorded sha %s, the host file's is %s", f.Kind, f.SourcePath, f.SHA256, before[f.SourcePath])
		}
		if f.Format != formats[f.Link] {
			t.Errorf("%s of link %d: format %q, want %q", f.SourcePath, f.Link, f.Format, formats[f.Link])
		}
		l := ch.Links[f.Link]
		if (f.Kind == record.ChainFileDescriptor && (f.SourcePath != l.Descriptor || f.CID != fmt.Sprintf("%08x", l.CID))) ||
			(f.Kind == record.ChainFileExtent && f.SourcePath != l.Extent) {
			t.Errorf("evidence %+v, link files %+v", f, l)
		}
	}
	if after := fileSums(t, ch); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the source chain changed:\nbefore %v\nafter  %v", before, after)
	}
	for _, c := range e.host.Commands() {
		if strings.Contains(c, "snapshot.remove") || strings.Contains(c, "snapshot.create") || strings.Contains(c, "vmkfstools") {
			t.Errorf("the migration ran %q on the source", c)
		}
	}
}

// A chain whose base is gone, or whose middle link changed after the top
// was taken, is refused at plan and at apply, saying what to do; nothing
// is powered off.
func TestChainBrokenIsRefused(t *testing.T) {
	e := newEnv(t)
	lost := addChainVM(t, e, "lost", vmdk.VMFSSparse, vmdk.SESparse)
	if err := os.Remove(lost.Links[2].LocalDescriptor); err != nil {
		t.Fatal(err)
	}
	changed := addChainVM(t, e, "changed", vmdk.SESparse, vmdk.VMFSSparse)
	p := changed.Links[1].LocalDescriptor
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("\nCID=%08x", changed.Links[1].CID)
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", p, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, fmt.Sprintf("\nCID=%08x", changed.Links[1].CID^0x5a), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ vm, want string }{
		{"lost", "descriptor could not be read or parsed"},
		{"changed", "the parent changed after the snapshot was taken"},
	} {
		t.Run(tc.vm, func(t *testing.T) {
			spec := e.spec(tc.vm, tc.vm)
			en := e.engine()
			plan, err := en.Preview(e.ctx(20*time.Second), spec, engine.PreviewOptions{InventoryMaxAge: engine.DefaultInventoryMaxAge, ResumeFromRecord: true})
			if err != nil {
				t.Fatal(err)
			}
			bl := plan.Blockers()
			if len(bl) != 1 || bl[0].ID != preflight.CheckSnapshots || !strings.Contains(bl[0].Message, tc.want) ||
				!strings.Contains(bl[0].Message, "A missing parent must be restored") {
				t.Fatalf("blockers %+v, want the chain check saying %q and what to do", bl, tc.want)
			}
			rec, err := en.Run(e.ctx(30*time.Second), spec)
			var se *engine.StopError
			if !errors.As(err, &se) || se.Phase != record.PhaseValidated || se.Reason != "PreflightFailed" || !strings.Contains(se.Message, tc.want) {
				t.Fatalf("apply = %v, want a stop at Validated saying %q", err, tc.want)
			}
			if rec.PowerOff != nil {
				t.Errorf("a refused migration decided a power-off: %+v", rec.PowerOff)
			}
		})
	}
}

// Interrupted while copying the chain, a migration resumes from the
// journals: the second run reads none of the chunks the first verified,
// and completes with the guest-visible content.
func TestChainCopyResumes(t *testing.T) {
	e := newEnv(t)
	ch := addChainVM(t, e, "resumed", vmdk.VMFSSparse, vmdk.SESparse)
	spec := e.spec("resumed", "resumed")
	e.host.SetCommandDelay(40 * time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := func(ev engine.Event) {
		if ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing && ev.BytesDone >= 4<<20 {
			cancel()
		}
	}
	rec := e.runInterrupted(ctx, spec, record.PhasePreparing, stop)
	// The base's flat file is the big one: its copy stopped part way.
	base := ch.Links[2].Extent
	var verified int64
	for _, f := range rec.Disks[0].Chain {
		if f.SourcePath == base {
			st, err := transfer.Inspect(transfer.Disk{Path: base, SizeBytes: f.Bytes}, filepath.Join(spec.WorkDir, e.ns, "resumed", "disk-0-link-2-extent-0"), spec.CopyChunkSize)
			if err != nil || st.State != transfer.StatePartial {
				t.Fatalf("the base's copy after the interruption: %+v, %v", st, err)
			}
			verified = st.VerifiedBytes
		}
	}
	if verified == 0 {
		t.Fatalf("no partial copy of %s in %+v", base, rec.Disks[0].Chain)
	}
	mark := len(e.host.CommandLog())
	e.host.SetCommandDelay(0)
	rec = e.mustComplete(e.engine(), spec)
	for _, r := range e.ddReads(mark) {
		if !strings.Contains(r, base) {
			continue
		}
		at := strings.LastIndexByte(r, '@')
		var off int64
		fmt.Sscan(r[at+1:], &off)
		if off < verified {
			t.Errorf("the second run re-read %s, below the %d verified bytes", r, verified)
		}
	}
	if got, _ := e.sim.ReceivedSHA256(e.ns, "resumed-disk-0"); got != ch.SHA256 || rec.Disks[0].GuestSHA256 != ch.SHA256 {
		t.Errorf("received %s, guest %s, want %s", got, rec.Disks[0].GuestSHA256, ch.SHA256)
	}
	if n := len(e.commands("power.shutdown")) + len(e.commands("power.off")); n != 1 {
		t.Errorf("%d power commands, want 1", n)
	}
}
