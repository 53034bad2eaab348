package transfer

import (
	"context"
	"fmt"
	"sync"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
)

// runStreams copies the chunks from start on that the journal does not
// hold yet, c.opts.Streams at a time. Chunks are read and fsync-ed out of
// order; the journal records each one as it lands (Ahead) and moves the
// leading ones into Chunks and the whole-file hash in order. When a stream
// fails the others are stopped, and what landed stays recorded.
func (c *copier) runStreams(ctx context.Context, start int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pending []int
	for i := start; i < c.chunks; i++ {
		if _, ok := c.j.Ahead[i]; !ok {
			pending = append(pending, i)
		}
	}
	streams := min(c.opts.Streams, max(len(pending), 1))
	todo := make(chan int)
	go func() {
		defer close(todo)
		for _, i := range pending {
			select {
			case todo <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	// A stream starts its next chunk only once the one it handed over is
	// in the journal (done closed, as soon as the journal on disk lists it
	// among the chunks ahead: landAhead). So a kill -9 loses at most one
	// chunk per stream, the one being read or the one being recorded,
	// never both, and the next copy reads only those again. The wait is
	// one journal write; the other streams keep the link busy meanwhile.
	type landed struct {
		i    int
		rec  chunkRecord
		err  error
		done chan struct{}
	}
	results := make(chan landed, streams)
	var wg sync.WaitGroup
	for w := 0; w < streams; w++ {
		src := c.src
		if n := len(c.opts.Sources); n > 0 {
			src = c.opts.Sources[w%n]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ring := newBufferRing()
			for i := range todo {
				rec, err := c.readChunkAt(ctx, src, i, ring)
				done := make(chan struct{})
				results <- landed{i, rec, err, done}
				if err != nil {
					return
				}
				<-done // the collector closes every done it receives
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	// The chunks ahead join the verified prefix (and the whole-file hash)
	// in an advancer of their own, so that hashing a run of them never
	// holds up a stream waiting for its chunk to be recorded. jmu guards
	// the journal between the two; the hash is the advancer's alone.
	var jmu sync.Mutex
	wake := make(chan struct{}, 1)
	advanced := make(chan error, 1)
	go func() {
		var err error
		for range wake {
			if err == nil {
				if err = c.advance(&jmu); err != nil {
					cancel()
				}
			}
		}
		if err == nil {
			err = c.advance(&jmu)
		}
		advanced <- err
	}()
	var first error
	for l := range results {
		if l.err != nil {
			if first == nil {
				first = l.err
			}
			cancel()
			close(l.done)
			continue
		}
		jmu.Lock()
		err := c.landAhead(l.i, l.rec)
		done, verified := c.verifiedBytes(), c.j.VerifiedChunks
		jmu.Unlock()
		close(l.done)
		if err != nil {
			if first == nil {
				first = err
			}
			cancel()
			continue
		}
		c.report(done, verified, true)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	close(wake)
	if err := <-advanced; err != nil && first == nil {
		first = err
	}
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.j.VerifiedChunks != c.chunks {
		return fmt.Errorf("%d of %d chunks verified after every stream ended", c.j.VerifiedChunks, c.chunks)
	}
	return nil
}

// readChunkAt reads chunk i through src into the staging file, retrying
// transient errors (a failed attempt's bytes are punched out first), and
// fsyncs it. The whole-file hash is not touched.
func (c *copier) readChunkAt(ctx context.Context, src RangeReader, i int, ring chan []byte) (chunkRecord, error) {
	off := int64(i) * c.opts.ChunkSize
	n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
	var rec chunkRecord
	first := true
	err := c.retry(ctx, func() error {
		if !first {
			if err := c.clear(off, n); err != nil {
				return &localError{fmt.Errorf("clear chunk %d of the staging file: %w", i, err)}
			}
		}
		first = false
		w := newChunkWriter(c.f, off, n, nil, nil)
		w.setVerifyZeros(c.verifyZeros.Load())
		w.writeBehind(ring)
		clock := startAttempt()
		rerr := c.readChunk(ctx, src, off, n, w)
		r, got, lerr := w.finish()
		clock.end(&c.stages, w)
		if lerr != nil {
			return &localError{lerr}
		}
		if rerr != nil {
			return rerr
		}
		if got != n {
			return fmt.Errorf("read %d bytes of chunk %d at offset %d, expected %d", got, i, off, n)
		}
		rec = r
		return nil
	})
	if err != nil {
		return rec, fmt.Errorf("chunk %d at offset %d: %w", i, off, err)
	}
	if err := c.sync(); err != nil {
		return rec, &localError{fmt.Errorf("fsync staging file: %w", err)}
	}
	return rec, nil
}

// landAhead records chunk i, read and fsync-ed, in the journal, ahead of
// the verified prefix: from here a kill does not lose it.
func (c *copier) landAhead(i int, rec chunkRecord) error {
	if c.j.Ahead == nil {
		c.j.Ahead = map[int]chunkRecord{}
	}
	c.j.Ahead[i] = rec
	return c.saveJournal()
}

// advance moves every leading chunk ahead into the verified prefix, one
// at a time, adding it to the whole file's digest, and records each move;
// mu guards the journal. The chunk joins by the leaf hashes it was checked
// with as it arrived (the host's, or the writer's), as in the sequential
// copy, so no byte is hashed twice; a chunk without them (a journal of an
// earlier run) is hashed from the staging file. The data is trusted as
// the sequential copy trusts its writes: a resumed copy checks the file
// against each chunk's digest.
func (c *copier) advance(mu *sync.Mutex) error {
	for {
		mu.Lock()
		k := c.j.VerifiedChunks
		r, ok := c.j.Ahead[k]
		mu.Unlock()
		if !ok {
			return nil
		}
		state := marshalHash(c.whole)
		off := int64(k) * c.opts.ChunkSize
		n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
		leaves, herr := c.addToWhole(c.whole, r, off, n)
		r.Leaves = nil
		mu.Lock()
		if herr != nil {
			// Not trusted: drop it; the next copy reads it again.
			delete(c.j.Ahead, k)
		} else {
			c.j.Chunks = append(c.j.Chunks, r)
			c.j.VerifiedChunks = k + 1
			delete(c.j.Ahead, k)
			c.keepLeaves(off, leaves)
		}
		if len(c.j.Ahead) == 0 {
			c.j.Ahead = nil
		}
		if herr != nil {
			var rerr error
			if c.whole, rerr = restoreHash(state); rerr != nil {
				mu.Unlock()
				return rerr
			}
		}
		c.j.SHA256State = marshalHash(c.whole)
		serr := c.saveJournal()
		done, verified := c.verifiedBytes(), c.j.VerifiedChunks
		mu.Unlock()
		switch {
		case serr != nil:
			return serr
		case herr != nil:
			return &localError{fmt.Errorf("verify staging file: chunk %d of the staging file: %w", k, herr)}
		}
		// The verified prefix grew: an upload that follows the copy may
		// read on.
		c.report(done, verified, true)
	}
}

// verifiedBytes is how much of the disk the journal holds.
func (c *copier) verifiedBytes() int64 {
	b := min(int64(c.j.VerifiedChunks)*c.opts.ChunkSize, c.disk.SizeBytes)
	for i := range c.j.Ahead {
		off := int64(i) * c.opts.ChunkSize
		b += min(c.opts.ChunkSize, c.disk.SizeBytes-off)
	}
	return b
}

// keepAhead keeps, of the chunks recorded ahead of the first k, those the
// staging file still holds, and makes every other byte from chunk k on a
// hole in a file SizeBytes long.
func (c *copier) keepAhead(k int, fileSize int64) error {
	for i, r := range c.j.Ahead {
		off := int64(i) * c.opts.ChunkSize
		n := min(c.opts.ChunkSize, c.disk.SizeBytes-off)
		ok := false
		if off+n <= fileSize {
			h := diskdigest.New()
			if err := hashRange(h, c.f, off, n); err != nil {
				return fmt.Errorf("verify staging file: %w", err)
			}
			ok = h.Hex() == r.SHA256
		}
		if !ok {
			delete(c.j.Ahead, i)
		}
	}
	if !c.block {
		if err := c.f.Truncate(c.disk.SizeBytes); err != nil {
			return fmt.Errorf("allocate staging file: %w", err)
		}
	}
	for i := k; i < c.chunks; i++ {
		if _, ok := c.j.Ahead[i]; ok {
			continue
		}
		off := int64(i) * c.opts.ChunkSize
		if off >= fileSize {
			break // beyond the old end: already a hole
		}
		if err := c.clear(off, min(c.opts.ChunkSize, c.disk.SizeBytes-off)); err != nil {
			return fmt.Errorf("clear chunk %d of the staging file: %w", i, err)
		}
	}
	if len(c.j.Ahead) == 0 {
		c.j.Ahead = nil
	}
	if err := c.sync(); err != nil {
		return fmt.Errorf("fsync staging file: %w", err)
	}
	return nil
}
