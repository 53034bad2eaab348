// Package transfer copies a virtual disk's data file from an ESXi host into a
// local work directory: the disk-copy half of the Preparing checkpoint.
//
// The copy is a re-entrant reconcile step, not a one-shot script:
//
//   - The source is only ever read, through the small [RangeReader]
//     interface ((*esxi.Client).ReadRange satisfies it).
//   - The disk is copied in fixed-size chunks into a sparse staging file.
//     All-zero 64 KiB blocks are not written (they stay holes), and SHA-256
//     is computed while the bytes stream by, so the source is never read
//     twice.
//   - After every chunk the staging file is fsync-ed and only then the
//     journal (<dest>.journal, JSON, replaced atomically) records the chunk's
//     SHA-256 and the serialized whole-file SHA-256 state. After any
//     interruption, including kill -9 in the middle of a write, the next
//     [Copy] resumes at the first chunk the journal does not vouch for and
//     still produces the whole-file SHA-256 without re-reading anything.
//   - The journal is never trusted beyond what the staging file holds: on
//     resume the last recorded chunk is re-hashed from the local file, and
//     when that fails the recorded chunks are re-verified from the start.
//   - The destination may also be a block device (a Block-mode claim),
//     with its journal at Options.JournalPath: see target.go for how its
//     unverified bytes are made to read as zeros without truncation.
//   - A completed copy is recorded in the journal; calling Copy again returns
//     the recorded [Result] without contacting the host.
package transfer
