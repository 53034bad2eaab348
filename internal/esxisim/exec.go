package esxisim

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// shellEnv is the state of one exec's shell.
type shellEnv struct {
	ctx    context.Context
	se     *session
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	status int
}

// cmdFunc is a command: args[0] is its name.
type cmdFunc func(s *Server, env *shellEnv, args []string, stdout, stderr io.Writer) int

var commands map[string]cmdFunc

func init() {
	commands = map[string]cmdFunc{
		"cat":       cmdCat,
		"dd":        cmdDD,
		"stat":      cmdStat,
		"ls":        cmdLs,
		"sha256sum": cmdHashSum,
		"sha1sum":   cmdHashSum,
		"md5sum":    cmdHashSum,
		"echo":      cmdEcho,
		"true":      func(*Server, *shellEnv, []string, io.Writer, io.Writer) int { return 0 },
		"false":     func(*Server, *shellEnv, []string, io.Writer, io.Writer) int { return 1 },
		"vmware":    cmdVmware,
		"vim-cmd":   cmdVimCmd,
	}
}

// runScript parses and runs a command line, returning its exit status.
func (s *Server) runScript(env *shellEnv, script string) int {
	lines, perr := parseScript(script)
	for _, line := range lines {
		for _, ao := range line {
			if env.ctx.Err() != nil {
				return env.status
			}
			s.runAndOr(env, ao)
		}
	}
	if perr != nil {
		fmt.Fprintf(env.stderr, "sh: %s\n", perr.Error())
		return 2
	}
	return env.status
}

func (s *Server) runAndOr(env *shellEnv, ao andOr) {
	env.status = s.runSimple(env, ao.cmds[0])
	for i, op := range ao.ops {
		if env.ctx.Err() != nil {
			return
		}
		if (op == "&&") == (env.status == 0) {
			env.status = s.runSimple(env, ao.cmds[i+1])
		}
	}
}

// runSimple expands, redirects and runs one command, applying the per-command
// faults (delay, drop after N commands).
func (s *Server) runSimple(env *shellEnv, c simpleCmd) int {
	s.stats.commands.Add(1)
	s.mu.Lock()
	delay := s.delay
	drop := false
	if s.dropCmds == 0 {
		drop = true
		s.dropCmds = -1
	} else if s.dropCmds > 0 {
		s.dropCmds--
	}
	s.mu.Unlock()
	if drop {
		env.se.nc.Close()
		<-env.ctx.Done()
		return 255
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-env.ctx.Done():
			t.Stop()
			return 255
		}
	}
	args := make([]string, len(c.words))
	for i, w := range c.words {
		args[i] = w.expand(env.status)
	}
	out, errw := env.stdout, env.stderr
	for _, r := range c.redirs {
		switch r {
		case redirStdoutNull:
			out = io.Discard
		case redirStderrNull:
			errw = io.Discard
		case redirStderrOut:
			errw = out
		}
	}
	fn, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprintf(errw, "sh: %s: not found\n", args[0])
		return 127
	}
	if s.loseReply(args) {
		// The command runs and its effect stays; its answer never leaves.
		fn(s, env, args, io.Discard, io.Discard)
		env.se.nc.Close()
		<-env.ctx.Done()
		return 255
	}
	return fn(s, env, args, out, errw)
}

// lookupCommand finds the command a shell runs for name: a bare name, or
// one under /bin, /sbin, /usr/bin or /usr/sbin.
func lookupCommand(name string) (cmdFunc, bool) {
	if dir := path.Dir(name); name != "" && name[0] == '/' {
		switch dir {
		case "/bin", "/sbin", "/usr/bin", "/usr/sbin":
			name = path.Base(name)
		default:
			return nil, false
		}
	}
	fn, ok := commands[name]
	return fn, ok
}

// Run runs one command, args[0] its name and the rest its arguments as a
// shell has already split and unquoted them, the way an exec's shell on
// this host runs it, and returns its exit status. It is for hosts that are
// not this server's SSH side: a real sshd whose vim-cmd and vmware hand
// their command line over, so that power state, inventory and snapshots
// stay this server's. The fault injections of the SSH side (delays,
// dropped connections, lost replies) do not apply.
func (s *Server) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return 0
	}
	s.stats.commands.Add(1)
	fn, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "sh: %s: not found\n", args[0])
		return 127
	}
	return fn(s, &shellEnv{ctx: ctx, stdout: stdout, stderr: stderr}, args, stdout, stderr)
}

// loseReply reports (and counts) whether the DropAfterRunning fault fires
// for the command args.
func (s *Server) loseReply(args []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lostReplies <= 0 || !strings.Contains(strings.Join(args, " "), s.lostMatch) {
		return false
	}
	s.lostReplies--
	s.lostFired++
	return true
}

func cmdEcho(_ *Server, _ *shellEnv, args []string, stdout, _ io.Writer) int {
	args = args[1:]
	nl := true
	if len(args) > 0 && args[0] == "-n" {
		nl = false
		args = args[1:]
	}
	var b []byte
	for i, a := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, a...)
	}
	if nl {
		b = append(b, '\n')
	}
	if _, err := stdout.Write(b); err != nil {
		return 1
	}
	return 0
}

func cmdVmware(s *Server, _ *shellEnv, args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && (args[1] == "-v" || args[1] == "--version") {
		fmt.Fprintln(stdout, s.opts.Version)
		return 0
	}
	fmt.Fprintln(stderr, "Usage: vmware [-v|-l]")
	return 1
}
