package transfer

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/durable"
)

// journalVersion is the on-disk format version of the journal. A journal
// with another version is not trusted (the copy starts over). Version 2:
// the whole-file hash is the disk digest (package diskdigest), not a
// plain SHA-256.
const journalVersion = 2

// JournalSuffix is appended to the staging file's path to name its journal.
const JournalSuffix = ".journal"

// journal is the on-disk record of a copy's progress (<dest>.journal).
// Everything it claims is backed by data fsync-ed to the staging file
// before the journal was written.
type journal struct {
	Version int `json:"version"`
	// Source, SizeBytes and ChunkSize identify the copy: a journal that
	// differs in any of them belongs to another copy.
	Source    string `json:"source"`
	SizeBytes int64  `json:"size_bytes"`
	ChunkSize int64  `json:"chunk_size"`
	// VerifiedChunks is the number of leading chunks whose data is in the
	// staging file; Chunks has exactly that many entries.
	VerifiedChunks int           `json:"verified_chunks"`
	Chunks         []chunkRecord `json:"chunks"`
	// SHA256State is the binary-marshaled state of the whole-file disk
	// digest (package diskdigest) after VerifiedChunks chunks (base64 in
	// JSON).
	SHA256State []byte `json:"sha256_state"`
	// Ahead holds chunks from VerifiedChunks on that parallel streams
	// read and fsync-ed out of order, by index (the next one in order
	// too, until it is hashed into the whole-file hash). Each is verified
	// against its record before it is trusted, and moves to Chunks (and
	// into the whole-file hash) once every chunk before it is there.
	Ahead map[int]chunkRecord `json:"ahead,omitempty"`
	// Complete is set, with Result, once the whole disk is verified.
	Complete  bool      `json:"complete"`
	Result    *Result   `json:"result,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// chunkRecord is the evidence kept for one copied chunk.
type chunkRecord struct {
	SHA256    string `json:"sha256"`
	ZeroBytes int64  `json:"zero_bytes"`
	// Leaves are the chunk's leaf hashes (diskdigest), kept while it is
	// ahead of the verified prefix so that it joins the whole file's
	// digest without being read back; a chunk of the prefix has none.
	Leaves []byte `json:"leaves,omitempty"`
}

func journalPath(dest string) string { return dest + JournalSuffix }

// loadJournal reads dest's journal. A missing journal is (nil, nil); an
// unreadable or malformed one is (nil, nil) too, because the only safe
// reaction to either is to start over.
func loadJournal(dest string) (*journal, error) { return loadJournalAt(journalPath(dest)) }

// loadJournalAt is loadJournal of the journal at path.
func loadJournalAt(path string) (*journal, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return parseJournal(b), nil
}

// parseJournal decodes a journal file, or returns nil when it is malformed
// or not coherent (a copy then starts over).
func parseJournal(b []byte) *journal {
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil
	}
	if !j.consistent() {
		return nil
	}
	return &j
}

// consistent reports whether the journal is internally coherent.
func (j *journal) consistent() bool {
	if j.Version != journalVersion || j.SizeBytes <= 0 || j.ChunkSize <= 0 {
		return false
	}
	n := NumChunks(j.SizeBytes, j.ChunkSize)
	if j.VerifiedChunks < 0 || j.VerifiedChunks > n || len(j.Chunks) != j.VerifiedChunks {
		return false
	}
	for _, c := range j.Chunks {
		if !isSHA256Hex(c.SHA256) || c.ZeroBytes < 0 || c.ZeroBytes > j.ChunkSize {
			return false
		}
	}
	for i, c := range j.Ahead {
		if i < j.VerifiedChunks || i >= n || !isSHA256Hex(c.SHA256) || c.ZeroBytes < 0 || c.ZeroBytes > j.ChunkSize {
			return false
		}
	}
	if j.Complete && len(j.Ahead) > 0 {
		return false
	}
	if _, err := restoreHash(j.SHA256State); err != nil {
		return false
	}
	if j.Complete {
		r := j.Result
		if r == nil || j.VerifiedChunks != n || r.Bytes != j.SizeBytes || !isSHA256Hex(r.SHA256) ||
			r.ZeroBytes < 0 || r.ZeroBytes > j.SizeBytes || r.ChunksCopied < 0 || r.ChunksSkipped < 0 {
			return false
		}
	}
	return true
}

// matches reports whether the journal describes a copy of disk with chunk
// size chunk.
func (j *journal) matches(d Disk, chunk int64) bool {
	return j.Source == d.Path && j.SizeBytes == d.SizeBytes && j.ChunkSize == chunk
}

// save writes the journal atomically: a temporary file beside it, fsync,
// rename over the journal, fsync of the directory. A crash at any point
// leaves either the old or the new journal, never a torn one.
func (j *journal) save(dest string) error { return j.saveAt(journalPath(dest)) }

// saveAt is save to the journal at path.
func (j *journal) saveAt(path string) error {
	j.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	return durable.WriteFile(path, append(b, '\n'))
}

// marshalHash returns the serialized state of the whole-file digest.
func marshalHash(h hash.Hash) []byte {
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		// crypto/sha256 never fails to marshal.
		panic(fmt.Sprintf("transfer: marshal sha256 state: %v", err))
	}
	return b
}

// restoreHash returns the whole-file digest in the serialized state b.
func restoreHash(b []byte) (hash.Hash, error) {
	h := diskdigest.New()
	if err := h.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return h, nil
}

// NumChunks is how many chunks of chunk bytes cover size bytes, without
// overflowing for sizes near math.MaxInt64.
func NumChunks(size, chunk int64) int {
	n := size / chunk
	if size%chunk != 0 {
		n++
	}
	return int(n)
}

// isSHA256Hex reports a SHA-256 digest as fmt's %x prints it: 64
// lower-case hexadecimal digits.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
