// Package convertjob is the guest conversion that a conversion Job's pod
// runs in cluster execution: virt-v2v-in-place over every disk of one VM,
// each disk a raw image in its DataVolume's claim (disk.img, as the copy
// Jobs left it), so that the guest boots on KubeVirt's virtio devices. It
// holds the Job's contract, shared by the worker that runs it and the
// engine that renders and observes it: the [Spec] it reads and the
// [Result] it leaves in the termination message.
//
// The conversion runs on qcow2 overlays of the claims' images, kept in the
// claims beside them, so that a conversion that fails or is killed leaves
// the copied disks as they were: the next attempt makes fresh overlays.
// Only a conversion that succeeded is committed into the images, and that
// commit is made safe to re-enter: the overlays are synced and the
// conversion's evidence is recorded in the first claim (StateFile,
// "committing") before the first image is written, the commit leaves the
// overlays intact (qemu-img commit -d), so a commit cut short is simply
// committed again, and only once every image is committed, synced and
// hashed is the state "done" and are the overlays removed. A worker that
// finds "done" answers from it without converting again.
package convertjob

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Files the conversion keeps in its claims.
const (
	// StateFile, in the first disk's folder, records how far the
	// conversion got (State).
	StateFile = "convert.state"
	// OverlaySuffix names a disk image's overlay: disk.img.v2v.qcow2.
	OverlaySuffix = ".v2v.qcow2"
)

// MaxDisks bounds the disks of one conversion: the result carries a
// SHA-256 per disk within a termination message's 4096 bytes, which holds
// 36 with full evidence (TestEncodeFitsMaxDisks).
const MaxDisks = 32

// maxSpecBytes bounds a spec.
const maxSpecBytes = 64 << 10

// Spec is what one conversion is told, as JSON (the Job's argument: it
// holds no secret). Its paths are checked by [Spec.Validate] before
// anything is opened.
type Spec struct {
	// Disks are the guest's disks in its order: each a raw image file in a
	// claim, by absolute path (e.g. /disks/0/disk.img), and its size.
	Disks []Disk `json:"disks"`
	// StallSeconds is how long virt-v2v may print nothing before it is
	// killed and the conversion fails as stalled (transient); the
	// package convert's default when zero.
	StallSeconds int `json:"stall_seconds,omitempty"`
	// ResultPath is where the result is written (the termination log).
	ResultPath string `json:"result_path,omitempty"`
}

// Disk is one raw image in a claim: a claim's disk.img, or a Block-mode
// claim's device.
type Disk struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	// Device says Path is a Block-mode claim's device: its first
	// SizeBytes are the disk.
	Device bool `json:"device,omitempty"`
	// OverlayDir is where the disk's overlay (and for the first disk the
	// state) is kept: the disk's journal claim, so that its claim holds
	// the disk alone. A device needs one, since it has nothing beside
	// it; without one, a disk.img's overlay is kept beside it.
	OverlayDir string `json:"overlay_dir,omitempty"`
	// ID identifies the claim's content (the DataVolume's UID): a state
	// recorded for other IDs is another conversion's, of claims since
	// replaced, and is started over rather than believed.
	ID string `json:"id,omitempty"`
}

// ParseSpec decodes and validates a spec; what names it in errors.
// Unknown fields are an error.
func ParseSpec(b []byte, what string) (Spec, error) {
	if len(b) > maxSpecBytes {
		return Spec{}, fmt.Errorf("%s is larger than %d bytes", what, maxSpecBytes)
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Spec{}, fmt.Errorf("%s: more than one JSON value", what)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// Validate checks the spec without opening anything: between 1 and
// MaxDisks disks, each a clean absolute path named disk.img in a folder
// of its own, with a positive size.
func (s Spec) Validate() error {
	var errs []error
	if len(s.Disks) == 0 || len(s.Disks) > MaxDisks {
		errs = append(errs, fmt.Errorf("%d disks, want 1 to %d", len(s.Disks), MaxDisks))
	}
	dirs := map[string]bool{}
	for i, d := range s.Disks {
		check := checkPath
		if d.Device {
			check = checkAbs
			if d.OverlayDir == "" {
				errs = append(errs, fmt.Errorf("disks[%d] is a device and has no overlay_dir: a device has nothing beside it", i))
			}
		}
		if d.OverlayDir != "" {
			if err := checkAbs(d.OverlayDir); err != nil {
				errs = append(errs, fmt.Errorf("disks[%d].overlay_dir: %w", i, err))
			}
		}
		if err := check(d.Path); err != nil {
			errs = append(errs, fmt.Errorf("disks[%d].path: %w", i, err))
		} else if dir := d.dir(); dirs[dir] {
			errs = append(errs, fmt.Errorf("disks[%d] shares its folder %s with another disk", i, dir))
		} else {
			dirs[dir] = true
		}
		if d.SizeBytes <= 0 {
			errs = append(errs, fmt.Errorf("disks[%d].size_bytes %d, want > 0", i, d.SizeBytes))
		}
	}
	if s.StallSeconds < 0 {
		errs = append(errs, fmt.Errorf("stall_seconds %d, want >= 0", s.StallSeconds))
	}
	if s.ResultPath != "" {
		if err := checkAbs(s.ResultPath); err != nil {
			errs = append(errs, fmt.Errorf("result_path: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ImageName is the file a Filesystem-mode claim holds its disk in.
const ImageName = "disk.img"

func checkPath(p string) error {
	if err := checkAbs(p); err != nil {
		return err
	}
	if filepath.Base(p) != ImageName {
		return fmt.Errorf("%q is not a claim's %s", p, ImageName)
	}
	return nil
}

func checkAbs(p string) error {
	switch {
	case p == "" || !filepath.IsAbs(p):
		return fmt.Errorf("%q is not an absolute path", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%q is not a clean path", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%q holds a control character", p)
	}
	return nil
}

// Overlay is the overlay path of disk image p.
func Overlay(p string) string { return p + OverlaySuffix }

// device says the disk is a Block-mode claim's device.
func (d Disk) device() bool { return d.Device }

// dir is the folder the disk's overlay is kept in.
func (d Disk) dir() string {
	if d.OverlayDir != "" {
		return d.OverlayDir
	}
	return filepath.Dir(d.Path)
}

// Overlay is the disk's overlay: Overlay(Path), or with OverlayDir the
// image's name with OverlaySuffix there.
func (d Disk) Overlay() string {
	if d.OverlayDir != "" {
		return filepath.Join(d.OverlayDir, filepath.Base(d.Path)+OverlaySuffix)
	}
	return Overlay(d.Path)
}

// IDs are the disks' IDs, in order.
func (s Spec) IDs() []string {
	ids := make([]string, len(s.Disks))
	for i, d := range s.Disks {
		ids[i] = d.ID
	}
	return ids
}

// StatePath is the state file of a conversion of these disks.
func (s Spec) StatePath() string { return filepath.Join(s.Disks[0].dir(), StateFile) }

// Conversion states (State.Phase).
const (
	// PhaseCommitting: virt-v2v succeeded on the overlays, which are
	// synced; the images may be partly committed.
	PhaseCommitting = "committing"
	// PhaseDone: every image is committed, synced and hashed.
	PhaseDone = "done"
)

// State is what StateFile holds (JSON, written to a temporary file,
// synced and renamed).
type State struct {
	Phase string `json:"phase"`
	// IDs are the disks' IDs the state was recorded for.
	IDs      []string  `json:"ids,omitempty"`
	Evidence Evidence  `json:"evidence"`
	Disks    []Checked `json:"disks,omitempty"` // PhaseDone only
}

// Evidence is what virt-v2v saw and did, bounded to fit a termination
// message (see Result.Encode).
type Evidence struct {
	Tool        string   `json:"tool"`
	Version     string   `json:"version,omitempty"`
	Accelerator string   `json:"accelerator,omitempty"`
	OS          GuestOS  `json:"os"`
	Converted   string   `json:"converted"`
	Drivers     []string `json:"drivers,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
	Seconds     float64  `json:"seconds"`
}

// GuestOS is the inspected guest.
type GuestOS struct {
	Type        string `json:"type"`
	Distro      string `json:"distro,omitempty"`
	Version     string `json:"version,omitempty"`
	OSInfo      string `json:"osinfo,omitempty"`
	Arch        string `json:"arch,omitempty"`
	ProductName string `json:"product_name,omitempty"`
	Firmware    string `json:"firmware,omitempty"`
}

// Checked is one converted image: its SHA-256 and size.
type Checked struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// Reasons of a failed conversion (Result.Reason), the same as local
// execution's for the same fault.
const (
	ReasonFailed       = "ConversionFailed"          // needs-human: virt-v2v refused the guest
	ReasonStalled      = "ConversionStalled"         // transient: virt-v2v printed nothing for too long
	ReasonToolsMissing = "ConversionToolsMissing"    // needs-human: the image lacks virt-v2v or a tool
	ReasonNoVirtioWin  = "VirtioWinMissing"          // needs-human: a Windows guest, no drivers
	ReasonNoSpace      = "ConversionNoSpace"         // needs-human: a claim is full
	ReasonOverlaysLost = "ConversionOverlaysLost"    // needs-human: committing, but an overlay is gone
	ReasonInterrupted  = "ConversionInterrupted"     // interrupted: a signal
	ReasonBadDisk      = "ConversionBadDisk"         // permanent: a disk is not the raw image the spec says
	ReasonBadSpec      = "ConversionBadSpec"         // permanent: the spec is not valid
	ReasonBadState     = "ConversionStateUnreadable" // needs-human: StateFile cannot be read or is not this conversion's
)

// Result is the worker's outcome. Its JSON stays under MaxResultBytes
// (copyjob's limit, Kubernetes' termination message).
type Result struct {
	OK    bool      `json:"ok"`
	Disks []Checked `json:"disks,omitempty"`
	// Digest names the digest of the disks' SHA256s (diskdigest.Name).
	Digest   string    `json:"digest,omitempty"`
	Evidence *Evidence `json:"evidence,omitempty"`
	// Reused says the state was already done: nothing was converted by
	// this run.
	Reused bool   `json:"reused,omitempty"`
	Error  string `json:"error,omitempty"`
	// Class is fault.Class's name; Reason one of the Reason constants.
	Class  string `json:"class,omitempty"`
	Reason string `json:"reason,omitempty"`
}
