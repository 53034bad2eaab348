//go:build linux || darwin

package transfer

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

func TestCopySparseDisk(t *testing.T) {
	env := newSim(t)
	const size = 41*mib + 1536 // last chunk: 1 MiB + a 1536-byte tail
	_, df := env.addDisk(t, "web", size, mixedContent(size))
	dest := destIn(t, "disk-0.raw")
	var last Progress
	calls := 0
	res, err := Copy(ctxT(t), env.c, diskOf(df), dest, Options{ChunkSize: 4 * mib, Progress: func(p Progress) { last = p; calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != df.SHA256() {
		t.Errorf("SHA256 = %s, want %s", res.SHA256, df.SHA256())
	}
	if res.Bytes != size || res.ChunksCopied != 11 || res.ChunksSkipped != 0 {
		t.Errorf("result = %+v, want %d bytes, 11 chunks copied", res, size)
	}
	var data int64
	for _, e := range mixedContent(size) {
		data += e.Length
	}
	// Zero blocks are counted per 64 KiB: the data extents dirty at most
	// two extra blocks each.
	if res.ZeroBytes > size-data || res.ZeroBytes < size-data-8*ZeroBlockSize {
		t.Errorf("ZeroBytes = %d, want about %d", res.ZeroBytes, size-data)
	}
	if !sameBytes(t, dest, df.LocalFlat) {
		t.Error("staging file differs from the source")
	}
	if fi, _ := os.Stat(dest); fi.Size() != size {
		t.Errorf("staging size %d, want %d", fi.Size(), size)
	}
	if a := allocated(t, dest); a > 2*data || a > size/4 {
		t.Errorf("staging file allocates %d bytes for %d bytes of data in %d: not sparse", a, data, size)
	}
	if last.BytesDone != size || last.Percent != 100 || last.ChunksDone != 11 || last.Source != df.Flat || last.Dest != dest || calls < 11 {
		t.Errorf("last progress %+v after %d calls", last, calls)
	}
	j := readJournal(t, dest)
	if !j.Complete || j.VerifiedChunks != 11 || !sameResult(*j.Result, res) || j.Source != df.Flat {
		t.Errorf("journal = %+v", j)
	}
	st, err := Inspect(diskOf(df), dest, 4*mib)
	if err != nil || st.State != StateComplete || !sameResult(*st.Result, res) {
		t.Errorf("Inspect = %+v, %v", st, err)
	}
}

// A connection dropped mid-chunk keeps the verified chunks; the next copy
// reads only the others, whether the host reads with dd or with Python.
func TestCopyResumesAfterDroppedConnection(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) {
			env := newSimWith(t, m.python)
			const size = 32 * mib
			_, df := env.addDisk(t, "db", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 9}})
			dest := destIn(t, "disk-0.raw")
			opts := Options{ChunkSize: 2 * mib, Retries: -1}

			env.srv.DropAfterBytes(11*mib + 12345) // in the middle of chunk 5
			_, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts)
			if err == nil || esxi.Classify(err) != esxi.Transient {
				t.Fatalf("first Copy: %v (class %v), want a transient error", err, esxi.Classify(err))
			}
			j := readJournal(t, dest)
			if j.VerifiedChunks != 5 || j.Complete {
				t.Fatalf("after the drop the journal records %d chunks (complete=%v), want 5", j.VerifiedChunks, j.Complete)
			}
			if st, _ := Inspect(diskOf(df), dest, 2*mib); st.State != StatePartial || st.VerifiedBytes != 10*mib {
				t.Errorf("Inspect = %+v", st)
			}

			env.srv.ResetStats()
			res, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != df.SHA256() || res.ChunksSkipped != 5 || res.ChunksCopied != 11 {
				t.Errorf("result %+v, want sha %s, 5 skipped, 11 copied", res, df.SHA256())
			}
			reads := hostReads(env.srv)
			assertNoReadBelow(t, reads, 10*mib)
			assertReadMode(t, env.srv, m.python)
			// The host read the 11 missing chunks plus at most the
			// one-sector probe, nothing more.
			var read int64
			for _, r := range reads {
				read += r.length
			}
			if read < size-10*mib || read > size-10*mib+512 {
				t.Errorf("host read %d bytes on resume, want the %d not verified (and the 512-byte probe)", read, size-10*mib)
			}
			if !sameBytes(t, dest, df.LocalFlat) {
				t.Error("staging file differs from the source")
			}
		})
	}
}

func TestCopyRetriesDroppedConnection(t *testing.T) {
	env := newSim(t)
	const size = 8 * mib
	_, df := env.addDisk(t, "app", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 4}})
	dest := destIn(t, "disk-0.raw")
	env.srv.DropAfterBytes(3*mib + 100)
	res, err := Copy(ctxT(t), env.c, diskOf(df), dest, Options{ChunkSize: 2 * mib, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != df.SHA256() || res.ChunksCopied != 4 {
		t.Errorf("result %+v, want %s", res, df.SHA256())
	}
	// Chunk 1 was read twice (dropped, retried); chunk 0 once.
	n := map[int64]int{}
	for _, r := range ddReads(env.srv) {
		n[r.off]++
	}
	if n[0] != 1 || n[2*mib] != 2 || n[4*mib] != 1 {
		t.Errorf("dd reads per offset: %v", n)
	}
}

// A copy cancelled mid-chunk resumes from its verified chunks, in both
// read modes. The zero-skipping reader sends a chunk's zeros as one frame,
// so where it stops within the chunks depends on timing: the resumed copy
// must skip exactly what the journal holds.
func TestCopyResumesAfterCancelMidChunk(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) {
			env := newSimWith(t, m.python)
			const size = 24 * mib
			_, df := env.addDisk(t, "cancel", size, mixedContent(size))
			dest := destIn(t, "disk-0.raw")
			ctx, cancel := context.WithCancel(ctxT(t))
			opts := Options{ChunkSize: 4 * mib, ProgressInterval: time.Nanosecond, Progress: func(p Progress) {
				if p.BytesDone > 9*mib { // chunk 2, after its first MiB
					cancel()
				}
			}}
			_, err := Copy(ctx, env.c, diskOf(df), dest, opts)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Copy: %v", err)
			}
			j := readJournal(t, dest)
			v := j.VerifiedChunks
			if (m.python == "" && v != 2) || v < 2 || v > 3 || j.Complete {
				t.Fatalf("journal records %d chunks (complete=%v), want 2 (dd) or 2-3 (Python)", v, j.Complete)
			}

			env.srv.ResetStats()
			opts.Progress = nil
			res, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != df.SHA256() || res.ChunksSkipped != v || res.ChunksCopied != 6-v {
				t.Errorf("result %+v, want %d skipped and %d copied", res, v, 6-v)
			}
			assertNoReadBelow(t, hostReads(env.srv), int64(v)*4*mib)
			assertReadMode(t, env.srv, m.python)
			if !sameBytes(t, dest, df.LocalFlat) {
				t.Error("staging file differs from the source")
			}
		})
	}
}

func TestCopyIsIdempotent(t *testing.T) {
	env := newSim(t)
	const size = 16 * mib
	_, df := env.addDisk(t, "idem", size, nil)
	dest := destIn(t, "disk-0.raw")
	opts := Options{ChunkSize: 4 * mib}
	first, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dest + JournalSuffix)
	env.srv.ResetStats()
	// A client to nowhere proves the host is not needed at all.
	dead := newClient(t, esxi.HostConfig{Name: "gone", Address: "127.0.0.1", Port: 1, Password: "x", InsecureIgnoreHostKey: true, DialTimeout: time.Second})
	for _, src := range []RangeReader{env.c, dead} {
		again, err := Copy(ctxT(t), src, diskOf(df), dest, opts)
		if err != nil || !sameResult(again, first) {
			t.Errorf("second Copy = %+v, %v; want %+v", again, err, first)
		}
	}
	if st := env.srv.Stats(); st.Execs != 0 || st.StdoutBytes != 0 {
		t.Errorf("a completed copy contacted the host: %+v", st)
	}
	after, _ := os.Stat(dest + JournalSuffix)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("a completed copy rewrote its journal")
	}
}

func TestCopyDetectsTamperedStagingFile(t *testing.T) {
	const size = 20 * mib
	const chunk = 4 * mib
	tests := []struct {
		name   string
		done   bool // tamper after a complete copy (else after 3 chunks)
		tamper func(t *testing.T, dest string)
		// minOff is where re-reading may start.
		minOff int64
	}{
		{"corrupt last verified chunk", false, func(t *testing.T, dest string) { writeAt(t, dest, 2*chunk+100, "garbage") }, 2 * chunk},
		{"truncated below the journal", false, func(t *testing.T, dest string) { os.Truncate(dest, chunk+5) }, chunk},
		{"staging file deleted", false, func(t *testing.T, dest string) { os.Remove(dest) }, 0},
		{"complete copy, last chunk corrupted", true, func(t *testing.T, dest string) { writeAt(t, dest, size-1000, "x") }, 4 * chunk},
		{"complete copy, truncated", true, func(t *testing.T, dest string) { os.Truncate(dest, 2*chunk) }, 2 * chunk},
		{"complete copy, staging extended", true, func(t *testing.T, dest string) { os.Truncate(dest, size+4096) }, size},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newSim(t)
			_, df := env.addDisk(t, "tamper", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 5}})
			dest := destIn(t, "disk-0.raw")
			opts := Options{ChunkSize: chunk}
			if !tc.done {
				ctx, cancel := context.WithCancel(ctxT(t))
				opts.Progress = func(p Progress) {
					if p.ChunksDone == 3 {
						cancel()
					}
				}
				if _, err := Copy(ctx, env.c, diskOf(df), dest, opts); !errors.Is(err, context.Canceled) {
					t.Fatalf("interrupted Copy: %v", err)
				}
				opts.Progress = nil
			} else if _, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts); err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, dest)
			env.srv.ResetStats()
			res, err := Copy(ctxT(t), env.c, diskOf(df), dest, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != df.SHA256() {
				t.Errorf("SHA256 %s, want %s", res.SHA256, df.SHA256())
			}
			if !sameBytes(t, dest, df.LocalFlat) {
				t.Error("staging file differs from the source")
			}
			if want := int(tc.minOff / chunk); res.ChunksSkipped != want {
				t.Errorf("ChunksSkipped = %d, want %d", res.ChunksSkipped, want)
			}
			reads := ddReads(env.srv)
			if tc.minOff < size {
				assertNoReadBelow(t, reads, tc.minOff)
			}
		})
	}
}

func writeAt(t *testing.T, path string, off int64, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func TestCopyDistrustsForeignJournal(t *testing.T) {
	env := newSim(t)
	const size = 12 * mib
	_, a := env.addDisk(t, "a", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 1}})
	_, b := env.addDisk(t, "b", size, []esxisim.Extent{{Offset: 0, Length: size, Seed: 2}})
	_, c := env.addDisk(t, "c", size+mib, []esxisim.Extent{{Offset: 0, Length: size, Seed: 1}})
	dest := destIn(t, "disk-0.raw")
	if _, err := Copy(ctxT(t), env.c, diskOf(a), dest, Options{ChunkSize: 2 * mib}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		disk  Disk
		chunk int64
		want  string
	}{
		{"other source", diskOf(b), 2 * mib, b.SHA256()},
		{"other chunk size", diskOf(b), 4 * mib, b.SHA256()},
		{"other size", diskOf(c), 4 * mib, c.SHA256()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Copy(ctxT(t), env.c, tc.disk, dest, Options{ChunkSize: tc.chunk})
			if err != nil {
				t.Fatal(err)
			}
			if res.SHA256 != tc.want || res.ChunksSkipped != 0 {
				t.Errorf("result %+v, want sha %s and nothing skipped", res, tc.want)
			}
		})
	}
}

func TestCopyPoweredOnVMNeedsHuman(t *testing.T) {
	env := newSim(t)
	id, df := env.addDisk(t, "running", 8*mib, nil)
	if err := env.srv.SetPowerState(id, esxisim.PoweredOn); err != nil {
		t.Fatal(err)
	}
	dest := destIn(t, "disk-0.raw")
	_, err := Copy(ctxT(t), env.c, diskOf(df), dest, Options{ChunkSize: 4 * mib, RetryDelay: time.Millisecond})
	if esxi.Classify(err) != esxi.NeedsHuman || !errors.Is(err, esxi.ErrBusy) {
		t.Fatalf("Copy of a running VM's disk: %v (class %v), want NeedsHuman busy", err, esxi.Classify(err))
	}
	for _, p := range []string{dest, dest + JournalSuffix} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a refused copy (%v)", p, err)
		}
	}
	if n := len(ddReads(env.srv)); n != 1 {
		t.Errorf("%d dd commands, want 1 (no retry of a NeedsHuman error)", n)
	}
}

func TestCopyRefusesSizeMismatch(t *testing.T) {
	env := newSim(t)
	_, df := env.addDisk(t, "grown", 8*mib, nil)
	d := diskOf(df)
	d.SizeBytes -= mib
	dest := destIn(t, "disk-0.raw")
	_, err := Copy(ctxT(t), env.c, d, dest, Options{ChunkSize: 4 * mib})
	if err == nil || esxi.Classify(err) != esxi.Permanent {
		t.Fatalf("Copy with a wrong size: %v", err)
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Error("staging file created")
	}
}

func TestCopyAllParallel(t *testing.T) {
	env := newSim(t)
	var jobs []Job
	var want []string
	dir := t.TempDir()
	for i, size := range []int64{6 * mib, 9*mib + 512, 3 * mib} {
		_, df := env.addDisk(t, "multi"+string(rune('a'+i)), size, nil)
		jobs = append(jobs, Job{Disk: diskOf(df), Dest: dir + "/disk-" + string(rune('0'+i)) + ".raw"})
		want = append(want, df.SHA256())
	}
	seen := map[string]int64{}
	res, err := CopyAll(ctxT(t), env.c, jobs, 2, Options{ChunkSize: 2 * mib, Progress: func(p Progress) { seen[p.Source] = p.BytesDone }})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Result.SHA256 != want[i] || r.Job != jobs[i] {
			t.Errorf("job %d: %+v", i, r)
		}
		if seen[jobs[i].Disk.Path] != jobs[i].Disk.SizeBytes {
			t.Errorf("job %d: last progress %d", i, seen[jobs[i].Disk.Path])
		}
	}
	jobs[1].Dest = jobs[0].Dest
	if _, err := CopyAll(ctxT(t), env.c, jobs, 2, Options{}); err == nil {
		t.Error("CopyAll accepted two disks with one destination")
	}
}

// sameResult compares two results' evidence (Leaves and Stages are only
// returned, never journaled).
func sameResult(a, b Result) bool {
	a.Leaves, b.Leaves, a.Stages, b.Stages = nil, nil, Stages{}, Stages{}
	return reflect.DeepEqual(a, b)
}
