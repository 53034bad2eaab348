package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/preflight"
)

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

// ConversionEvidence is what a guest conversion saw and did.
type ConversionEvidence struct {
	// Tool and Version are the virt-v2v program that ran.
	Tool    string `json:"tool"`
	Version string `json:"version"`
	// Accelerator is what libguestfs's helper VM ran on ("kvm" or "tcg").
	Accelerator string `json:"accelerator"`
	// OS is the guest as virt-v2v inspected it.
	OS GuestOS `json:"os"`
	// Converted is virt-v2v's summary, e.g. "Converting 12.15 to run on KVM".
	Converted string `json:"converted,omitempty"`
	// Drivers and Warnings are virt-v2v's messages about them.
	Drivers  []string `json:"drivers,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Seconds is how long the conversion took.
	Seconds float64   `json:"seconds"`
	Time    time.Time `json:"time"`
}

// GuestOS is an inspected guest operating system.
type GuestOS struct {
	// Type is "linux" or "windows"; Distro e.g. "debian", "rhel",
	// "windows"; Version "major.minor"; OSInfo the libosinfo ID
	// ("debian12", "win2k22").
	Type        string `json:"type"`
	Distro      string `json:"distro,omitempty"`
	Version     string `json:"version,omitempty"`
	OSInfo      string `json:"osinfo,omitempty"`
	Arch        string `json:"arch,omitempty"`
	ProductName string `json:"productName,omitempty"`
	// Firmware is "bios" or "uefi", as the disks show it.
	Firmware string `json:"firmware,omitempty"`
}

// String is how the OS is shown to users, e.g. "debian 12.15 (debian12)".
func (g GuestOS) String() string {
	s := strings.TrimSpace(g.Distro + " " + g.Version)
	if g.ProductName != "" && g.ProductName != g.Version {
		s = g.ProductName
	}
	if g.OSInfo != "" {
		s += " (" + g.OSInfo + ")"
	}
	return s
}

// Bounds of the conversion evidence kept in the record.
const (
	maxConversionMessages     = 10
	maxConversionMessageBytes = 300
)

// conversionEvidenceOf turns virt-v2v's evidence into the record's,
// bounding what the tool printed.
func conversionEvidenceOf(ev convert.V2VEvidence, now time.Time) *ConversionEvidence {
	bound := func(in []string) []string {
		var out []string
		for _, m := range in {
			if len(out) == maxConversionMessages {
				break
			}
			out = append(out, truncateMessage(m, maxConversionMessageBytes))
		}
		return out
	}
	o := ev.OS
	return &ConversionEvidence{
		Tool: ev.Tool, Version: truncateMessage(ev.Version, 64), Accelerator: ev.Accel.Name,
		OS: GuestOS{Type: o.Type, Distro: o.Distro, Version: o.Version, OSInfo: o.OSInfo, Arch: o.Arch,
			ProductName: truncateMessage(o.ProductName, 200), Firmware: o.Firmware},
		Converted: truncateMessage(ev.Converted, maxConversionMessageBytes),
		Drivers:   bound(ev.Drivers), Warnings: bound(ev.Warnings),
		Seconds: ev.Duration.Seconds(), Time: now,
	}
}

// convertedPath is where disk n's converted image is written: the folder
// the http transport serves, else the migration's work folder.
func (s Spec) convertedPath(n int) string {
	name := fmt.Sprintf("disk-%d.converted.%s", n, s.TargetFormat)
	if s.Transport.Kind == TransportHTTP {
		return filepath.Join(s.httpFolder(), name)
	}
	return filepath.Join(s.stagingDir(), name)
}

// imagePath is the image CDI receives for disk n: the converted one when
// the guest is converted, else qemu-img's.
func (s Spec) imagePath(n int) string {
	if s.Conversion == ConversionVirtV2V {
		return s.convertedPath(n)
	}
	return s.artifactPath(n)
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
		if err := r.spec.makeHTTPFolder(); err != nil {
			return needsHuman("StagingDirUnusable", "cannot create "+r.spec.httpFolder(), "make the folder writable, then run apply again", err)
		}
	}
	images := make([]convert.V2VDisk, len(rec.Disks))
	dsts := make([]string, len(rec.Disks))
	for i, d := range rec.Disks {
		images[i] = convert.V2VDisk{Path: r.spec.artifactPath(i), Format: convert.Format(d.ArtifactFormat)}
		dsts[i] = r.spec.convertedPath(i)
	}
	if _, err := r.e.v2v.probe(ctx); err != nil {
		return needsHuman("ConversionToolsMissing", err.Error(),
			fmt.Sprintf("install the Debian packages %s on the machine running Terraform (or set conversion = %q if the guest has virtio drivers), then run apply again",
				strings.Join(convert.V2VPackages, ", "), ConversionNone), err)
	}
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("converting the guest on %d disk(s) with virt-v2v-in-place (helper VM on %s; minutes without KVM)",
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
			d.ArtifactURL = r.spec.imageURL(i)
		}
	}
	rec.Conversion = conversionEvidenceOf(ev, r.now())
	r.emit(Event{Kind: EventInfo, Message: fmt.Sprintf("converted %s in %s with %s %s: %s",
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
		fi, err := os.Stat(r.spec.convertedPath(i))
		if err != nil || fi.Size() != d.ArtifactBytes {
			return false
		}
	}
	return true
}
