// Package copyjob is the disk copy that a copy Job's pod runs in cluster
// execution: one ESXi disk copied over SSH straight into a claim (disk.img
// in a Filesystem-mode claim, or a Block-mode claim's device), with the same
// journaled, verified, zero-skipping, multi-stream copy as local execution
// (internal/transfer reading through internal/esxi). It holds the Job's
// contract, shared by the worker that runs it and the engine that writes
// it: the [Spec] it reads, the [Result] it leaves in the termination
// message, the progress lines it prints, and its exit codes.
package copyjob

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// Target kinds.
const (
	// TargetFile is a Filesystem-mode claim's disk.img: a sparse file.
	TargetFile = "file"
	// TargetBlock is a Block-mode claim: the device node in the pod.
	TargetBlock = "block"
)

// Limits of a spec.
const (
	maxSpecBytes = 1 << 20
	maxChunkSize = 1 << 30
	maxStreams   = esxi.MaxMaxSessions
)

// Spec is what one copy is told, as JSON in a file. Every name and path in
// it is untrusted input: [Spec.Validate] checks them before anything is
// opened or sent to the host. The credential is not in it: only the path
// of the file (a mounted Secret) that holds it.
type Spec struct {
	Host Host `json:"host"`
	Disk Disk `json:"disk"`
	// Deltas are the snapshot deltas the disk runs on, oldest first: Disk
	// is then the chain's base (its flat extent), and the worker applies
	// each delta's grains over the base's copy in order (chain.go).
	Deltas []Delta `json:"deltas,omitempty"`
	// OnSnapshots says that Disk is a snapshot chain's base even when
	// Deltas is empty (a warm migration's first precopy, whose only delta
	// is the one the running source writes to): the copy is kept as a
	// chain's (chain.go), with the base's leaf hashes, so that the next
	// run applies the deltas over it and hashes only what they touched.
	OnSnapshots bool   `json:"on_snapshots,omitempty"`
	ChunkSize   int64  `json:"chunk_size,omitempty"`
	Streams     int    `json:"streams,omitempty"`
	Target      Target `json:"target"`
	// JournalPath, when set, is the journal in a folder that holds only
	// this copy's files (the disk's journal claim): the chain's state and
	// the deltas' copies are kept beside it, and the copy removes the
	// folder's other files. Without it they are kept beside the target.
	JournalPath string `json:"journal_path,omitempty"`
	ResultPath  string `json:"result_path,omitempty"`
}

// Host is the ESXi host and how to log in to it.
type Host struct {
	// Name identifies the host in messages.
	Name    string `json:"name"`
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"`
	User    string `json:"user,omitempty"`
	// HostKeyFingerprint pins the host key ("SHA256:<base64>"); required.
	HostKeyFingerprint string `json:"host_key_fingerprint"`
	// PasswordFile or PrivateKeyFile (exactly one) is a file readable by
	// its owner only, as a Secret mounted with defaultMode 0400 is.
	PasswordFile   string `json:"password_file,omitempty"`
	PrivateKeyFile string `json:"private_key_file,omitempty"`
	// MaxSessions bounds exec sessions (default: 4, or Streams if more).
	MaxSessions int `json:"max_sessions,omitempty"`
}

// Disk is the source data file on the host.
type Disk struct {
	// Path is the data file, e.g. /vmfs/volumes/ds1/vm/vm-flat.vmdk.
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
}

// Delta is one snapshot delta's extent file on the host.
type Delta struct {
	// Path is the extent file, e.g. /vmfs/volumes/ds1/vm/vm-000001-sesparse.vmdk.
	Path string `json:"path"`
	// Format is the link's createType: "vmfsSparse" or "seSparse".
	Format string `json:"format"`
	// SizeBytes is the file's length, a multiple of 512.
	SizeBytes int64 `json:"size_bytes"`
}

// MaxDeltas is the most snapshot deltas a copy applies: ESXi's 32
// snapshots per VM.
const MaxDeltas = 32

// Target is where the disk is written.
type Target struct {
	// Kind is TargetFile or TargetBlock.
	Kind string `json:"kind"`
	Path string `json:"path"`
}

// LoadSpec reads and validates the spec file at p.
func LoadSpec(p string) (Spec, error) {
	f, err := os.Open(p)
	if err != nil {
		return Spec{}, fmt.Errorf("read spec: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpecBytes+1))
	if err != nil {
		return Spec{}, fmt.Errorf("read spec %s: %w", p, err)
	}
	return ParseSpec(b, "spec "+p)
}

// ParseSpec decodes and validates a spec; what names it in errors (the
// file, or the Job's argument). Unknown fields are an error: a misspelt
// field must not silently fall back to a default.
func ParseSpec(b []byte, what string) (Spec, error) {
	if len(b) > maxSpecBytes {
		return Spec{}, fmt.Errorf("%s is larger than %d bytes", what, maxSpecBytes)
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// Permanent, whatever the decoder's error looks like (a cut-off
		// spec is io.ErrUnexpectedEOF, which reads as a dropped link).
		return Spec{}, classed(fault.Permanent, fmt.Errorf("%s: %w", what, err))
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%s: more than one JSON value", what)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// Validate checks every field without touching the host or the target.
func (s Spec) Validate() error {
	var errs []error
	errs = append(errs, s.Host.validate())
	if err := ValidateDiskPath(s.Disk.Path); err != nil {
		errs = append(errs, fmt.Errorf("disk.path: %w", err))
	}
	if s.Disk.SizeBytes <= 0 || s.Disk.SizeBytes%512 != 0 {
		errs = append(errs, fmt.Errorf("disk.size_bytes %d is not a positive multiple of 512", s.Disk.SizeBytes))
	}
	if c := s.ChunkSize; c != 0 && (c < 0 || c%(1<<20) != 0 || c > maxChunkSize) {
		errs = append(errs, fmt.Errorf("chunk_size %d is not a multiple of 1 MiB up to 1 GiB", c))
	}
	if s.Streams < 0 || s.Streams > maxStreams {
		errs = append(errs, fmt.Errorf("streams %d is out of range 1-%d", s.Streams, maxStreams))
	}
	errs = append(errs, s.validatePaths(), s.validateDeltas())
	return errors.Join(errs...)
}

// validateDeltas checks the snapshot deltas: their number, paths, formats
// and sizes, and a target they can be applied to.
func (s Spec) validateDeltas() error {
	if len(s.Deltas) == 0 {
		return nil
	}
	var errs []error
	if len(s.Deltas) > MaxDeltas {
		errs = append(errs, fmt.Errorf("%d deltas: at most %d are applied", len(s.Deltas), MaxDeltas))
	}
	seen := map[string]bool{s.Disk.Path: true}
	for k, d := range s.Deltas {
		if err := ValidateDiskPath(d.Path); err != nil {
			errs = append(errs, fmt.Errorf("deltas[%d].path: %w", k, err))
		} else if seen[d.Path] {
			errs = append(errs, fmt.Errorf("deltas[%d].path %s appears twice in the chain", k, d.Path))
		}
		seen[d.Path] = true
		if f := vmdk.Format(d.Format); f != vmdk.VMFSSparse && f != vmdk.SESparse {
			errs = append(errs, fmt.Errorf("deltas[%d].format %q is neither %q nor %q", k, d.Format, vmdk.VMFSSparse, vmdk.SESparse))
		}
		if d.SizeBytes <= 0 || d.SizeBytes%512 != 0 {
			errs = append(errs, fmt.Errorf("deltas[%d].size_bytes %d is not a positive multiple of 512", k, d.SizeBytes))
		}
	}
	return errors.Join(errs...)
}

func (h Host) validate() error {
	var errs []error
	if strings.HasPrefix(h.Address, "-") || strings.ContainsFunc(h.Address, isControlOrSpace) {
		errs = append(errs, fmt.Errorf("host.address %q is not a host name or IP address", h.Address))
	}
	if h.User != "" && !isPlainName(h.User) {
		errs = append(errs, fmt.Errorf("host.user %q is not a user name", h.User))
	}
	if h.HostKeyFingerprint == "" {
		errs = append(errs, errors.New("host.host_key_fingerprint is empty: the worker only talks to a pinned host key"))
	}
	if (h.PasswordFile == "") == (h.PrivateKeyFile == "") {
		errs = append(errs, errors.New("give exactly one of host.password_file and host.private_key_file"))
	}
	for _, p := range []string{h.PasswordFile, h.PrivateKeyFile} {
		if p != "" {
			errs = append(errs, localPath("host credential file", p))
		}
	}
	if h.MaxSessions < 0 || h.MaxSessions > esxi.MaxMaxSessions {
		errs = append(errs, fmt.Errorf("host.max_sessions %d is out of range 1-%d", h.MaxSessions, esxi.MaxMaxSessions))
	}
	return errors.Join(errs...)
}

// validatePaths checks the target, journal and result paths.
func (s Spec) validatePaths() error {
	var errs []error
	switch s.Target.Kind {
	case TargetFile, TargetBlock:
	default:
		errs = append(errs, fmt.Errorf("target.kind %q is neither %q nor %q", s.Target.Kind, TargetFile, TargetBlock))
	}
	errs = append(errs, localPath("target.path", s.Target.Path))
	if s.JournalPath != "" {
		errs = append(errs, localPath("journal_path", s.JournalPath))
		if s.JournalPath == s.Target.Path {
			errs = append(errs, errors.New("journal_path is the target itself"))
		}
		if strings.HasPrefix(s.JournalPath, "/dev/") {
			errs = append(errs, fmt.Errorf("journal_path %s is under /dev, which does not outlive the pod", s.JournalPath))
		}
	} else if s.Target.Kind == TargetBlock {
		errs = append(errs, errors.New("journal_path is required for a block target: give a path on a volume that outlives the pod"))
	}
	if s.ResultPath != "" {
		errs = append(errs, localPath("result_path", s.ResultPath))
	}
	return errors.Join(errs...)
}

// Journal is where the copy keeps its journal: journal_path, or beside a
// file target (disk.img.journal in the same claim).
func (s Spec) Journal() string {
	if s.JournalPath != "" {
		return s.JournalPath
	}
	return s.Target.Path + transfer.JournalSuffix
}

// ValidateDiskPath checks a source path from a spec more strictly than
// the ESXi client does: a clean absolute path below
// /vmfs/volumes/<datastore>/ naming a .vmdk file, with no "." or ".."
// component, no control character and no line break. Other bytes,
// shell metacharacters included, are legal in datastore and VM names;
// they reach the host only through esxi.Quote.
func ValidateDiskPath(p string) error {
	if err := esxi.ValidatePath(p); err != nil {
		return err
	}
	if strings.ContainsFunc(p, isControl) {
		return fmt.Errorf("path %q contains a control character", p)
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean (\".\", \"..\" or repeated slashes)", p)
	}
	if !strings.HasPrefix(p, esxi.VolumesRoot+"/") || !strings.HasSuffix(p, ".vmdk") {
		return fmt.Errorf("path %q does not name a .vmdk file below %s", p, esxi.VolumesRoot)
	}
	return nil
}

// localPath checks a path on this machine: absolute, clean, no control
// characters.
func localPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is empty", field)
	case strings.ContainsFunc(p, isControl):
		return fmt.Errorf("%s %q contains a control character", field, p)
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return fmt.Errorf("%s %q is not a clean absolute path", field, p)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func isControlOrSpace(r rune) bool { return isControl(r) || r == ' ' || r == '/' }

// isPlainName: letters, digits, and . _ - @ (no leading -).
func isPlainName(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@\\", r)
		if !ok {
			return false
		}
	}
	return true
}
