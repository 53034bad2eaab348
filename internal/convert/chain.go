package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// ChainLink is one copied link of a disk's snapshot chain.
type ChainLink struct {
	// Descriptor is the descriptor text as read from the host.
	Descriptor string
	// DescriptorName is the local file name the rebuilt descriptor is
	// written to, in the staging directory.
	DescriptorName string
	// ExtentNames are the local file names of the copied extent files in
	// the staging directory, one per extent line, in order.
	ExtentNames []string
}

// ErrUnsafeName: a local name given for a chain file is not a plain file
// name inside the staging directory.
var ErrUnsafeName = errors.New("unsafe local file name")

// PreparedChain is a chain rebuilt in a staging directory.
type PreparedChain struct {
	// Top is the local path of the top descriptor (what qemu-img opens).
	Top string
	// Links are top first: formats, capacities, what deltas allocate.
	Links []vmdk.Link
	// CapacityBytes is the size of the disk the guest sees.
	CapacityBytes int64
}

// ChainArtifact is a flattened chain.
type ChainArtifact struct {
	Artifact
	// GuestSHA256 is the hex SHA-256 of the guest-visible content (for a
	// raw artifact, the file's own hash).
	GuestSHA256 string
	Chain       PreparedChain
}

// validLocalName accepts a plain file name that stays inside a directory
// and can be quoted in a descriptor.
func validLocalName(name string) error {
	switch {
	case name == "", name == ".", name == "..", len(name) > 255,
		strings.ContainsAny(name, "/\\\x00\"\r\n"), filepath.Base(name) != name:
		return fmt.Errorf("%w: %q", ErrUnsafeName, name)
	}
	return nil
}

// PrepareChain rebuilds a copied chain in dir: links are top first (what
// the VM runs on) down to the base. Every name must be a plain file name;
// extent files must already be in dir as regular files. Each link's
// parentCID must equal the next link's CID, and the last link must be a
// base. The descriptors are rewritten so that extents and
// parentFileNameHint name the local copies only (never a host path), then
// the chain is opened and its headers and grain tables checked.
func PrepareChain(dir string, links []ChainLink) (PreparedChain, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return PreparedChain{}, err
	}
	if len(links) == 0 || len(links) > vmdk.MaxChainDepth {
		return PreparedChain{}, fmt.Errorf("chain: %d links (want 1 to %d)", len(links), vmdk.MaxChainDepth)
	}
	seen := map[string]bool{}
	claim := func(name string) error {
		if err := validLocalName(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("chain: local name %q is used twice", name)
		}
		seen[name] = true
		return nil
	}
	descs := make([]vmdk.Descriptor, len(links))
	for i, l := range links {
		if err := claim(l.DescriptorName); err != nil {
			return PreparedChain{}, fmt.Errorf("chain link %d: %w", i, err)
		}
		d, err := vmdk.ParseDescriptor(l.Descriptor)
		if err != nil {
			return PreparedChain{}, fmt.Errorf("chain link %d (%s): %w", i, l.DescriptorName, err)
		}
		if len(d.Extents) != len(l.ExtentNames) {
			return PreparedChain{}, fmt.Errorf("chain link %d (%s): %d extents in the descriptor, %d local files", i, l.DescriptorName, len(d.Extents), len(l.ExtentNames))
		}
		for k, name := range l.ExtentNames {
			if err := claim(name); err != nil {
				return PreparedChain{}, fmt.Errorf("chain link %d: %w", i, err)
			}
			fi, err := os.Lstat(filepath.Join(dir, name))
			if err != nil {
				return PreparedChain{}, fmt.Errorf("chain link %d: extent %q: %w", i, d.Extents[k].File, err)
			}
			if !fi.Mode().IsRegular() {
				return PreparedChain{}, fmt.Errorf("chain link %d: extent %s is not a regular file", i, name)
			}
			d.Extents[k].File = name
		}
		last := i == len(links)-1
		switch {
		case !last && !d.CreateType.IsDelta():
			return PreparedChain{}, fmt.Errorf("chain link %d (%s): createType %q is not a snapshot delta but links follow it", i, l.DescriptorName, d.CreateType)
		case last && d.CreateType.IsDelta():
			return PreparedChain{}, fmt.Errorf("chain: %w: the last link %s is a %s delta; its parent %q was not copied", vmdk.ErrParentMissing, l.DescriptorName, d.CreateType, d.ParentFileNameHint)
		case last && d.ParentCID != vmdk.NoParentCID:
			return PreparedChain{}, fmt.Errorf("chain: %w: base %s has parentCID=%08x, not ffffffff", vmdk.ErrCIDMismatch, l.DescriptorName, d.ParentCID)
		}
		d.ParentFileNameHint = ""
		if !last {
			d.ParentFileNameHint = links[i+1].DescriptorName
		}
		descs[i] = d
	}
	for i := 0; i+1 < len(descs); i++ {
		if descs[i].ParentCID != descs[i+1].CID {
			return PreparedChain{}, fmt.Errorf("chain: %w: %s has parentCID=%08x but its parent %s has CID=%08x: the parent changed after the snapshot, or the files are from different disks; copy the chain again",
				vmdk.ErrCIDMismatch, links[i].DescriptorName, descs[i].ParentCID, links[i+1].DescriptorName, descs[i+1].CID)
		}
	}
	for i, d := range descs {
		if err := durable.WriteFile(filepath.Join(dir, links[i].DescriptorName), []byte(d.Text())); err != nil {
			return PreparedChain{}, err
		}
	}
	top := filepath.Join(dir, links[0].DescriptorName)
	c, err := vmdk.OpenChain(top, func(_, name string) (string, error) {
		if err := validLocalName(name); err != nil {
			return "", err
		}
		return filepath.Join(dir, name), nil
	})
	if err != nil {
		return PreparedChain{}, fmt.Errorf("chain: %w", err)
	}
	defer c.Close()
	if len(c.Links) != len(links) {
		return PreparedChain{}, fmt.Errorf("chain: %d links rebuilt, %d read back", len(links), len(c.Links))
	}
	return PreparedChain{Top: top, Links: c.Links, CapacityBytes: c.CapacityBytes()}, nil
}

// FlattenChain rebuilds the chain in dir (PrepareChain) and converts it
// with qemu-img (explicitly -f vmdk on the top descriptor) to dst in
// dstFormat (Raw or QCOW2), through <dst>.tmp, checked, fsynced, with its
// sidecar written before the rename, like Convert. For a qcow2 artifact
// `qemu-img compare` confirms it holds the chain's content and the guest
// SHA-256 is computed by reading the chain in Go.
func (t *Tool) FlattenChain(ctx context.Context, dir string, links []ChainLink, dst string, dstFormat Format) (ChainArtifact, error) {
	if dstFormat != Raw && dstFormat != QCOW2 {
		return ChainArtifact{}, fmt.Errorf("flatten: output format %q is not supported (use raw or qcow2)", dstFormat)
	}
	dst, err := filepath.Abs(dst)
	if err != nil {
		return ChainArtifact{}, err
	}
	pc, err := PrepareChain(dir, links)
	if err != nil {
		return ChainArtifact{}, err
	}
	for _, l := range pc.Links {
		for _, x := range l.Extents {
			if x.Path == dst || l.DescriptorPath == dst {
				return ChainArtifact{}, fmt.Errorf("flatten: the destination %s is part of the chain", dst)
			}
		}
	}
	fi, err := os.Stat(pc.Top)
	if err != nil {
		return ChainArtifact{}, err
	}
	tmp := dst + ".tmp"
	for _, p := range []string{dst + SidecarSuffix, dst, tmp} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ChainArtifact{}, fmt.Errorf("flatten: remove stale %s: %w", p, err)
		}
	}
	if _, err := t.run(ctx, "convert", "-f", string(VMDK), "-O", string(dstFormat), pc.Top, tmp); err != nil {
		os.Remove(tmp)
		return ChainArtifact{}, err
	}
	fail := func(err error) (ChainArtifact, error) {
		os.Remove(tmp)
		return ChainArtifact{}, err
	}
	if err := fsyncFile(tmp); err != nil {
		return fail(err)
	}
	if _, err := t.Check(ctx, tmp, dstFormat, pc.CapacityBytes); err != nil {
		return fail(fmt.Errorf("flatten %s: the output failed its check: %w", pc.Top, err))
	}
	sum, size, err := hashFile(tmp)
	if err != nil {
		return fail(err)
	}
	guest := sum
	if dstFormat != Raw {
		out, code, err := t.runStatus(ctx, "compare", "-f", string(VMDK), "-F", string(dstFormat), pc.Top, tmp)
		if err != nil {
			return fail(err)
		}
		if code != 0 {
			return fail(fmt.Errorf("flatten %s: %w: qemu-img compare (exit status %d): %s", pc.Top, ErrInvalidImage, code, out.stderrText()))
		}
		c, err := vmdk.OpenChain(pc.Top, func(_, name string) (string, error) {
			if err := validLocalName(name); err != nil {
				return "", err
			}
			return filepath.Join(filepath.Dir(pc.Top), name), nil
		})
		if err != nil {
			return fail(err)
		}
		guest, err = c.SHA256()
		c.Close()
		if err != nil {
			return fail(err)
		}
	}
	sc := sidecar{Version: sidecarVersion, SHA256: sum, Format: dstFormat, SizeBytes: size, VirtualSize: pc.CapacityBytes,
		Source: sourceInfo{Path: pc.Top, Format: VMDK, SizeBytes: fi.Size(), ModTime: fi.ModTime().UTC()}, CreatedAt: time.Now().UTC()}
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := durable.WriteFile(dst+SidecarSuffix, append(b, '\n')); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fail(fmt.Errorf("flatten: publish %s: %w", dst, err))
	}
	if err := durable.SyncDir(filepath.Dir(dst)); err != nil {
		return ChainArtifact{}, err
	}
	return ChainArtifact{Artifact: Artifact{Path: dst, Format: dstFormat, SHA256: sum, SizeBytes: size, VirtualSize: pc.CapacityBytes},
		GuestSHA256: guest, Chain: pc}, nil
}
