// Command diskread copies one disk file from an SSH host with the provider's
// own ESXi client, in 64 MiB chunks, one after the other, the way a disk copy
// reads it: -mode dd uses Client.ReadRange (dd on the host, zeros on the
// wire), -mode sparse uses Client.ReadRangeSparse (the Python reader, zero
// runs as holes). It writes the result to -out (zero runs left as holes) and
// prints one line of figures. -mode copy runs the product's journaled,
// verified copy (transfer.Copy) with -streams streams, each on its own SSH
// connection, as a migration does. scripts/bench.sh runs it; it is not a
// product command.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
)

// fileSink writes data at its offset and leaves zero runs as holes (the
// output file is created empty and truncated to size first).
type fileSink struct{ f *os.File }

func (s fileSink) WriteData(off int64, p []byte) error {
	_, err := s.f.WriteAt(p, off)
	return err
}

func (s fileSink) WriteZeros(int64, int64) error { return nil }

// offsetWriter writes a dense stream sequentially from a start offset.
type offsetWriter struct {
	f   *os.File
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

func main() {
	var (
		addr    = flag.String("addr", "", "host address")
		port    = flag.Int("port", 22, "SSH port")
		key     = flag.String("key", "", "private key file")
		known   = flag.String("known-hosts", "", "known_hosts file")
		path    = flag.String("path", "", "file on the host (/vmfs/volumes/...)")
		size    = flag.Int64("size", 0, "bytes to read")
		chunk   = flag.Int64("chunk", 64<<20, "chunk size")
		mode    = flag.String("mode", "sparse", "dd, sparse or copy")
		out     = flag.String("out", "", "output file")
		streams = flag.Int("streams", 1, "streams per disk (mode copy)")
	)
	flag.Parse()
	if *mode == "copy" {
		if err := runCopy(*addr, *port, *key, *known, *path, *size, *chunk, *streams, *out); err != nil {
			fmt.Fprintln(os.Stderr, "diskread:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*addr, *port, *key, *known, *path, *size, *chunk, *mode, *out); err != nil {
		fmt.Fprintln(os.Stderr, "diskread:", err)
		os.Exit(1)
	}
}

func run(addr string, port int, keyFile, known, path string, size, chunk int64, mode, out string) error {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	c, err := esxi.NewClient(esxi.HostConfig{Name: "bench", Address: addr, Port: port, User: "root",
		PrivateKeyPEM: string(pem), KnownHostsFile: known}, func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, f+"\n", a...)
	})
	if err != nil {
		return err
	}
	defer c.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	ctx := context.Background()
	if mode == "sparse" {
		ok, err := c.HasPython(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the host has no usable /bin/python")
		}
	}
	start := time.Now()
	var wire, data int64
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		switch mode {
		case "dd":
			got, err := c.ReadRange(ctx, path, off, n, &offsetWriter{f: f, off: off})
			if err != nil {
				return err
			}
			wire += got
			data += got
		case "sparse":
			st, err := c.ReadRangeSparse(ctx, path, off, n, fileSink{f})
			if err != nil {
				return err
			}
			wire += st.WireBytes
			data += st.DataBytes
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	el := time.Since(start)
	fmt.Printf("mode=%s bytes=%d payload_bytes=%d data_bytes=%d seconds=%.3f\n", mode, size, wire, data, el.Seconds())
	return nil
}

// runCopy copies the disk with transfer.Copy and streams streams, then
// removes the journal (the staging file is the copy).
func runCopy(addr string, port int, keyFile, known, path string, size, chunk int64, streams int, out string) error {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	c, err := esxi.NewClient(esxi.HostConfig{Name: "bench", Address: addr, Port: port, User: "root",
		PrivateKeyPEM: string(pem), KnownHostsFile: known, MaxSessions: max(streams, 4), StreamsPerDisk: streams}, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	var srcs []transfer.RangeReader
	for _, s := range c.StreamClients(streams) {
		srcs = append(srcs, s)
	}
	var last transfer.Progress
	var mu sync.Mutex
	start := time.Now()
	res, err := transfer.Copy(context.Background(), c, transfer.Disk{Path: path, SizeBytes: size}, out,
		transfer.Options{ChunkSize: chunk, Streams: streams, Sources: srcs, Progress: func(p transfer.Progress) {
			mu.Lock()
			defer mu.Unlock()
			last = p
		}})
	if err != nil {
		return err
	}
	el := time.Since(start)
	if err := os.Remove(out + transfer.JournalSuffix); err != nil {
		return err
	}
	fmt.Printf("mode=copy streams=%d bytes=%d zero_bytes=%d sha256=%s seconds=%.3f\n", streams, size, res.ZeroBytes, res.SHA256, el.Seconds())
	st := last.Stages
	// Where the copy spent its time, summed over its streams (stderr: the
	// line above is the one bench.sh parses).
	fmt.Fprintf(os.Stderr, "stages, s summed over %d streams: waiting for the host %.1f, reading %.1f, writing %.1f, fsync %.1f, hashing %.1f, journal %.1f\n",
		streams, st.Waiting.Seconds(), st.Reading.Seconds(), st.Writing.Seconds(), st.Syncing.Seconds(), st.Hashing.Seconds(), st.Journal.Seconds())
	return nil
}
