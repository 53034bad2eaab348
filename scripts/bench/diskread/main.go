// Command diskread copies one disk file from an SSH host with the provider's
// own ESXi client, in 64 MiB chunks, one after the other, the way a disk copy
// reads it: -mode dd uses Client.ReadRange (dd on the host, zeros on the
// wire), -mode sparse uses Client.ReadRangeSparse (the Python reader, zero
// runs as holes). It writes the result to -out (zero runs left as holes) and
// prints one line of figures. scripts/bench.sh runs it; it is not a product
// command.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
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
		addr  = flag.String("addr", "", "host address")
		port  = flag.Int("port", 22, "SSH port")
		key   = flag.String("key", "", "private key file")
		known = flag.String("known-hosts", "", "known_hosts file")
		path  = flag.String("path", "", "file on the host (/vmfs/volumes/...)")
		size  = flag.Int64("size", 0, "bytes to read")
		chunk = flag.Int64("chunk", 64<<20, "chunk size")
		mode  = flag.String("mode", "sparse", "dd or sparse")
		out   = flag.String("out", "", "output file")
	)
	flag.Parse()
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
