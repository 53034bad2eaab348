package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/childproc"
)

// process is a child process (etcd or kube-apiserver) tied to the lifetime
// of the test binary (see package childproc: Pdeathsig from a locked
// thread, its own process group), with its output in a log file.
type process struct {
	*childproc.Process
	name    string
	pid     int
	logPath string
	err     error // the child's exit, valid once it exited
}

// startProcess starts path with args, stdout and stderr appended to logPath.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cp, err := childproc.Start(path, args, childEnv(), logFile, logFile)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		<-cp.Done()
		logFile.Close()
	}()
	return &process{Process: cp, name: name, pid: cp.Pid(), logPath: logPath}, nil
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

// exited reports whether the process has exited, and records how.
func (p *process) exited() bool {
	if !p.Exited() {
		return false
	}
	p.err = p.Err()
	return true
}

// kill SIGKILLs the process group and waits until the child is reaped.
func (p *process) kill() {
	if p == nil {
		return
	}
	p.Kill()
	p.err = p.Err()
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

// startFailure says why p exited while it was being started, with the
// last lines of its log (errAddrInUse when its port was taken); nil
// while it runs.
func (p *process) startFailure() error {
	if !p.exited() {
		return nil
	}
	tail := p.logTail(30)
	err := fmt.Errorf("testcluster: %s exited during start (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w: %w", errAddrInUse, err)
	}
	return err
}

// startCPU is how much CPU a component may use on its way to ready before
// the wait for it gives up. A start takes a few CPU seconds on an idle or
// a busy machine alike (a busy one spreads them over more wall time), so
// the wait is bounded by what the component did, not by the clock.
const startCPU = 2 * time.Minute

// startBudget is ctx, also ended once p has used startCPU of CPU time.
func (p *process) startBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if used := p.CPUTime(); used >= startCPU {
					cancel(fmt.Errorf("%s used %s of CPU without becoming ready", p.name, used.Round(time.Second)))
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}
