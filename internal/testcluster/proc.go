package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// process is a child process (etcd or kube-apiserver) tied to the lifetime of
// the test binary:
//
//   - it is started with Pdeathsig=SIGKILL from a goroutine locked to its OS
//     thread that stays blocked in Wait for as long as the child lives. The
//     kernel sends Pdeathsig when the *thread* that forked the child exits, so
//     the thread must not be reused or retired by the Go runtime before the
//     child is gone; when the whole test binary dies (panic, timeout, SIGKILL)
//     every thread exits and the kernel kills the child;
//   - it runs in its own process group (Setpgid), which kill signals as a
//     whole, so nothing it might spawn survives it.
type process struct {
	name    string
	pid     int
	logPath string
	done    chan struct{} // closed once the child has been reaped
	err     error         // Wait's result, valid after done
}

// startProcess starts path with args, stdout and stderr appended to logPath.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, logPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, after the child has
		// been reaped, the runtime retires the thread with it.
		runtime.LockOSThread()
		defer close(p.done)
		defer logFile.Close()
		cmd := exec.Command(path, args...)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.Env = childEnv()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s: %w", name, err)
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

// childEnv is the environment for etcd and kube-apiserver: the test's own,
// minus proxy settings (everything they talk to is on loopback).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return env
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
	if p == nil {
		return
	}
	if !p.exited() {
		// The group id is the child's pid (Setpgid with Pgid 0).
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	<-p.done
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Live clusters, stopped by the signal handler.
var (
	liveMu      sync.Mutex
	live        = map[*Cluster]struct{}{}
	handlerOnce sync.Once
)

func register(c *Cluster) {
	handlerOnce.Do(installSignalHandler)
	liveMu.Lock()
	live[c] = struct{}{}
	liveMu.Unlock()
}

func unregister(c *Cluster) {
	liveMu.Lock()
	delete(live, c)
	liveMu.Unlock()
}

// installSignalHandler stops every live cluster (killing its processes and
// removing its files) on SIGINT or SIGTERM, then lets the signal take its
// default course so the test binary still dies of it.
func installSignalHandler() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-ch
		liveMu.Lock()
		cs := make([]*Cluster, 0, len(live))
		for c := range live {
			cs = append(cs, c)
		}
		liveMu.Unlock()
		for _, c := range cs {
			_ = c.Stop()
		}
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

// workRoot is the folder under which every cluster keeps its files, in a
// subfolder named "<pid of the test binary>-<random>".
func workRoot() string {
	return filepath.Join(os.TempDir(), "vmmigration-testcluster")
}

// newWorkDir creates this cluster's folder, after removing the folders of
// test binaries that died without cleaning up (SIGKILL leaves no chance to).
func newWorkDir() (string, error) {
	root := workRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	reapStale(root)
	return os.MkdirTemp(root, strconv.Itoa(os.Getpid())+"-")
}

// reapStale removes the folders under root whose owning process is gone.
func reapStale(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
}

// processAlive reports whether pid is a running (not zombie) process.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// Format: pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
