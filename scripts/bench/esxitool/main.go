// Command esxitool is the ESXi control commands (vim-cmd, vmware) on the
// benchmark's host: a real OpenSSH server chrooted into a tree laid out
// like ESXi's, where sshd, the shell, cat, dd, stat and python are real.
// Installed in the chroot as /bin/vim-cmd and /bin/vmware (links to it;
// it answers to the name it is run by), it hands its command line to the
// simulated host (internal/esxisim, run by `migrate host -control`) over a
// Unix socket and prints the answer with the same exit status, so that
// power state, the VM inventory and snapshots are the simulator's.
//
// The socket is /var/run/esxisim.sock in the chroot, or $ESXITOOL_SOCKET.
// Build it static (CGO_ENABLED=0): it runs inside the chroot.
//
// The exchange: one JSON line {"args": [...]} from the tool, then frames
// from the host, each a kind byte ('1' stdout, '2' stderr, 'x' exit), a
// big-endian uint32 length and that many bytes; the exit frame holds the
// status as a big-endian uint32 and ends the exchange.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path"
)

const defaultSocket = "/var/run/esxisim.sock"

func main() {
	args := append([]string{path.Base(os.Args[0])}, os.Args[1:]...)
	if args[0] == "esxitool" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: esxitool vim-cmd|vmware [args...], or run it as vim-cmd or vmware")
		os.Exit(2)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	sock := os.Getenv("ESXITOOL_SOCKET")
	if sock == "" {
		sock = defaultSocket
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintf(stderr, "%s: the simulated host does not answer: %v\n", args[0], err)
		return 126
	}
	defer c.Close()
	req, err := json.Marshal(struct {
		Args []string `json:"args"`
	}{args})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", args[0], err)
		return 126
	}
	if _, err := c.Write(append(req, '\n')); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", args[0], err)
		return 126
	}
	r := bufio.NewReader(c)
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			fmt.Fprintf(stderr, "%s: the simulated host hung up: %v\n", args[0], err)
			return 126
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n > 16<<20 {
			fmt.Fprintf(stderr, "%s: a frame of %d bytes from the simulated host\n", args[0], n)
			return 126
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			fmt.Fprintf(stderr, "%s: the simulated host hung up: %v\n", args[0], err)
			return 126
		}
		switch head[0] {
		case '1':
			_, _ = stdout.Write(b)
		case '2':
			_, _ = stderr.Write(b)
		case 'x':
			if n != 4 {
				fmt.Fprintf(stderr, "%s: a bad exit frame from the simulated host\n", args[0])
				return 126
			}
			return int(binary.BigEndian.Uint32(b))
		default:
			fmt.Fprintf(stderr, "%s: an unknown frame %q from the simulated host\n", args[0], head[0])
			return 126
		}
	}
}
