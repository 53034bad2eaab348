package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// assertGone waits up to 5s for the processes to be gone and the ports to be
// free.
func assertGone(t *testing.T, pids []int, ports []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for _, pid := range pids {
			if processAlive(pid) {
				left = append(left, fmt.Sprintf("pid %d alive", pid))
			}
		}
		for _, port := range ports {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				left = append(left, fmt.Sprintf("port %d busy: %v", port, err))
				continue
			}
			_ = l.Close()
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %s", strings.Join(left, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStopLeavesNothing(t *testing.T) {
	c, err := Start(t.Context(), Options{NoCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{c.etcd.pid, c.api.pid}
	etcdClient, etcdPeer := c.EtcdPorts()
	ports := []int{etcdClient, etcdPeer, c.APIServerPort()}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, pids, ports)
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster folder %s still there (stat: %v)", c.Dir(), err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// startChild runs the test binary as a child that starts a cluster, and
// returns it with the report it printed.
func startChild(t *testing.T) (*exec.Cmd, childReport) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "{") {
				lines <- s.Text()
				return
			}
		}
		close(lines)
	}()
	var rep childReport
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("child exited without starting a cluster")
		}
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("child did not start a cluster within 90s")
	}
	for _, pid := range []int{rep.EtcdPID, rep.APIServerPID} {
		if !processAlive(pid) {
			t.Fatalf("child's process %d is not running", pid)
		}
	}
	return cmd, rep
}

// TestKilledTestBinaryLeavesNoProcess SIGKILLs a test binary holding a
// cluster: Pdeathsig must take etcd and kube-apiserver with it, and the next
// cluster start must remove the orphaned folder.
func TestKilledTestBinaryLeavesNoProcess(t *testing.T) {
	cmd, rep := startChild(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertGone(t, []int{rep.EtcdPID, rep.APIServerPID}, rep.Ports)

	if _, err := os.Stat(rep.Dir); err != nil {
		t.Fatalf("expected the killed child's folder to be left for reaping: %v", err)
	}
	reapStale(filepath.Dir(rep.Dir))
	if _, err := os.Stat(rep.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphaned folder %s not reaped (stat: %v)", rep.Dir, err)
	}
}

// TestInterruptedTestBinaryCleansUp sends SIGTERM (as a CI runner or ^C
// would): the handler stops the cluster, removes its folder, and the test
// binary still dies of the signal.
func TestInterruptedTestBinaryCleansUp(t *testing.T) {
	cmd, rep := startChild(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("child exit: %v, want death by SIGTERM", err)
	}
	if ws := exitErr.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("child exit status %v, want death by SIGTERM", ws)
	}
	assertGone(t, []int{rep.EtcdPID, rep.APIServerPID}, rep.Ports)
	if _, err := os.Stat(rep.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder %s not removed on SIGTERM (stat: %v)", rep.Dir, err)
	}
}

func TestRestartAPIServer(t *testing.T) {
	c := StartT(t, Options{NoCRDs: true})
	ctx := t.Context()
	cl := c.AdminClient()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"},
		Data:       map[string]string{"k": "v"},
	}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	port := c.APIServerPort()

	c.StopAPIServer()
	err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Get with the API server down: %v, want connection refused", err)
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if c.APIServerPort() != port {
		t.Errorf("port changed from %d to %d", port, c.APIServerPort())
	}
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	got := &corev1.ConfigMap{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatalf("Get after restart with the same client: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("data after restart = %v, want k=v", got.Data)
	}
}

func TestStartFailsClearlyWithoutBinaries(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(context.Background(), Options{BinDir: dir})
	if err == nil {
		t.Fatal("Start succeeded without binaries")
	}
	for _, want := range []string{
		"etcd is missing (no " + filepath.Join(dir, "etcd") + ")",
		"kube-apiserver is missing (no " + filepath.Join(dir, "kube-apiserver") + ")",
		`"make testbin"`,
		EnvTestBin,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}

	// A binary stamped with another version is refused.
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver.version"), []byte("v1.30.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvTestBin, dir)
	_, err = findBinaries("", false)
	want := fmt.Sprintf("%s is v1.30.0, want %s", filepath.Join(dir, "kube-apiserver"), KubeAPIServerVersion)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "$"+EnvTestBin) {
		t.Errorf("findBinaries = %v, want an error containing %q and naming $%s", err, want, EnvTestBin)
	}
}
