package transfer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// sampleJournal is a journal as a copy of a 3 MiB disk in 1 MiB chunks
// leaves it after two verified chunks.
func sampleJournal(t testing.TB) *journal {
	whole := diskdigest.New()
	var chunks []chunkRecord
	for i := range 2 {
		data := []byte(strings.Repeat(fmt.Sprint(i), 1<<20))
		whole.Write(data)
		chunks = append(chunks, chunkRecord{SHA256: fmt.Sprintf("%x", diskdigest.Sum(data)), ZeroBytes: int64(i) * 4096})
	}
	return &journal{Version: journalVersion, Source: "/vmfs/volumes/ds1/vm/vm-flat.vmdk", SizeBytes: 3 << 20, ChunkSize: 1 << 20,
		VerifiedChunks: 2, Chunks: chunks, SHA256State: marshalHash(whole), UpdatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

// savedJournal is sampleJournal as save writes it.
func savedJournal(t testing.TB, j *journal) []byte {
	dest := filepath.Join(t.TempDir(), "disk.img")
	if err := j.save(dest); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(journalPath(dest))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseJournalRejectsIncoherentChunks(t *testing.T) {
	good := savedJournal(t, sampleJournal(t))
	if parseJournal(good) == nil {
		t.Fatalf("a saved journal is rejected:\n%s", good)
	}
	for name, mod := range map[string]func(*journal){
		"negative zero bytes":   func(j *journal) { j.Chunks[1].ZeroBytes = -1 },
		"zero bytes past chunk": func(j *journal) { j.Chunks[1].ZeroBytes = j.ChunkSize + 1 },
		"digest not hex":        func(j *journal) { j.Chunks[0].SHA256 = strings.Repeat("z", 64) },
		"digest too short":      func(j *journal) { j.Chunks[0].SHA256 = "abcd" },
		"more chunks than size": func(j *journal) { j.VerifiedChunks = 4; j.Chunks = append(j.Chunks, j.Chunks...) },
		"complete without result": func(j *journal) {
			j.Complete = true
		},
		"result of another size": func(j *journal) {
			j.Chunks = append(j.Chunks, j.Chunks[0])
			j.VerifiedChunks, j.Complete = 3, true
			j.Result = &Result{SHA256: j.Chunks[0].SHA256, Bytes: 1}
		},
	} {
		j := sampleJournal(t)
		mod(j)
		if parseJournal(savedJournal(t, j)) != nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// NumChunks must not overflow for sizes near math.MaxInt64.
func TestNumChunksNoOverflow(t *testing.T) {
	for _, tc := range []struct {
		size, chunk int64
		want        int
	}{
		{3 << 20, 1 << 20, 3}, {3<<20 + 1, 1 << 20, 4}, {1, 1 << 20, 1},
		{math.MaxInt64, math.MaxInt64, 1}, {math.MaxInt64, 1 << 62, 2}, {math.MaxInt64 - 1, math.MaxInt64, 1},
	} {
		if got := NumChunks(tc.size, tc.chunk); got != tc.want {
			t.Errorf("NumChunks(%d, %d) = %d, want %d", tc.size, tc.chunk, got, tc.want)
		}
	}
}

// FuzzParseJournal: whatever a journal file holds, an accepted journal is
// coherent and survives an encode/decode round trip unchanged.
func FuzzParseJournal(f *testing.F) {
	j := sampleJournal(f)
	f.Add(savedJournal(f, j))
	j.VerifiedChunks, j.Chunks, j.SHA256State = 0, nil, marshalHash(diskdigest.New())
	f.Add(savedJournal(f, j))
	f.Add([]byte(`{"version":1,"source":"x","size_bytes":9223372036854775807,"chunk_size":2,"verified_chunks":0,"chunks":[],"sha256_state":"","complete":false}`))
	f.Add([]byte(`{"version":1,"size_bytes":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		j := parseJournal(b)
		if j == nil {
			return
		}
		n := NumChunks(j.SizeBytes, j.ChunkSize)
		if j.SizeBytes <= 0 || j.ChunkSize <= 0 || n <= 0 || j.VerifiedChunks < 0 || j.VerifiedChunks > n || len(j.Chunks) != j.VerifiedChunks {
			t.Fatalf("incoherent journal accepted: size %d chunk %d chunks %d verified %d records %d", j.SizeBytes, j.ChunkSize, n, j.VerifiedChunks, len(j.Chunks))
		}
		if int64(n-1) > j.SizeBytes/j.ChunkSize {
			t.Fatalf("NumChunks(%d, %d) = %d", j.SizeBytes, j.ChunkSize, n)
		}
		for _, c := range j.Chunks {
			if !isSHA256Hex(c.SHA256) || c.ZeroBytes < 0 || c.ZeroBytes > j.ChunkSize {
				t.Fatalf("chunk record %+v accepted", c)
			}
		}
		if _, err := restoreHash(j.SHA256State); err != nil {
			t.Fatalf("hash state accepted but not restorable: %v", err)
		}
		if r := j.Result; j.Complete && (r == nil || r.Bytes != j.SizeBytes || !isSHA256Hex(r.SHA256) || r.ZeroBytes < 0 || r.ZeroBytes > j.SizeBytes) {
			t.Fatalf("complete journal with result %+v for %d bytes", r, j.SizeBytes)
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		j2 := parseJournal(again)
		if j2 == nil {
			t.Fatalf("re-encoded journal rejected: %s", again)
		}
		if !j2.UpdatedAt.Equal(j.UpdatedAt) {
			t.Fatalf("updated_at %v became %v", j.UpdatedAt, j2.UpdatedAt)
		}
		j.UpdatedAt, j2.UpdatedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(j, j2) {
			t.Fatalf("round trip changed the journal:\n%+v\n%+v", j, j2)
		}
	})
}
