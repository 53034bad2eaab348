package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// stepConvert makes the image to import for every disk.
func (r *run) stepConvert(ctx context.Context) error {
	rec := r.rec()
	if err := r.localPathsUsable(); err != nil {
		return err
	}
	if r.spec.Conversion == ConversionVirtV2V && rec.Conversion != nil && r.convertedIntact() {
		// Converted by an earlier run: the images CDI receives are ready.
		return r.converted()
	}
	if err := r.ensureStagingToken(ctx); err != nil {
		return err
	}
	if err := r.flattenChains(ctx); err != nil { // disks on snapshots, see chain.go
		return err
	}
	for i := range rec.Disks {
		if d := &rec.Disks[i]; d.Uploaded && d.ArtifactSHA256 != "" {
			continue // its image was made and sent while others were prepared
		}
		if err := r.prepareImage(ctx, i); err != nil {
			return err
		}
	}
	if err := r.convertGuest(ctx); err != nil {
		return err
	}
	return r.converted()
}

// converted records that the images CDI receives are ready.
func (r *run) converted() error {
	rec := r.rec()
	now := r.now()
	stamp(&rec.Timestamps.Converted, now)
	rec.SetCondition(now, record.CondDiskConverted, true, "Converted", fmt.Sprintf("%d %s image(s) ready", len(rec.Disks), r.spec.TargetFormat))
	return nil
}

// ensureStagingToken makes the http transport's random folder name once,
// recording it before any image is written there. A migration whose images
// were written before tokens existed keeps its folder.
func (r *run) ensureStagingToken(ctx context.Context) error {
	rec := r.rec()
	if r.spec.Transport.Kind != TransportHTTP || rec.StagingToken != "" {
		return nil
	}
	for _, d := range rec.Disks {
		if d.ArtifactPath != "" {
			return nil
		}
	}
	t, err := newStagingToken()
	if err != nil {
		return err
	}
	rec.StagingToken = t
	if err := r.save(ctx); err != nil {
		rec.StagingToken = ""
		return err
	}
	return nil
}

// prepareImage makes disk i's image to import from its verified staged
// copy (or its chain, flattened): the staged raw file itself, or qemu-img's
// conversion to the target format, checked and recorded.
func (r *run) prepareImage(ctx context.Context, i int) error {
	d := &r.rec().Disks[i]
	art, staged := r.spec.artifactPath(i, r.rec().StagingToken), r.spec.stagedPath(i)
	st, err := transfer.Inspect(transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}, staged, r.chunkSize())
	if err != nil {
		return err
	}
	if st.State != transfer.StateComplete {
		if d.ArtifactSHA256 != "" && art != staged && r.artifactIntact(ctx, d, art) {
			return nil
		}
		return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("the staged copy of disk %d (%s) is %s", i, staged, st.State)}
	}
	format := convert.Format(r.spec.TargetFormat)
	if art == staged {
		if _, err := r.e.tool.Check(ctx, art, convert.Raw, d.SizeBytes); err != nil {
			return err
		}
		d.ArtifactPath, d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = art, string(convert.Raw), d.SourceSHA256, d.SizeBytes
	} else {
		mkdir := func() error { return os.MkdirAll(filepath.Dir(art), 0o700) }
		if r.spec.Transport.Kind == TransportHTTP {
			mkdir = func() error { return r.spec.makeHTTPFolder(r.rec().StagingToken) }
		}
		if err := mkdir(); err != nil {
			return needsHuman("StagingDirUnusable", "cannot create "+filepath.Dir(art), "make the folder writable, then run apply again", err)
		}
		a, err := r.e.tool.Convert(ctx, staged, convert.Raw, art, format)
		if isNoSpace(err) {
			return r.noSpace(fmt.Sprintf("converting disk %d", i), err)
		}
		if err != nil {
			return err
		}
		if _, err := r.e.tool.Check(ctx, a.Path, format, d.SizeBytes); err != nil {
			_ = convert.Remove(art)
			return err
		}
		// Only the provider's user (and an HTTP server running as it)
		// reads the images.
		for _, p := range []string{art, art + convert.SidecarSuffix} {
			if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
				return needsHuman("StagingDirUnusable", "cannot restrict the permissions of "+p, "make the folder writable, then run apply again", err)
			}
		}
		d.ArtifactPath, d.ArtifactFormat, d.ArtifactSHA256, d.ArtifactBytes = art, string(a.Format), a.SHA256, a.SizeBytes
	}
	if r.spec.Transport.Kind == TransportHTTP {
		d.ArtifactURL = r.spec.imageURL(i, r.rec().StagingToken)
	}
	r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferImage}, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
		Message: fmt.Sprintf("disk %d: %s image ready (digest %s)", i, d.ArtifactFormat, d.ArtifactSHA256)})
	return nil
}

// artifactIntact reports whether a converted artifact still matches its
// recorded checksum (its sidecar, verified by Convert's skip path, is not
// usable without the source: check the size and format instead).
func (r *run) artifactIntact(ctx context.Context, d *record.DiskEvidence, art string) bool {
	fi, err := os.Stat(art)
	if err != nil || fi.Size() != d.ArtifactBytes {
		return false
	}
	_, err = r.e.tool.Check(ctx, art, convert.Format(d.ArtifactFormat), d.SizeBytes)
	return err == nil
}

// maxParallelFlattens bounds the chains flattened at once: each is bound
// by one core (reading, hashing, writing), and more would only share the
// same disk.
const maxParallelFlattens = 2

// flattenChains makes the staged raw copy of every disk that runs on a
// snapshot chain, up to maxParallelFlattens at once. The flattens run in
// their own goroutines; this one owns the record, records each as it ends
// and, when the images need no conversion, sends a flattened disk to its
// DataVolume while others still flatten (as copies do, pipeline.go). Every
// flatten runs to its end even when another fails, so its staged copy is
// complete for the next attempt; the first failure is returned.
func (r *run) flattenChains(ctx context.Context) error {
	var plans []*flattenPlan
	for i := range r.rec().Disks {
		f, err := r.planFlatten(i)
		if err != nil {
			for _, f := range plans {
				f.chain.Close()
			}
			return err
		}
		if f != nil {
			plans = append(plans, f)
		}
	}
	type ended struct {
		f   *flattenPlan
		res transfer.Result
		err error
	}
	done := make(chan ended, len(plans))
	slots := make(chan struct{}, maxParallelFlattens)
	for _, f := range plans {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			res, err := f.copy(ctx)
			done <- ended{f, res, err}
		}()
	}
	var first error
	for left := len(plans); left > 0; left-- {
		e := <-done
		if err := r.recordFlatten(ctx, e.f, e.res, e.err); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if first == nil && left > 1 && r.uploadsEachDisk() {
			r.uploadEarly(ctx, e.f.i, true)
		}
	}
	return first
}

// flattenPlan is one disk's flatten: its chain, checked and open, and
// where its guest-visible content goes.
type flattenPlan struct {
	i      int
	chain  *vmdk.Chain
	disk   transfer.Disk
	staged string
	chunk  int64
}

// copy runs the journaled copy of the chain's content into the staged
// file, then closes the chain. It reads nothing of the record, so it may
// run beside the goroutine that owns it.
func (f *flattenPlan) copy(ctx context.Context) (transfer.Result, error) {
	defer f.chain.Close()
	return transfer.Copy(ctx, chainContent{f.chain}, f.disk, f.staged, transfer.Options{ChunkSize: f.chunk})
}

// recordFlatten records the end of disk i's flatten (or its failure, as
// what to do next) and saves the record.
func (r *run) recordFlatten(ctx context.Context, f *flattenPlan, res transfer.Result, err error) error {
	i := f.i
	if isNoSpace(err) {
		return r.noSpace(fmt.Sprintf("flattening the snapshot chain of disk %d", i), err)
	}
	if err != nil {
		return fmt.Errorf("disk %d: flattening its snapshot chain: %w", i, err)
	}
	d := &r.rec().Disks[i]
	d.GuestSHA256, d.SourceSHA256, d.ZeroBytes = res.SHA256, res.SHA256, res.ZeroBytes
	r.report(ctx, Event{Kind: EventProgress, Disk: i, Transfer: Transfer{Kind: TransferFlatten}, BytesDone: d.SizeBytes, BytesTotal: d.SizeBytes, Percent: 100,
		Message: fmt.Sprintf("disk %d: snapshot chain (%s) flattened (guest digest %s)", i, chainSummary(d.Chain), d.GuestSHA256)})
	return r.save(ctx)
}

// planFlatten prepares disk i's flatten, or returns nil when the disk runs
// on no chain or was flattened (or converted) already: the copied files
// are checked against their recorded SHA-256 (a file that fails goes back
// to Preparing) and the chain is rebuilt and opened. Its guest-visible
// content is then staged with the same journaled copy as any disk, so that
// the per-disk conversion that follows finds a complete staged copy. A
// crash anywhere redoes the flatten from the verified files.
func (r *run) planFlatten(i int) (*flattenPlan, error) {
	rec := r.rec()
	d := &rec.Disks[i]
	if !d.OnChain() {
		return nil, nil
	}
	staged := r.spec.stagedPath(i)
	disk := transfer.Disk{Path: d.SourcePath, SizeBytes: d.SizeBytes}
	st, err := transfer.Inspect(disk, staged, r.chunkSize())
	if err != nil {
		return nil, err
	}
	if st.State == transfer.StateComplete && d.GuestSHA256 != "" && st.Result.SHA256 == d.GuestSHA256 && d.SourceSHA256 == d.GuestSHA256 {
		return nil, nil
	}
	if d.ArtifactSHA256 != "" && d.GuestSHA256 != "" && r.spec.artifactPath(i, r.rec().StagingToken) != staged {
		if _, err := os.Stat(r.spec.artifactPath(i, r.rec().StagingToken)); err == nil {
			// Converted already; the staged copy is not needed again.
			return nil, nil
		}
	}
	back := func(why string) error {
		d.Acquired = false
		return &backTo{phase: record.PhasePreparing, reason: fmt.Sprintf("the copied snapshot chain of disk %d: %s", i, why)}
	}
	chain, err := r.verifiedChain(i, back)
	if err != nil {
		return nil, err
	}
	// The chain is flattened straight into the staged copy: the journaled
	// copy reads the guest-visible content through the provider's chain
	// reader (see convert.FlattenChain for why not qemu-img), hashes it
	// and leaves zeros as holes in one pass, and resumes after a crash.
	c, pc, err := convert.OpenPreparedChain(r.spec.stagingDir(), chain)
	if errors.Is(err, vmdk.ErrCIDMismatch) || errors.Is(err, vmdk.ErrParentMissing) {
		return nil, needsHuman("ChainInconsistent", fmt.Sprintf("disk %d: the copied snapshot chain cannot be read consistently: %v", i, err),
			"check the chain on the host (a parent written after its snapshot was taken, or a missing parent); consolidate the snapshots in the host client, then run apply again", err)
	}
	if err != nil {
		return nil, fmt.Errorf("disk %d: flattening its snapshot chain: %w", i, err)
	}
	if pc.CapacityBytes != d.SizeBytes {
		c.Close()
		return nil, permanent("ChainSizeMismatch", fmt.Sprintf("disk %d: the flattened chain holds %d bytes, the disk %d", i, pc.CapacityBytes, d.SizeBytes),
			"report this as a bug with the disk's descriptors", nil)
	}
	if err := convert.Remove(r.spec.flattenedPath(i)); err != nil { // left by an earlier version
		c.Close()
		return nil, err
	}
	return &flattenPlan{i: i, chain: c, disk: disk, staged: staged, chunk: r.chunkSize()}, nil
}

// verifiedChain is disk i's copied snapshot chain, base first, with every
// copied file checked against its recorded SHA-256; a file that is missing
// or differs sends the migration back (back) to copy it again.
func (r *run) verifiedChain(i int, back func(why string) error) ([]convert.ChainLink, error) {
	d := &r.rec().Disks[i]
	links := map[int]*convert.ChainLink{}
	var order []int
	for _, f := range d.Chain {
		local := r.spec.chainLocalPath(i, f)
		if f.SHA256 == "" {
			return nil, back(f.SourcePath + " was not copied")
		}
		l := links[f.Link]
		if l == nil {
			l = &convert.ChainLink{DescriptorName: chainDescriptorName(i, f.Link)}
			links[f.Link] = l
			order = append(order, f.Link)
		}
		if f.Kind == record.ChainFileDescriptor {
			b, err := os.ReadFile(local)
			if err != nil {
				return nil, back(fmt.Sprintf("%s: %v", local, err))
			}
			if diskdigest.Bytes(b) != f.SHA256 {
				return nil, back(local + " no longer matches its recorded SHA-256")
			}
			l.Descriptor = string(b)
			continue
		}
		est, err := transfer.Inspect(transfer.Disk{Path: f.SourcePath, SizeBytes: f.Bytes}, local, r.chunkSize())
		if err != nil {
			return nil, err
		}
		if est.State != transfer.StateComplete || est.Result.SHA256 != f.SHA256 {
			return nil, back(fmt.Sprintf("the copy of %s is %s", f.SourcePath, est.State))
		}
		l.ExtentNames = append(l.ExtentNames, filepath.Base(local))
	}
	if len(order) > vmdk.MaxChainDepth {
		return nil, permanent("ChainTooDeep", fmt.Sprintf("disk %d runs on %d links, more than %d", i, len(order), vmdk.MaxChainDepth), "consolidate the snapshots on the source, then run apply again", nil)
	}
	var chain []convert.ChainLink
	for k := range order {
		l := links[k]
		if l == nil {
			return nil, back(fmt.Sprintf("link %d is missing from the recorded chain", k))
		}
		chain = append(chain, *l)
	}
	return chain, nil
}

// chainContent reads ranges of a snapshot chain's guest-visible content,
// for flattening it with the journaled copy. A writer that takes zero runs
// as runs gets them without reading: what no link allocates over the
// base's holes, and what a delta zeroes (vmdk.Chain.ZeroRun); reads that
// turn out all zeros reach it as runs too.
type chainContent struct{ c *vmdk.Chain }

func (cc chainContent) ReadRange(ctx context.Context, _ string, offset, length int64, w io.Writer) (int64, error) {
	zw, zeroRuns := w.(interface{ WriteZeros(int64) error })
	var buf []byte
	var done int64
	for done < length {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if zeroRuns {
			z, err := cc.c.ZeroRun(offset+done, length-done)
			if err != nil {
				return done, err
			}
			if z > 0 {
				if err := zw.WriteZeros(z); err != nil {
					return done, err
				}
				done += z
				continue
			}
		}
		if buf == nil {
			buf = make([]byte, min(length, 1<<20))
		}
		p := buf[:min(int64(len(buf)), length-done)]
		if _, err := cc.c.ReadAt(p, offset+done); err != nil && !errors.Is(err, io.EOF) {
			return done, err
		}
		var err error
		if zeroRuns && allZero(p) {
			err = zw.WriteZeros(int64(len(p)))
		} else {
			_, err = w.Write(p)
		}
		if err != nil {
			return done, err
		}
		done += int64(len(p))
	}
	return done, nil
}

func allZero(p []byte) bool {
	for len(p) > 0 {
		k := min(len(p), len(zeroBuf))
		if !bytes.Equal(p[:k], zeroBuf[:k]) {
			return false
		}
		p = p[k:]
	}
	return true
}

var zeroBuf [64 << 10]byte

// localFile reads ranges of a file on this machine, for staging a local
// image with the journaled copy.
type localFile string

func (l localFile) ReadRange(_ context.Context, _ string, offset, length int64, w io.Writer) (int64, error) {
	f, err := os.Open(string(l))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(w, io.NewSectionReader(f, offset, length))
	if err == nil && n != length {
		err = fmt.Errorf("%s: read %d bytes at offset %d, expected %d", l, n, offset, length)
	}
	return n, err
}

// chainSummary describes a disk's recorded chain for messages.
func chainSummary(files []record.ChainFileEvidence) string {
	var formats []string
	for _, f := range files {
		if f.Kind == record.ChainFileDescriptor {
			formats = append(formats, f.Format)
		}
	}
	return strings.Join(formats, " over ")
}

// Guest conversion.
//
// A guest installed on ESXi carries drivers for VMware's devices only: a
// Linux initramfs built for IDE or pvscsi, Windows without virtio drivers.
// On KubeVirt's virtio devices it does not find its root disk. With
// conversion "virt-v2v" (the default) the Converting checkpoint runs
// virt-v2v-in-place on copies of the disks' images, after qemu-img made
// them: it installs the virtio drivers, fixes fstab and the bootloader and
// removes VMware Tools. The converted images are what CDI receives; their
// SHA-256 is recorded next to the copy's (DiskEvidence.SourceSHA256 and
// ConvertedSHA256), with what virt-v2v saw and did (Record.Conversion).
//
// The guest's disks are read only once the source is off (a running VM's
// disks are locked on ESXi), so the plan judges what is known before:
// whether virt-v2v works on this machine, and from the .vmx's guestOS
// whether the guest is one virt-v2v converts and, for Windows, whether
// the virtio-win drivers are there. virt-v2v's own inspection then runs on
// the copied disks, before anything reaches the cluster.

// Pre-flight check IDs of guest conversion. Stable: users may match on them.
const (
	// CheckConversionTools fails when virt-v2v or a tool it needs is
	// missing or broken on the machine running Terraform.
	CheckConversionTools = "conversion_tools"
	// CheckGuestConvertible fails when the guest is one virt-v2v cannot
	// convert, or a Windows guest without virtio-win drivers at hand.
	CheckGuestConvertible = "guest_convertible"
	// CheckGuestDrivers warns that a guest migrated without conversion
	// boots only if it already drives the devices it is given.
	CheckGuestDrivers = "guest_drivers"
)

// unconvertibleGuests are .vmx guestOS prefixes of systems virt-v2v does
// not convert (it converts RHEL-family, Debian, Ubuntu, SUSE and other
// Linux guests, and Windows from 7 / Server 2008 R2 on).
var unconvertibleGuests = []string{"freebsd", "solaris", "darwin", "netware", "dos", "win31", "win95", "win98", "winme",
	"winnt", "win2000", "winxp", "winnet", "winvista", "longhorn", "os2", "ecomstation", "sco", "unixware", "openserver", "vmkernel"}

// isWindowsGuest reports whether a .vmx guestOS is a Windows.
func isWindowsGuest(guestOS string) bool {
	g := strings.ToLower(guestOS)
	return strings.HasPrefix(g, "win") || strings.HasPrefix(g, "longhorn")
}

// v2vState is the engine's virt-v2v runner and what probing it found.
type v2vState struct {
	tool convert.V2V
	mu   sync.Mutex
	// tools is set once a probe succeeded (failures are probed again, so
	// installing the packages needs no restart).
	tools *convert.V2VTools
}

// probe checks once that virt-v2v works here.
func (v *v2vState) probe(ctx context.Context) (convert.V2VTools, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tools != nil {
		return *v.tools, nil
	}
	t, err := v.tool.Probe(ctx)
	if err != nil {
		return t, err
	}
	v.tools = &t
	return t, nil
}

// conversionChecks are the pre-flight checks of the guest conversion the
// spec asks for, judged the same way at plan time and at Validated.
func (e *Engine) conversionChecks(ctx context.Context, spec Spec, vm *esxi.VM) []preflight.Check {
	if spec.Conversion == ConversionNone {
		c := preflight.Check{ID: CheckGuestDrivers, Severity: preflight.Warning,
			Message: fmt.Sprintf("VM %q is migrated without conversion, on %s disks and %s network interfaces: it boots only if the guest already has drivers for them "+
				"(a guest installed on VMware usually has none for virtio). If it does not boot, Validating stops with its console; set conversion = %q to have virt-v2v install the drivers.",
				vm.Name, spec.DiskBus, spec.NICModel, ConversionVirtV2V)}
		return []preflight.Check{c}
	}
	tools := preflight.Check{ID: CheckConversionTools, Severity: preflight.Blocker, Passed: true}
	if spec.inCluster() {
		// The conversion Job brings its own virt-v2v (the worker image):
		// nothing is needed on this machine.
		tools.Message = "virt-v2v runs in the migration's conversion Job, from the worker image."
		return []preflight.Check{tools, e.convertibleCheck(vm)}
	}
	if t, err := e.v2v.probe(ctx); err != nil {
		tools.Passed = false
		tools.Message = fmt.Sprintf("Guest conversion cannot run on this machine: %v. Install the Debian packages %s (apt-get install %s), "+
			"or set conversion = %q if the guest already has virtio drivers.", err, strings.Join(convert.V2VPackages, ", "), strings.Join(convert.V2VPackages, " "), ConversionNone)
	} else {
		tools.Message = fmt.Sprintf("virt-v2v %s is installed; its helper VM runs with %s.", t.Version, e.v2v.tool.Accel.Name)
	}
	return []preflight.Check{tools, e.convertibleCheck(vm)}
}

// convertibleCheck judges from the .vmx whether virt-v2v can convert the
// guest.
func (e *Engine) convertibleCheck(vm *esxi.VM) preflight.Check {
	c := preflight.Check{ID: CheckGuestConvertible, Severity: preflight.Blocker, Passed: true}
	g := strings.ToLower(vm.GuestOS)
	switch {
	case hasAnyPrefix(g, unconvertibleGuests):
		c.Passed = false
		c.Message = fmt.Sprintf("VM %q runs guest OS %q, which virt-v2v cannot convert. Install virtio drivers in the guest and set conversion = %q, or migrate it another way.",
			vm.Name, vm.GuestOS, ConversionNone)
	case isWindowsGuest(g):
		if err := e.v2v.tool.CheckVirtioWin(); err != nil {
			c.Passed = false
			c.Message = fmt.Sprintf("VM %q is a Windows guest (%s): its conversion installs the virtio-win drivers, which are not on this machine (%v). "+
				"Put virtio-win.iso or its unpacked folder at %s, or set the provider's virtio_win (or $%s) to where they are.",
				vm.Name, vm.GuestOS, err, e.v2v.tool.VirtioWinPath(), convert.EnvVirtioWin)
		} else {
			c.Message = fmt.Sprintf("Windows guest %q: virt-v2v installs the virtio-win drivers from %s.", vm.GuestOS, e.v2v.tool.VirtioWinPath())
		}
	case g == "" || strings.HasPrefix(g, "other"):
		c.Message = fmt.Sprintf("VM %q declares guest OS %q; virt-v2v inspects the copied disks and stops the migration there, before anything reaches the cluster, if it finds no OS it converts.", vm.Name, vm.GuestOS)
	default:
		c.Message = fmt.Sprintf("Guest OS %q: virt-v2v installs the virtio drivers and removes VMware Tools.", vm.GuestOS)
	}
	return c
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Bounds of the conversion evidence kept in the record.
const (
	maxConversionMessages     = 10
	maxConversionMessageBytes = 300
)

// conversionEvidenceOf turns virt-v2v's evidence into the record's,
// bounding what the tool printed.
func conversionEvidenceOf(ev convert.V2VEvidence, now time.Time) *record.ConversionEvidence {
	bound := func(in []string) []string {
		var out []string
		for _, m := range in {
			if len(out) == maxConversionMessages {
				break
			}
			out = append(out, record.TruncateMessage(m, maxConversionMessageBytes))
		}
		return out
	}
	o := ev.OS
	return &record.ConversionEvidence{
		Tool: ev.Tool, Version: record.TruncateMessage(ev.Version, 64), Accelerator: ev.Accel.Name,
		OS: record.GuestOS{Type: o.Type, Distro: o.Distro, Version: o.Version, OSInfo: o.OSInfo, Arch: o.Arch,
			ProductName: record.TruncateMessage(o.ProductName, 200), Firmware: o.Firmware},
		Converted: record.TruncateMessage(ev.Converted, maxConversionMessageBytes),
		Drivers:   bound(ev.Drivers), Warnings: bound(ev.Warnings),
		Seconds: ev.Duration.Seconds(), Time: now,
	}
}

// convertedPath is where disk n's converted image is written: the folder
// the http transport serves (token is the record's StagingToken), else the
// migration's work folder.
func (s Spec) convertedPath(n int, token string) string {
	name := fmt.Sprintf("disk-%d.converted.%s", n, s.TargetFormat)
	if s.Transport.Kind == TransportHTTP {
		return filepath.Join(s.httpFolder(token), name)
	}
	return filepath.Join(s.stagingDir(), name)
}

// imagePath is the image CDI receives for disk n: the converted one when
// the guest is converted, else qemu-img's. token is the record's
// StagingToken.
func (s Spec) imagePath(n int, token string) string {
	if s.Conversion == ConversionVirtV2V {
		return s.convertedPath(n, token)
	}
	return s.artifactPath(n, token)
}

// convertGuest runs virt-v2v on copies of the disks' images, once: a
// recorded conversion whose images are intact is not run again, and one
// cut short is run again from the unchanged images.
func (r *run) convertGuest(ctx context.Context) error {
	rec := r.rec()
	if r.spec.Conversion != ConversionVirtV2V {
		return nil
	}
	if rec.Conversion != nil && r.convertedIntact() {
		return nil
	}
	rec.Conversion = nil
	if r.spec.Transport.Kind == TransportHTTP {
		if err := r.spec.makeHTTPFolder(r.rec().StagingToken); err != nil {
			return needsHuman("StagingDirUnusable", "cannot create "+r.spec.httpFolder(r.rec().StagingToken), "make the folder writable, then run apply again", err)
		}
	}
	images := make([]convert.V2VDisk, len(rec.Disks))
	dsts := make([]string, len(rec.Disks))
	for i, d := range rec.Disks {
		images[i] = convert.V2VDisk{Path: r.spec.artifactPath(i, r.rec().StagingToken), Format: convert.Format(d.ArtifactFormat)}
		dsts[i] = r.spec.convertedPath(i, r.rec().StagingToken)
	}
	if _, err := r.e.v2v.probe(ctx); err != nil {
		return needsHuman("ConversionToolsMissing", err.Error(),
			fmt.Sprintf("install the Debian packages %s on the machine running Terraform (or set conversion = %q if the guest has virtio drivers), then run apply again",
				strings.Join(convert.V2VPackages, ", "), ConversionNone), err)
	}
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("converting the guest on %d disk(s) with virt-v2v-in-place (helper VM on %s; minutes without KVM)",
		len(images), r.e.v2v.tool.Accel.Name)})
	ev, out, err := r.e.v2v.tool.ConvertCopies(ctx, images, dsts, convert.V2VOptions{})
	switch {
	case err == nil:
	case isNoSpace(err):
		return r.noSpace("converting the guest", err)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, convert.ErrV2VStalled):
		// Killed with its helper VM; the images are as they were, so a
		// new attempt converts them again from the start.
		return transient("ConversionStalled", "virt-v2v stopped making progress", err)
	case errors.Is(err, convert.ErrNoVirtioWin):
		return needsHuman("VirtioWinMissing", err.Error(),
			"put the virtio-win drivers where the provider's virtio_win points (or $VIRTIO_WIN), then run apply again", err)
	case errors.Is(err, convert.ErrV2VMissing):
		return needsHuman("ConversionToolsMissing", err.Error(),
			"install the Debian packages "+strings.Join(convert.V2VPackages, ", ")+", then run apply again", err)
	default:
		return needsHuman("ConversionFailed", "virt-v2v could not convert the guest: "+err.Error(),
			fmt.Sprintf("if the guest has no OS virt-v2v converts, install virtio drivers in it and set conversion = %q; otherwise fix the guest as the message says, then run apply again", ConversionNone), err)
	}
	for i := range rec.Disks {
		d := &rec.Disks[i]
		d.ConvertedSHA256 = out[i].SHA256
		d.ArtifactPath, d.ArtifactSHA256, d.ArtifactBytes = out[i].Path, out[i].SHA256, out[i].Bytes
		if r.spec.Transport.Kind == TransportHTTP {
			d.ArtifactURL = r.spec.imageURL(i, r.rec().StagingToken)
		}
	}
	rec.Conversion = conversionEvidenceOf(ev, r.now())
	r.report(ctx, Event{Kind: EventInfo, Message: fmt.Sprintf("converted %s in %s with %s %s: %s",
		rec.Conversion.OS, ev.Duration.Round(time.Second), ev.Tool, ev.Version, ev.Converted)})
	return r.save(ctx)
}

// convertedIntact reports whether every recorded converted image is still
// there with its recorded size (its content is checked by qemu-img before
// upload and by CDI on import).
func (r *run) convertedIntact() bool {
	for i, d := range r.rec().Disks {
		if d.ConvertedSHA256 == "" {
			return false
		}
		fi, err := os.Stat(r.spec.convertedPath(i, r.rec().StagingToken))
		if err != nil || fi.Size() != d.ArtifactBytes {
			return false
		}
	}
	return true
}
