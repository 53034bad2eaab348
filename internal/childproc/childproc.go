// Package childproc starts helper processes (etcd and kube-apiserver for
// the test cluster, QEMU for real guests) whose lifetime is tied to this
// program's:
//
//   - each is started with Pdeathsig=SIGKILL from a goroutine locked to its
//     OS thread, which stays blocked in Wait while the child lives (the
//     kernel sends Pdeathsig when the thread that forked the child exits,
//     so that thread must outlive the child): if this program dies, so does
//     the child. Once the child is reaped the thread goes back to the
//     scheduler rather than being retired, so no other process forked
//     from it with Pdeathsig is killed;
//   - each runs in its own process group, killed as a whole.
package childproc

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"syscall"
)

// Process is a started child.
type Process struct {
	pid  int
	done chan struct{} // closed once the child has been reaped
	err  error         // Wait's result, valid after done
}

// Start starts path with args and env (nil: this program's environment);
// its stdout and stderr go to the given writers.
func Start(path string, args, env []string, stdout, stderr io.Writer) (*Process, error) {
	return StartIn("", path, args, env, stdout, stderr)
}

// StartIn is Start with the child's working folder dir ("": this
// program's).
func StartIn(dir, path string, args, env []string, stdout, stderr io.Writer) (*Process, error) {
	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Unlocked once the child is reaped, never before. A goroutine that
		// ends still locked makes the runtime retire its thread, and that
		// thread may earlier have forked a process that another part of
		// this program started with Pdeathsig from an unlocked goroutine
		// (terraform-exec starts terraform that way): retiring it would
		// SIGKILL that process.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		cmd := exec.Command(path, args...)
		cmd.Env = env
		cmd.Dir = dir
		cmd.Stdout = stdout
		cmd.Stderr = stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s: %w", path, err)
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, err
	}
	return p, nil
}

// Pid is the child's process id, which is also its process group's.
func (p *Process) Pid() int { return p.pid }

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is Wait's result; valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Exited reports whether the child has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the child's process group and waits until the child is
// reaped.
func (p *Process) Kill() {
	if p == nil {
		return
	}
	if !p.Exited() {
		// The group id is the child's pid (Setpgid with Pgid 0).
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	<-p.done
}
