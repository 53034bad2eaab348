// Package diskdigest is the one digest of a disk's content that the
// provider records (source_sha256, artifact_sha256 and every check between
// them): the SHA-256 of the sequence of the SHA-256s of the disk's 1 MiB
// leaves, in order; the last leaf is shorter when the size is not a whole
// number of MiB.
//
//	digest = SHA-256( SHA-256(leaf 0) || SHA-256(leaf 1) || ... )
//
// A plain SHA-256 of a disk hashes every zero of a thin disk (about 5 s of
// one core for 8 GiB); here an all-zero leaf's hash is a constant, so
// holes and zero runs cost nothing, and a leaf changed by a snapshot delta
// is the only one hashed again. By hand, with GNU coreutils:
//
//	split -b 1M --filter='sha256sum | cut -c1-64 | tr a-f A-F | basenc --base16 -d' disk.img | sha256sum
package diskdigest

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/zerosum"
)

// Explained says what the recorded digests are, for the documentation of
// every attribute that holds one.
const Explained = "the SHA-256 of the SHA-256s of its 1 MiB blocks in order (the last one shorter; an all-zero block costs nothing to hash), " +
	"which `split -b 1M --filter='sha256sum | cut -c1-64 | tr a-f A-F | basenc --base16 -d' FILE | sha256sum` computes"

// Name names this digest where a record, a result or an object says which
// digest its checksums are.
const Name = "sha256-of-1mib-sha256s"

// LeafSize is the unit the digest hashes on its own: 1 MiB, the host
// reader's read size, which every copy chunk size is a multiple of.
const LeafSize = 1 << 20

// Size is the digest's length in bytes, as SHA-256's.
const Size = sha256.Size

var zeroPage = make([]byte, LeafSize)

// Hasher computes the digest of bytes written in order. Zeros may be
// written as bytes or, cheaper, with WriteZeros: either way an all-zero
// leaf is not hashed. It implements hash.Hash; its state marshals
// (MarshalBinary) so that a copy can resume it.
type Hasher struct {
	outer, leaf hash.Hash
	// pos is how many bytes of the current leaf were written; zeros how
	// many of them, at its end, are zeros not yet hashed into leaf; data
	// says the leaf holds a non-zero byte (leaf was written to).
	pos, zeros int64
	data       bool
	// leaves, when kept (KeepLeaves), are the hashes of the leaves ended
	// so far, in order; not part of the marshaled state.
	leaves []byte
	keep   bool
}

var _ hash.Hash = (*Hasher)(nil)

// New returns a Hasher of no bytes.
func New() *Hasher { return &Hasher{outer: sha256.New(), leaf: sha256.New()} }

// Write adds p. It never fails.
func (h *Hasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(int64(len(p)), LeafSize-h.pos)
		part := p[:k]
		if bytes.Equal(part, zeroPage[:k]) {
			h.zeros += k
		} else {
			h.flushZeros()
			h.leaf.Write(part)
			h.data = true
		}
		h.advance(k)
		p = p[k:]
	}
	return n, nil
}

// WriteZeros adds n zero bytes without looking at them.
func (h *Hasher) WriteZeros(n int64) {
	for n > 0 {
		k := min(n, LeafSize-h.pos)
		h.zeros += k
		h.advance(k)
		n -= k
	}
}

// advance moves k bytes into the current leaf, ending it when full.
func (h *Hasher) advance(k int64) {
	h.pos += k
	if h.pos == LeafSize {
		h.endLeaf()
	}
}

// flushZeros hashes the leaf's pending zeros, before data that follows
// them in the same leaf.
func (h *Hasher) flushZeros() {
	if h.zeros > 0 {
		zerosum.Write(h.leaf, h.zeros)
		h.zeros = 0
	}
}

// endLeaf adds the current leaf's hash to the outer hash.
func (h *Hasher) endLeaf() {
	var sum [Size]byte
	if h.data {
		h.flushZeros()
		h.leaf.Sum(sum[:0])
		h.leaf.Reset()
	} else {
		sum = zerosum.SHA256(h.pos)
	}
	h.outer.Write(sum[:])
	if h.keep {
		h.leaves = append(h.leaves, sum[:]...)
	}
	h.pos, h.zeros, h.data = 0, 0, false
}

// KeepLeaves makes h keep the hash of every leaf it ends from now on, for
// Leaves. Call it on a new Hasher.
func (h *Hasher) KeepLeaves() { h.keep = true }

// Leaves are the hashes of the leaves written, in order, the last one
// ended even if short (Size bytes each): what FromLeaves takes. Only for a
// Hasher that kept them from the start.
func (h *Hasher) Leaves() []byte {
	if h.pos > 0 {
		c := h.clone()
		c.keep = true
		c.endLeaf()
		return append(slices.Clip(h.leaves), c.leaves...)
	}
	return slices.Clone(h.leaves)
}

// LeafSum is the hash of one leaf (at most LeafSize bytes): an all-zero
// one's comes from zerosum without hashing it.
func LeafSum(p []byte) [Size]byte {
	if bytes.Equal(p, zeroPage[:len(p)]) {
		return zerosum.SHA256(int64(len(p)))
	}
	return sha256.Sum256(p)
}

// FromLeaves is the digest, in hexadecimal, of a file whose leaves hash to
// leaves (Size bytes each, in order): a digest updated for the leaves a
// change touched needs no other byte of the file.
func FromLeaves(leaves []byte) string {
	sum := sha256.Sum256(leaves)
	return hex.EncodeToString(sum[:])
}

// Sum appends the digest of what was written to b; the state is unchanged.
func (h *Hasher) Sum(b []byte) []byte {
	c := h.clone()
	if c.pos > 0 {
		c.endLeaf()
	}
	return c.outer.Sum(b)
}

// Hex is the digest in lower-case hexadecimal, as the record keeps it.
func (h *Hasher) Hex() string { return hex.EncodeToString(h.Sum(nil)) }

// Reset forgets everything written.
func (h *Hasher) Reset() {
	h.outer.Reset()
	h.leaf.Reset()
	h.pos, h.zeros, h.data = 0, 0, false
}

// Size is the digest's length.
func (h *Hasher) Size() int { return Size }

// BlockSize is SHA-256's block size.
func (h *Hasher) BlockSize() int { return sha256.BlockSize }

func (h *Hasher) clone() *Hasher {
	c := New()
	if err := c.UnmarshalBinary(h.mustMarshal()); err != nil {
		panic(fmt.Sprintf("diskdigest: clone: %v", err))
	}
	return c
}

// stateMagic starts a marshaled state.
const stateMagic = "vmmdd1"

// MarshalBinary is the Hasher's state, for UnmarshalBinary.
func (h *Hasher) MarshalBinary() ([]byte, error) { return h.mustMarshal(), nil }

func (h *Hasher) mustMarshal() []byte {
	outer, err := h.outer.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("diskdigest: marshal sha256 state: %v", err)) // crypto/sha256 never fails
	}
	leaf, err := h.leaf.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("diskdigest: marshal sha256 state: %v", err))
	}
	b := []byte(stateMagic)
	b = binary.BigEndian.AppendUint64(b, uint64(h.pos))
	b = binary.BigEndian.AppendUint64(b, uint64(h.zeros))
	if h.data {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(outer)))
	b = append(b, outer...)
	return append(b, leaf...)
}

// UnmarshalBinary restores a state MarshalBinary made; a state that is not
// one is an error and leaves h unchanged.
func (h *Hasher) UnmarshalBinary(b []byte) error {
	bad := errors.New("diskdigest: not a digest state")
	head := len(stateMagic) + 8 + 8 + 1 + 2
	if len(b) < head || string(b[:len(stateMagic)]) != stateMagic {
		return bad
	}
	r := b[len(stateMagic):]
	pos, zeros := int64(binary.BigEndian.Uint64(r)), int64(binary.BigEndian.Uint64(r[8:]))
	data := r[16]
	n := int(binary.BigEndian.Uint16(r[17:]))
	r = r[19:]
	if pos < 0 || pos >= LeafSize || zeros < 0 || zeros > pos || data > 1 || n > len(r) || data == 0 && zeros != pos {
		return bad
	}
	outer, leaf := sha256.New(), sha256.New()
	if err := outer.(encoding.BinaryUnmarshaler).UnmarshalBinary(r[:n]); err != nil {
		return bad
	}
	if err := leaf.(encoding.BinaryUnmarshaler).UnmarshalBinary(r[n:]); err != nil {
		return bad
	}
	h.outer, h.leaf, h.pos, h.zeros, h.data = outer, leaf, pos, zeros, data == 1
	return nil
}

// Bytes is the digest of b, in hexadecimal.
func Bytes(b []byte) string {
	sum := Sum(b)
	return hex.EncodeToString(sum[:])
}

// Zeros is the digest of n zero bytes: no byte is hashed, only one leaf
// hash per MiB.
func Zeros(n int64) [Size]byte {
	h := New()
	h.WriteZeros(n)
	var sum [Size]byte
	h.Sum(sum[:0])
	return sum
}

// Sum is the digest of b.
func Sum(b []byte) [Size]byte {
	h := New()
	h.Write(b)
	var sum [Size]byte
	h.Sum(sum[:0])
	return sum
}

// AddLeaves adds whole leaves by their hashes (Size bytes each, in order,
// as Leaves gives them), without their bytes: a copy that already hashed
// each leaf to check it hashes none again for the file's digest. Only at a
// leaf boundary, and a short leaf only last: it reports false (and adds
// nothing) when h is inside a leaf or leaves is not whole hashes.
func (h *Hasher) AddLeaves(leaves []byte) bool {
	if h.pos != 0 || len(leaves)%Size != 0 {
		return false
	}
	h.outer.Write(leaves)
	if h.keep {
		h.leaves = append(h.leaves, leaves...)
	}
	return true
}

// ZeroLeaves are the leaf hashes of n zero bytes, for AddLeaves.
func ZeroLeaves(n int64) []byte {
	out := make([]byte, 0, LeafCount(n)*Size)
	for n > 0 {
		k := min(n, LeafSize)
		sum := zerosum.SHA256(k)
		out = append(out, sum[:]...)
		n -= k
	}
	return out
}

// LeavesMatch says that leaves are the leaf hashes of n bytes whose digest
// is sum (hexadecimal): so much is checked before leaves stand in for the
// bytes.
func LeavesMatch(leaves []byte, n int64, sum string) bool {
	return int64(len(leaves)) == LeafCount(n)*Size && FromLeaves(leaves) == sum
}

// LeafCount is how many leaves n bytes have.
func LeafCount(n int64) int64 { return (n + LeafSize - 1) / LeafSize }
