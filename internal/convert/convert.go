// Package convert wraps the qemu-img binary for the Converting checkpoint:
// inspect an image (Info), validate it (Check) and turn a copied disk into
// the artifact that is imported (Convert).
//
// Convert is a re-entrant reconcile step. It writes to <dst>.tmp and
// renames only a checked, checksummed result to dst, so a crash never
// leaves a half artifact under the final name; it records the artifact's
// SHA-256 and what it was made from in a sidecar (<dst>.sha256, JSON)
// before the rename; and when dst exists and still matches its sidecar it
// does nothing.
//
// qemu-img always gets the image format explicitly (-f), so it never probes
// a raw guest disk (a raw disk whose content looks like a qcow2 header with
// a backing file would otherwise make qemu-img open host files), and paths
// are made absolute so that no file name is read as an option or a protocol
// prefix. Arguments go to the binary as an argv slice, never through a
// shell.
package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
)

// Format is a disk image format understood by qemu-img.
type Format string

// Formats. Convert writes Raw or QCOW2; it reads all three.
const (
	Raw   Format = "raw"
	QCOW2 Format = "qcow2"
	VMDK  Format = "vmdk"
)

// DefaultBinary is the qemu-img binary looked up in PATH when Tool.Path is
// empty.
const DefaultBinary = "qemu-img"

// SidecarSuffix is appended to an artifact's path to name its sidecar.
const SidecarSuffix = ".sha256"

// Sentinel errors, matched with errors.Is; each carries its class (see
// package fault).
var (
	// ErrQemuImgMissing: the qemu-img binary is not installed. NeedsHuman:
	// someone must install it.
	ErrQemuImgMissing error = &sentinel{msg: "qemu-img not found", class: fault.NeedsHuman}
	// ErrInvalidImage: an image failed Check (corrupt, unreadable, or the
	// wrong size). Transient: converting again from the verified copy
	// makes a new image.
	ErrInvalidImage error = &sentinel{msg: "invalid image", class: fault.Transient}
)

// Tool runs qemu-img. The zero value uses qemu-img from PATH.
type Tool struct {
	// Path is the qemu-img binary; DefaultBinary looked up in PATH if empty.
	Path string
}

// ImageInfo is what `qemu-img info` reports about an image.
type ImageInfo struct {
	// Format is the format qemu-img opened the image as.
	Format Format
	// VirtualSize is the disk size the guest sees, in bytes.
	VirtualSize int64
	// ActualSize is the space the image file occupies on disk.
	ActualSize int64
	// BackingFile is set for an image layered on another file.
	BackingFile string
	// Dirty and Corrupt are qemu's own flags (qcow2).
	Dirty, Corrupt bool
}

// CheckResult is the outcome of a successful Check.
type CheckResult struct {
	VirtualSize int64
	// Leaks counts leaked qcow2 clusters: wasted space, not corruption.
	Leaks int64
}

// Artifact is a converted image and the evidence for it.
type Artifact struct {
	Path   string
	Format Format
	// SHA256 is the hex SHA-256 of the artifact file's bytes.
	SHA256 string
	// SizeBytes is the artifact file's size; VirtualSize the disk's.
	SizeBytes, VirtualSize int64
	// Skipped is true when a valid artifact already existed and nothing
	// was converted.
	Skipped bool
}

// sidecar is the JSON content of <dst>.sha256.
type sidecar struct {
	Version     int        `json:"version"`
	SHA256      string     `json:"sha256"`
	Format      Format     `json:"format"`
	SizeBytes   int64      `json:"size_bytes"`
	VirtualSize int64      `json:"virtual_size"`
	Source      sourceInfo `json:"source"`
	CreatedAt   time.Time  `json:"created_at"`
}

// sourceInfo identifies the input an artifact was made from.
type sourceInfo struct {
	Path      string    `json:"path"`
	Format    Format    `json:"format"`
	SizeBytes int64     `json:"size_bytes"`
	ModTime   time.Time `json:"mtime"`
}

const sidecarVersion = 1

// Info runs `qemu-img info --output=json -f format path`.
func (t *Tool) Info(ctx context.Context, path string, format Format) (ImageInfo, error) {
	if err := format.valid(); err != nil {
		return ImageInfo{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ImageInfo{}, err
	}
	out, err := t.run(ctx, "info", "--output=json", "-f", string(format), abs)
	if err != nil {
		return ImageInfo{}, err
	}
	info, err := parseInfo(out)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("qemu-img info %s: unexpected output: %w", abs, err)
	}
	return info, nil
}

// parseInfo reads `qemu-img info --output=json`. Sizes must not be
// negative: a size that reaches a volume request or a comparison as a
// negative number is a lie, not a size.
func parseInfo(out []byte) (ImageInfo, error) {
	var raw struct {
		Format         Format `json:"format"`
		VirtualSize    int64  `json:"virtual-size"`
		ActualSize     int64  `json:"actual-size"`
		BackingFile    string `json:"backing-filename"`
		Dirty          bool   `json:"dirty-flag"`
		FormatSpecific struct {
			Data struct {
				Corrupt bool `json:"corrupt"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return ImageInfo{}, err
	}
	if raw.VirtualSize < 0 || raw.ActualSize < 0 {
		return ImageInfo{}, fmt.Errorf("negative size (virtual-size %d, actual-size %d)", raw.VirtualSize, raw.ActualSize)
	}
	return ImageInfo{Format: raw.Format, VirtualSize: raw.VirtualSize, ActualSize: raw.ActualSize,
		BackingFile: raw.BackingFile, Dirty: raw.Dirty, Corrupt: raw.FormatSpecific.Data.Corrupt}, nil
}

// checkReport is what `qemu-img check --output=json` counts (absent
// counts are 0).
type checkReport struct {
	Corruptions int64 `json:"corruptions"`
	Leaks       int64 `json:"leaks"`
	CheckErrors int64 `json:"check-errors"`
}

// parseCheck reads `qemu-img check --output=json`; negative counts are an
// error.
func parseCheck(out []byte) (checkReport, error) {
	var rep checkReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return checkReport{}, err
	}
	if rep.Corruptions < 0 || rep.Leaks < 0 || rep.CheckErrors < 0 {
		return checkReport{}, fmt.Errorf("negative count (corruptions %d, leaks %d, check-errors %d)", rep.Corruptions, rep.Leaks, rep.CheckErrors)
	}
	return rep, nil
}

// Check validates the image at path. A qcow2 image must pass `qemu-img
// check` (leaked clusters are tolerated and counted); a raw image must be a
// positive multiple of 512 bytes long. When virtualSize is positive the
// image's virtual size must equal it. Failures match ErrInvalidImage.
func (t *Tool) Check(ctx context.Context, path string, format Format, virtualSize int64) (CheckResult, error) {
	if err := format.valid(); err != nil {
		return CheckResult{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return CheckResult{}, err
	}
	var res CheckResult
	switch format {
	case Raw:
		fi, err := os.Stat(abs)
		if err != nil {
			return res, fmt.Errorf("check %s: %w", abs, err)
		}
		if fi.Size() <= 0 || fi.Size()%512 != 0 {
			return res, fmt.Errorf("check %s: %w: raw image of %d bytes is not a positive multiple of 512", abs, ErrInvalidImage, fi.Size())
		}
		res.VirtualSize = fi.Size()
	default:
		out, code, err := t.runStatus(ctx, "check", "--output=json", "-f", string(format), abs)
		if err != nil {
			return res, err
		}
		rep, jerr := parseCheck(out.stdout)
		switch {
		case code == 0 || code == 3: // 3: leaked clusters only
			if jerr != nil {
				return res, fmt.Errorf("qemu-img check %s: unexpected output: %w", abs, jerr)
			}
			res.Leaks = rep.Leaks
		case code == 2:
			return res, fmt.Errorf("check %s: %w: qemu-img check found %d corruptions: the image is damaged; delete it and convert again", abs, ErrInvalidImage, rep.Corruptions)
		default:
			return res, fmt.Errorf("check %s: %w: qemu-img check could not complete (exit status %d): %s", abs, ErrInvalidImage, code, out.stderrText())
		}
		info, err := t.Info(ctx, abs, format)
		if err != nil {
			return res, err
		}
		res.VirtualSize = info.VirtualSize
	}
	if virtualSize > 0 && res.VirtualSize != virtualSize {
		return res, fmt.Errorf("check %s: %w: virtual size %d, expected %d", abs, ErrInvalidImage, res.VirtualSize, virtualSize)
	}
	return res, nil
}

// Convert makes dst, in dstFormat (Raw or QCOW2), from src in srcFormat. If
// dst already exists and matches its sidecar (same source path, format,
// size and modification time, same output format, and the file's SHA-256
// equals the recorded one) it does nothing and returns the recorded
// artifact with Skipped set. Otherwise it removes any leftover (dst,
// <dst>.tmp, the sidecar), converts into <dst>.tmp, fsyncs and checks it,
// records its SHA-256 in <dst>.sha256 and only then renames it to dst.
func (t *Tool) Convert(ctx context.Context, src string, srcFormat Format, dst string, dstFormat Format) (Artifact, error) {
	if err := srcFormat.valid(); err != nil {
		return Artifact{}, err
	}
	if dstFormat != Raw && dstFormat != QCOW2 {
		return Artifact{}, fmt.Errorf("convert: output format %q is not supported (use raw or qcow2)", dstFormat)
	}
	src, err := filepath.Abs(src)
	if err != nil {
		return Artifact{}, err
	}
	dst, err = filepath.Abs(dst)
	if err != nil {
		return Artifact{}, err
	}
	if src == dst {
		return Artifact{}, fmt.Errorf("convert %s: source and destination are the same file", src)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return Artifact{}, fmt.Errorf("convert: source: %w", err)
	}
	source := sourceInfo{Path: src, Format: srcFormat, SizeBytes: fi.Size(), ModTime: fi.ModTime().UTC()}

	if a, ok, err := existing(dst, dstFormat, source); err != nil || ok {
		return a, err
	}

	// Learn the virtual size, refusing layered inputs (a backing file would
	// be read from wherever the image says).
	virtual := fi.Size()
	if srcFormat != Raw {
		info, err := t.Info(ctx, src, srcFormat)
		if err != nil {
			return Artifact{}, err
		}
		if info.BackingFile != "" {
			return Artifact{}, fmt.Errorf("convert %s: the image has a backing file %q: flatten it first", src, info.BackingFile)
		}
		virtual = info.VirtualSize
	}

	tmp := dst + ".tmp"
	for _, p := range []string{dst + SidecarSuffix, dst, tmp} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Artifact{}, fmt.Errorf("convert: remove stale %s: %w", p, err)
		}
	}
	if _, err := t.run(ctx, "convert", "-f", string(srcFormat), "-O", string(dstFormat), src, tmp); err != nil {
		os.Remove(tmp)
		return Artifact{}, err
	}
	if err := fsyncFile(tmp); err != nil {
		return Artifact{}, err
	}
	if _, err := t.Check(ctx, tmp, dstFormat, virtual); err != nil {
		return Artifact{}, fmt.Errorf("convert %s: the output failed its check: %w", src, err)
	}
	sum, size, err := hashFile(tmp)
	if err != nil {
		return Artifact{}, err
	}
	sc := sidecar{Version: sidecarVersion, SHA256: sum, Format: dstFormat, SizeBytes: size, VirtualSize: virtual,
		Source: source, CreatedAt: time.Now().UTC()}
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return Artifact{}, err
	}
	// Record before advancing: the sidecar exists before dst does.
	if err := durable.WriteFile(dst+SidecarSuffix, append(b, '\n')); err != nil {
		return Artifact{}, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return Artifact{}, fmt.Errorf("convert: publish %s: %w", dst, err)
	}
	if err := durable.SyncDir(filepath.Dir(dst)); err != nil {
		return Artifact{}, err
	}
	return Artifact{Path: dst, Format: dstFormat, SHA256: sum, SizeBytes: size, VirtualSize: virtual}, nil
}

// existing returns the recorded artifact when dst is present, unchanged and
// made from source in format.
func existing(dst string, format Format, source sourceInfo) (Artifact, bool, error) {
	b, err := os.ReadFile(dst + SidecarSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("convert: read sidecar: %w", err)
	}
	var sc sidecar
	if json.Unmarshal(b, &sc) != nil || sc.Version != sidecarVersion || sc.Format != format ||
		sc.Source.Path != source.Path || sc.Source.Format != source.Format ||
		sc.Source.SizeBytes != source.SizeBytes || !sc.Source.ModTime.Equal(source.ModTime) {
		return Artifact{}, false, nil
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Size() != sc.SizeBytes {
		return Artifact{}, false, nil
	}
	sum, _, err := hashFile(dst)
	if err != nil || sum != sc.SHA256 {
		return Artifact{}, false, err
	}
	return Artifact{Path: dst, Format: format, SHA256: sum, SizeBytes: sc.SizeBytes, VirtualSize: sc.VirtualSize, Skipped: true}, true, nil
}

// Remove deletes an artifact, its sidecar and any temporary file. Missing
// files are not an error.
func Remove(dst string) error {
	var errs []error
	for _, p := range []string{dst + SidecarSuffix, dst, dst + ".tmp", dst + SidecarSuffix + ".tmp"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f Format) valid() error {
	switch f {
	case Raw, QCOW2, VMDK:
		return nil
	}
	return fmt.Errorf("image format %q is not supported (raw, qcow2 or vmdk)", f)
}

// binary resolves the qemu-img executable.
func (t *Tool) binary() (string, error) {
	name := DefaultBinary
	if t != nil && t.Path != "" {
		name = t.Path
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w (looked for %q): install the Debian/Ubuntu package qemu-utils (apt-get install qemu-utils) on the machine running Terraform: %v",
			ErrQemuImgMissing, name, err)
	}
	return p, nil
}

type output struct {
	stdout []byte
	stderr *limitedBuffer
}

func (o output) stderrText() string { return string(bytes.TrimSpace(o.stderr.Bytes())) }

// run runs qemu-img and fails on a non-zero exit status.
func (t *Tool) run(ctx context.Context, args ...string) ([]byte, error) {
	out, code, err := t.runStatus(ctx, args...)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("qemu-img %s failed (exit status %d): %s", args[0], code, out.stderrText())
	}
	return out.stdout, nil
}

// runStatus runs qemu-img and returns its output and exit status. err is
// set only when it could not run or ctx ended.
func (t *Tool) runStatus(ctx context.Context, args ...string) (output, int, error) {
	bin, err := t.binary()
	if err != nil {
		return output{}, 0, err
	}
	var stdout bytes.Buffer
	out := output{stderr: &limitedBuffer{limit: 8 << 10}}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = out.stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	out.stdout = stdout.Bytes()
	if ctx.Err() != nil {
		return out, 0, fmt.Errorf("qemu-img %s: %w", args[0], ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return out, ee.ExitCode(), nil
	}
	if err != nil {
		return out, 0, fmt.Errorf("run qemu-img %s: %w", args[0], err)
	}
	return out, 0, nil
}

// limitedBuffer keeps the first limit bytes written to it.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte { return b.buf.Bytes() }

// hashFile returns the hex disk digest (package diskdigest) and size of a
// file, its holes taken as zeros without being read.
func hashFile(path string) (string, int64, error) {
	s, err := sparsefile.Hash(context.Background(), path)
	return s.SHA256, s.Bytes, err
}

func fsyncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
