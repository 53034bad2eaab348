//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/copyjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// addChainDisk adds a VM whose one disk runs on two snapshot deltas (an
// seSparse under a vmfsSparse) and returns the disk and a spec flattening
// it into target.
func (h *host) addChainDisk(t *testing.T, name string, size int64, target string) (esxisim.DiskFiles, copyjob.Spec) {
	t.Helper()
	cs, err := esxisim.SnapshotChainSpec("datastore1", name, name, size, vmdk.SESparse, vmdk.VMFSSparse, "")
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := h.srv.AddVM(esxisim.VMSpec{Name: name, Snapshots: true,
		Disks: []esxisim.DiskSpec{{CapacityBytes: size, Thin: true, Content: cs.Base, Deltas: cs.Deltas}}})
	if err != nil {
		t.Fatal(err)
	}
	disk := files.Disks[0]
	s := h.spec(t, disk, copyjob.Target{Kind: copyjob.TargetFile, Path: target})
	links := disk.Chain.Links // top first, base last
	s.Disk.Path = links[len(links)-1].Extent
	for k := len(links) - 2; k >= 0; k-- {
		fi, err := os.Stat(links[k].LocalExtent)
		if err != nil {
			t.Fatal(err)
		}
		s.Deltas = append(s.Deltas, copyjob.Delta{Path: links[k].Extent, Format: string(links[k].Format), SizeBytes: fi.Size()})
	}
	return disk, s
}

// A disk on snapshots is flattened into the claim's disk.img as the guest
// sees it: the result's SHA-256 is the chain's guest-visible content, the
// base's and each delta's copies are accounted for, no delta copy is left
// beside the disk, and a second run reads nothing from the host.
func TestChainFlattenedIntoFileClaim(t *testing.T) {
	const size = 32 * mib
	h := newHost(t, esxisim.HostPython())
	target := filepath.Join(t.TempDir(), "disk.img")
	disk, s := h.addChainDisk(t, "snap", size, target)
	code, lines, res := runInProcess(t, h.writeSpec(t, s))
	if code != copyjob.ExitOK || !res.OK {
		t.Fatalf("exit %d, result %+v", code, res)
	}
	if res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256() {
		t.Fatalf("result sha %s, file sha %s, chain sha %s", res.SHA256, sha256Of(t, target, size), disk.SHA256())
	}
	if res.BaseSHA256 == "" || res.BaseSHA256 == res.SHA256 || len(res.Deltas) != 2 || res.Bytes != size {
		t.Errorf("result %+v: want the base's and two deltas' evidence", res)
	}
	chunks := int64(size / mib)
	for _, d := range s.Deltas {
		chunks += (d.SizeBytes + mib - 1) / mib
	}
	if got := int64(res.ChunksCopied + res.ChunksSkipped); got != chunks {
		t.Errorf("%d chunks copied and verified, the chain's files have %d", got, chunks)
	}
	left, _ := filepath.Glob(target + ".delta-*")
	if len(left) != 0 {
		t.Errorf("delta copies left in the claim: %v", left)
	}
	if last := lines[len(lines)-2]; last.Event != "progress" || last.BytesTotal != size+s.Deltas[0].SizeBytes+s.Deltas[1].SizeBytes {
		t.Errorf("last progress line %+v: want the whole chain's bytes as the total", last)
	}
	h.srv.ResetStats()
	if code, _, again := runInProcess(t, h.writeSpec(t, s)); code != 0 || again.SHA256 != res.SHA256 || h.srv.Stats().Execs != 0 {
		t.Errorf("second run: exit %d, %+v, %d commands on the host", code, again, h.srv.Stats().Execs)
	}
}

// A chain flattened in rounds, as a warm migration's precopy and then its
// cutover, hashes the whole disk once: the next round re-hashes only the
// leaves its delta touched (the state says its leaves file is current) and
// its digest is still the guest-visible disk's. A leaf hash the state does
// not vouch for is never used: leaves of a round that was not recorded are
// computed again from the disk.
func TestChainRoundsHashOnlyTouchedLeaves(t *testing.T) {
	const size = 32 * mib
	h := newHost(t, esxisim.HostPython())
	target := filepath.Join(t.TempDir(), "disk.img")
	disk, s := h.addChainDisk(t, "snap", size, target)
	statePath := target + ".chain"
	leaves := func() (bool, float64) {
		var st map[string]any
		b, err := os.ReadFile(statePath)
		if err != nil || json.Unmarshal(b, &st) != nil {
			t.Fatalf("state: %v %s", err, b)
		}
		n, _ := st["leaves_applied"].(float64)
		return st["leaves_valid"] == true, n
	}
	// Round 0, a warm migration's first precopy: the chain's only frozen
	// file is the base. Its copy is kept as a chain's, with the leaves
	// the copy checked.
	base := s
	base.Deltas, base.OnSnapshots = nil, true
	code, _, res := runInProcess(t, h.writeSpec(t, base))
	if code != copyjob.ExitOK || !res.OK || res.SHA256 != res.BaseSHA256 || res.SHA256 != sha256Of(t, target, size) {
		t.Fatalf("round 0: exit %d, %+v; the claim holds %s", code, res, sha256Of(t, target, size))
	}
	if ok, n := leaves(); !ok || n != 0 {
		t.Fatalf("after round 0 the leaves are valid=%v for %v deltas, want the base's", ok, n)
	}
	_, want, err := sparsefile.HashPrefixLeaves(context.Background(), target, size)
	if got, rerr := os.ReadFile(target + ".leaves"); err != nil || rerr != nil || !bytes.Equal(got, want) {
		t.Fatalf("after round 0 the leaves file is not the base's (%v, %v)", err, rerr)
	}
	first := s
	first.Deltas = s.Deltas[:1]
	code, _, res = runInProcess(t, h.writeSpec(t, first))
	if code != copyjob.ExitOK || !res.OK || res.SHA256 != sha256Of(t, target, size) {
		t.Fatalf("round 1: exit %d, %+v; the claim holds %s", code, res, sha256Of(t, target, size))
	}
	if ok, n := leaves(); !ok || n != 1 {
		t.Fatalf("after round 1 the leaves are valid=%v for %v deltas, want the one applied", ok, n)
	}
	if res.ChunksCopied >= size/mib {
		t.Errorf("round 1 copied %d chunks: the base was read again", res.ChunksCopied)
	}
	code, _, res = runInProcess(t, h.writeSpec(t, s))
	if code != copyjob.ExitOK || res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256() {
		t.Fatalf("cutover: exit %d, %+v; the claim holds %s, the chain %s", code, res, sha256Of(t, target, size), disk.SHA256())
	}
	if ok, n := leaves(); !ok || n != 2 {
		t.Errorf("after the cutover the leaves are valid=%v for %v deltas: the disk was hashed whole again", ok, n)
	}
	if tm := res.Timing; tm == nil || tm.CopySeconds <= 0 || tm.ApplySeconds <= 0 || tm.HashSeconds <= 0 || tm.Streams == nil || tm.Streams.Reading+tm.Streams.Waiting <= 0 {
		t.Errorf("the cutover's result tells no copy, apply and hash time: %+v", tm)
	}
	// Leaves the state does not vouch for: every leaf hash made wrong,
	// and the top delta unrecorded as by a kill before its state was
	// saved. The run applies it again and hashes the disk whole.
	if err := os.WriteFile(target+".leaves", make([]byte, size/mib*32), 0o600); err != nil {
		t.Fatal(err)
	}
	editState(t, statePath, unrecordTopDelta)
	if code, _, res := runInProcess(t, h.writeSpec(t, s)); code != 0 || res.SHA256 != disk.SHA256() {
		t.Fatalf("run after a kill: exit %d, %+v, want %s", code, res, disk.SHA256())
	}
	// A leaves file cut short, though the state vouches for it before the
	// top delta: it is not built on, and the disk is hashed whole.
	if err := os.Truncate(target+".leaves", 32); err != nil {
		t.Fatal(err)
	}
	editState(t, statePath, func(st map[string]any) { unrecordTopDelta(st); st["leaves_applied"] = 1 })
	if code, _, res := runInProcess(t, h.writeSpec(t, s)); code != 0 || res.SHA256 != disk.SHA256() {
		t.Fatalf("run over a short leaves file: exit %d, %+v, want %s", code, res, disk.SHA256())
	}
}

// A worker killed after applying a delta but before recording it applies
// it again from its copy (the same bytes at the same places), reading only
// that delta from the host again; a state left by another chain is never
// built on: the claim starts over.
func TestChainResumesAndStartsOver(t *testing.T) {
	const size = 32 * mib
	h := newHost(t, esxisim.HostPython())
	target := filepath.Join(t.TempDir(), "disk.img")
	disk, s := h.addChainDisk(t, "snap", size, target)
	spec := h.writeSpec(t, s)
	if code, _, res := runInProcess(t, spec); code != 0 || res.SHA256 != disk.SHA256() {
		t.Fatalf("first run: exit %d, %+v", code, res)
	}
	// As if killed between applying the top delta and recording it.
	statePath := target + ".chain"
	editState(t, statePath, unrecordTopDelta)
	h.srv.ResetStats()
	code, _, res := runInProcess(t, spec)
	if code != 0 || res.SHA256 != disk.SHA256() || sha256Of(t, target, size) != disk.SHA256() {
		t.Fatalf("resumed run: exit %d, %+v; file %s, chain %s", code, res, sha256Of(t, target, size), disk.SHA256())
	}
	h.checkOnlyDeltaReadAgain(t, s.Deltas[1].Path)
	// A state of another base: everything starts over.
	editState(t, statePath, otherBase)
	h.srv.ResetStats()
	code, _, res = runInProcess(t, spec)
	if code != 0 || res.SHA256 != disk.SHA256() || res.ChunksCopied == 0 {
		t.Fatalf("run over another chain's state: exit %d, %+v", code, res)
	}
}

// A claim that holds a flattened chain, copied again as a disk on no
// snapshot (its snapshots consolidated since), starts over: the journal of
// the base knows nothing of the deltas applied over it.
func TestChainStateLeftForAPlainCopy(t *testing.T) {
	const size = 32 * mib
	h := newHost(t, esxisim.HostPython())
	target := filepath.Join(t.TempDir(), "disk.img")
	disk, s := h.addChainDisk(t, "snap", size, target)
	if code, _, res := runInProcess(t, h.writeSpec(t, s)); code != 0 || res.SHA256 != disk.SHA256() {
		t.Fatalf("chain run: exit %d, %+v", code, res)
	}
	s.Deltas = nil
	code, _, res := runInProcess(t, h.writeSpec(t, s))
	base := disk.Chain.Links[len(disk.Chain.Links)-1].LocalExtent
	if want := sha256Of(t, base, size); code != 0 || res.SHA256 != want || sha256Of(t, target, size) != want || res.ChunksCopied == 0 {
		t.Fatalf("plain run: exit %d, %+v; the base is %s, the claim %s", code, res, want, sha256Of(t, target, size))
	}
	if _, err := os.Stat(target + ".chain"); !os.IsNotExist(err) {
		t.Errorf("the chain's state outlived the plain copy: %v", err)
	}
}

// A chain flattened with a journal claim keeps its state and delta copies
// beside the journal, in the journal's claim, so that the disk's claim
// holds the disk alone: a Block-mode claim (a loop device of stale bytes,
// larger than the disk) or a Filesystem-mode claim's disk.img. The disk
// reads back as the chain's guest-visible content, a worker killed before
// recording a delta reads only that delta again, and a state of another
// chain starts over by writing the disk again (a device is never
// removed).
func TestChainFlattenedWithJournalClaim(t *testing.T) {
	for _, block := range []bool{true, false} {
		t.Run(map[bool]string{true: "Block", false: "Filesystem"}[block], func(t *testing.T) { testChainWithJournalClaim(t, block) })
	}
}

func testChainWithJournalClaim(t *testing.T, block bool) {
	const size = 32 * mib
	h := newHost(t, esxisim.HostPython())
	target, kind := filepath.Join(t.TempDir(), "disk.img"), copyjob.TargetFile
	if block {
		target, kind = staleDevice(t, size+mib, 0x5a).Path, copyjob.TargetBlock
	}
	disk, s := h.addChainDisk(t, "snapblk", size, target)
	journalDir := t.TempDir()
	s.Target.Kind, s.JournalPath = kind, filepath.Join(journalDir, "disk-0.journal")
	// A replaced claim's journal and state: removed, never built on.
	stale := filepath.Join(journalDir, "disk-0-old.chain")
	if err := os.WriteFile(stale, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := h.writeSpec(t, s)
	code, _, res := runInProcess(t, spec)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a replaced claim's file in the journal claim: %v, want it removed", err)
	}
	if code != copyjob.ExitOK || res.SHA256 != disk.SHA256() || res.Bytes != size {
		t.Fatalf("exit %d, result %+v, want sha %s", code, res, disk.SHA256())
	}
	if got := sha256Of(t, target, size); got != disk.SHA256() {
		t.Fatalf("the disk's first %d bytes hash to %s, the chain to %s", size, got, disk.SHA256())
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); !block && (len(entries) != 1 || entries[0].Name() != "disk.img") {
		t.Errorf("the claim holds %v, want disk.img alone", entries)
	}
	statePath := filepath.Join(journalDir, "disk-0.chain")
	left, _ := filepath.Glob(filepath.Join(journalDir, "*.delta-*"))
	if _, err := os.Stat(statePath); err != nil || len(left) != 0 {
		t.Fatalf("state %v, delta copies left %v: want the state beside the journal and no copy", err, left)
	}
	// As if killed between applying the top delta and recording it.
	editState(t, statePath, unrecordTopDelta)
	h.srv.ResetStats()
	if code, _, res := runInProcess(t, spec); code != 0 || res.SHA256 != disk.SHA256() {
		t.Fatalf("resumed run: exit %d, %+v", code, res)
	}
	h.checkOnlyDeltaReadAgain(t, s.Deltas[1].Path)
	// Another chain's state: the device is written again, and stays a
	// device.
	editState(t, statePath, otherBase)
	code, _, res = runInProcess(t, spec)
	if code != 0 || res.SHA256 != disk.SHA256() || res.ChunksCopied == 0 {
		t.Fatalf("run over another chain's state: exit %d, %+v", code, res)
	}
	if fi, err := os.Stat(target); block && (err != nil || fi.Mode()&os.ModeDevice == 0) {
		t.Fatalf("the device after starting over: %v %v", fi, err)
	}
}

// editState rewrites the chain state file at p as edit changes it.
func editState(t *testing.T, p string, edit func(st map[string]any)) {
	t.Helper()
	var st map[string]any
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state: %v %s", err, b)
	}
	edit(st)
	b, _ = json.Marshal(st)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// unrecordTopDelta edits the state as a worker killed between applying
// the top delta and recording it leaves it.
func unrecordTopDelta(st map[string]any) { st["applied"] = st["applied"].([]any)[:1] }

// otherBase edits the state into one of another chain.
func otherBase(st map[string]any) { st["base"] = "/vmfs/volumes/datastore1/other/other-flat.vmdk" }

// checkOnlyDeltaReadAgain checks that the host served reads of delta only.
func (h *host) checkOnlyDeltaReadAgain(t *testing.T, delta string) {
	t.Helper()
	for _, r := range h.srv.DDReads() {
		if r.Path != delta {
			t.Errorf("the resumed run read %s at %d: only the unrecorded delta is read again", r.Path, r.Offset)
		}
	}
}
