package esxisim

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
)

// The simulated host's `python` runs a real local Python 3 on the
// simulator's backing files, so the script the client sends is what is
// tested. Only the form the client uses is accepted:
//
//	/bin/python -c SCRIPT PATH ARG...   (the script reads PATH)
//	/bin/python -c SCRIPT --probe
//	/bin/python -c SCRIPT --serve       (ranges asked for on stdin)
//
// PATH is opened by the simulator with the host's rules (confined to
// /vmfs/volumes, "Device or resource busy" for a powered-on VM's disks) and
// handed to the interpreter as an inherited descriptor (/dev/fd/3).
//
// A host has no Python until [Server.SetPython] names an interpreter, like
// ESXi 6.x; ESXi 7 and 8 have /bin/python.

// pythonInterp maps a server to its interpreter path (absent: no Python).
var pythonInterp sync.Map // *Server -> string

// SetPython makes `python` (and /bin/python) on s run interpreter, a local
// Python 3 such as "python3" (looked up in PATH). An empty interpreter
// removes Python, as on ESXi 6.x.
func (s *Server) SetPython(interpreter string) {
	if interpreter == "" {
		pythonInterp.Delete(s)
		return
	}
	pythonInterp.Store(s, interpreter)
}

// HostPython is the interpreter that best stands for ESXi's /bin/python:
// Debian's /usr/bin/python3 when it is there, a plain interpreter as
// /bin/python is, else "python3" from PATH. PATH's python3 may be a
// version manager's shim (pyenv's is a shell script) that costs about
// 100 ms of CPU per start, which a reader started for every chunk pays
// dozens of times a disk, and which no ESXi host pays.
func HostPython() string {
	const debian = "/usr/bin/python3"
	if fi, err := os.Stat(debian); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return debian
	}
	return "python3"
}

// registerPythonCommands adds the python applets to cmds. It must run after
// the command table is built (exec.go's init).
func registerPythonCommands(cmds map[string]cmdFunc) {
	cmds["python"] = cmdPython
	cmds["python3"] = cmdPython
}

func init() {
	// exec.go's init builds the table; files initialise in name order, so
	// it exists here. Should that change, the python tests fail loudly.
	if commands != nil {
		registerPythonCommands(commands)
	}
}

func cmdPython(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int {
	v, ok := pythonInterp.Load(s)
	if !ok {
		fmt.Fprintf(stderr, "sh: %s: not found\n", args[0])
		return 127
	}
	interp := v.(string)
	if len(args) < 4 || args[1] != "-c" {
		fmt.Fprintln(stderr, "python: the simulated host runs only `python -c SCRIPT PATH ARG...` or `python -c SCRIPT --probe`")
		return 2
	}
	script, rest := args[2], append([]string(nil), args[3:]...)
	if len(rest) == 1 && rest[0] == "--serve" {
		return servePython(s, env, interp, script, stdout, stderr)
	}
	return runPython(s, env, interp, script, rest, stdout, stderr)
}

// servePython is the reader's long-lived mode (`--serve`): it reads the
// range requests from stdin itself and answers each by running the real
// reader on that one range, so that every path is opened as the host
// opens it (locks, missing files) while the client sees one session, as
// on a real host.
func servePython(s *Server, env *shellEnv, interp, script string, stdout, stderr io.Writer) int {
	in := bufio.NewReader(env.stdin)
	for {
		var hdr [3]byte
		if _, err := io.ReadFull(in, hdr[:]); err != nil {
			if err == io.EOF {
				return 0
			}
			fmt.Fprintln(stderr, "vmm-sparse: truncated request")
			return 1
		}
		if hdr[0] != 'R' {
			fmt.Fprintln(stderr, "vmm-sparse: bad request header")
			return 1
		}
		req := make([]byte, int(binary.BigEndian.Uint16(hdr[1:]))+16)
		if _, err := io.ReadFull(in, req); err != nil {
			fmt.Fprintln(stderr, "vmm-sparse: truncated request")
			return 1
		}
		n := len(req) - 16
		off, length := binary.BigEndian.Uint64(req[n:]), binary.BigEndian.Uint64(req[n+8:])
		rest := []string{string(req[:n]), strconv.FormatUint(off, 10), strconv.FormatUint(length, 10)}
		if st := runPython(s, env, interp, script, rest, stdout, stderr); st != 0 {
			return st
		}
	}
}

// runPython runs the real reader once: on one range of the file it names
// (opened here, passed as fd 3), or in probe mode.
func runPython(s *Server, env *shellEnv, interp, script string, rest []string, stdout, stderr io.Writer) int {
	cmd := exec.CommandContext(env.ctx, interp, "-c", script)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
	if rest[0] != "--probe" {
		name := rest[0]
		if len(rest) == 3 {
			off, _ := strconv.ParseInt(rest[1], 10, 64)
			n, _ := strconv.ParseInt(rest[2], 10, 64)
			s.logSparseRead(SparseRead{Path: name, Offset: off, Length: n})
		}
		f, err := s.openPath(name)
		if err != nil {
			fmt.Fprintf(stderr, "vmm-sparse: can't open '%s': %s\n", name, errText(err))
			return 1
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			fmt.Fprintf(stderr, "vmm-sparse: can't open '%s': %s\n", name, "Is a directory")
			return 1
		}
		osf, isFile := f.(*os.File)
		if !isFile {
			fmt.Fprintf(stderr, "vmm-sparse: can't open '%s': %s\n", name, "Operation not permitted")
			return 1
		}
		cmd.ExtraFiles = []*os.File{osf}
		rest[0] = "/dev/fd/3"
	}
	cmd.Args = append(cmd.Args, rest...)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		if env.ctx.Err() != nil {
			return 255
		}
		fmt.Fprintf(stderr, "python: %v\n", err)
		return 126
	}
	return 0
}
