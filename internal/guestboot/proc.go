package guestboot

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"syscall"
)

// process is a QEMU process tied to the lifetime of this program, the way
// the test cluster ties etcd and kube-apiserver to the test binary:
//
//   - it is started with Pdeathsig=SIGKILL from a goroutine locked to its OS
//     thread, which stays blocked in Wait while the child lives (the kernel
//     sends Pdeathsig when the thread that forked the child exits, so that
//     thread must outlive the child); if this program dies, so does QEMU;
//   - it runs in its own process group, killed as a whole.
type process struct {
	pid  int
	done chan struct{} // closed once the child has been reaped
	err  error         // Wait's result, valid after done
}

// startProcess starts path with args and env; stdout and stderr go to the
// given writers.
func startProcess(path string, args, env []string, stdout, stderr io.Writer) (*process, error) {
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime retires the thread with the goroutine.
		runtime.LockOSThread()
		defer close(p.done)
		cmd := exec.Command(path, args...)
		cmd.Env = env
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

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group and waits until the child is reaped.
func (p *process) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	<-p.done
}
