package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/clusterjob"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/convert"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/podrun"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// Cluster execution in the benchmark: with -worker, the cluster role also
// runs the real kube-controller-manager and kube-scheduler, provisions the
// claims of claimsClass itself (kubesim.Provisioner), and is the node
// (podrun) that runs the Jobs' pods with the worker binary as workerImage.
// The workers are the cluster role's children: their CPU and memory are
// not the runner's, as on a real cluster.
const (
	claimsClass = "claims"
	workerImage = "registry.example/vmmigration-worker@sha256:0000000000000000000000000000000000000000000000000000000000000000"
)

// startJobs starts the node that runs the Jobs' pods.
func startJobs(ctx context.Context, c *testcluster.Cluster, worker string) (*podrun.Runner, error) {
	return podrun.Start(ctx, podrun.Options{Config: c.RESTConfig(), Images: map[string]string{workerImage: worker}})
}

// claimAnswer answers "claim <DataVolume>": the SHA-256 of its claim's
// disk.img as the copy Jobs left it.
func claimAnswer(sim *kubesim.Sim, dv string) string {
	if strings.ContainsAny(dv, "/ ") || dv == "" {
		return fmt.Sprintf("ERR bad DataVolume %q", dv)
	}
	sum, err := convert.FileSHA256(sim.ReceivedPath(namespace, dv))
	if err != nil {
		return "ERR " + err.Error()
	}
	return "OK " + sum
}

// runnerIO is what the runner process read and wrote through read and
// write calls (files and sockets: the SSH sessions, the API server, the
// upload proxy), from /proc/self/io.
func runnerIO() (read, written int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case !ok:
		case k == "rchar":
			read = n
		case k == "wchar":
			written = n
		}
	}
	return read, written
}

// resetPeakRSS gives the heap back to the system and starts the kernel's
// peak RSS (VmHWM) again from the current RSS, so that peakRSS then is
// the peak of what follows (Linux clear_refs 5).
func resetPeakRSS() {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is VmHWM from /proc/self/status, in bytes.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n * 1024
		}
	}
	return 0
}

// copyPodSampler counts, every interval, the copy Jobs' pods that run in
// the cluster, per ESXi host (hostOf maps a migration's name to its
// host), and keeps the most seen at once: the cluster-wide per-host
// limit observed in the cluster, not in the runner.
type copyPodSampler struct {
	mu   sync.Mutex
	max  map[string]int
	errs int
	stop func()
	done chan struct{}
}

func sampleCopyPods(ctx context.Context, kc *kube.Client, hostOf map[string]string, interval time.Duration) *copyPodSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &copyPodSampler{max: map[string]int{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pods, err := kc.ListPods(ctx, namespace, map[string]string{clusterjob.LabelComponent: clusterjob.ComponentCopy})
			now := map[string]int{}
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning {
					now[hostOf[p.Labels[kube.LabelMigration]]]++
				}
			}
			s.mu.Lock()
			if err != nil && ctx.Err() == nil {
				s.errs++
			}
			for h, n := range now {
				s.max[h] = max(s.max[h], n)
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// samplerCommand answers the cluster role's "sample-pods start <JSON of
// migration -> host>" and "sample-pods stop" (then "OK <JSON of host ->
// most copy pods running at once> <failed samples>").
func samplerCommand(ctx context.Context, c *testcluster.Cluster, sampler **copyPodSampler, cmd string) string {
	if arg, ok := strings.CutPrefix(cmd, "start "); ok {
		var hostOf map[string]string
		if err := json.Unmarshal([]byte(arg), &hostOf); err != nil {
			return "ERR " + err.Error()
		}
		if *sampler != nil {
			(*sampler).finish()
		}
		*sampler = sampleCopyPods(ctx, kube.NewForRESTConfig(c.RESTConfig()), hostOf, 250*time.Millisecond)
		return "OK"
	}
	if cmd != "stop" || *sampler == nil {
		return fmt.Sprintf("ERR sample-pods %q", cmd)
	}
	most, errs := (*sampler).finish()
	*sampler = nil
	b, err := json.Marshal(most)
	if err != nil {
		return "ERR " + err.Error()
	}
	return fmt.Sprintf("OK %s %d", b, errs)
}

// finish stops sampling and returns the most copy pods seen running at
// once per host.
func (s *copyPodSampler) finish() (map[string]int, int) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.errs
}

// modeWave is one wave of migrations in one execution: what the runner
// spent on it.
type modeWave struct {
	execution string
	vms       int
	bytes     int64
	wall      time.Duration
	cpu       time.Duration
	read      int64
	written   int64
	peakRSS   int64
	// perHost is the most migrations (local) or copy pods (cluster) seen
	// at once per host.
	perHost map[string]int
}

// runModeWave migrates the VMs of vms (name -> host) at once with en in
// execution exec and measures the runner.
func runModeWave(ctx context.Context, en *engine.Engine, kc *kube.Client, cluster *child, hostCPU func() time.Duration,
	spec func(vm string) engine.Spec, exec string, vms map[string]string, sizes map[string]int64) (modeWave, error) {
	names := make([]string, 0, len(vms))
	for n := range vms {
		names = append(names, n)
	}
	sort.Strings(names)
	w := modeWave{execution: exec, vms: len(names)}
	for _, n := range names {
		w.bytes += sizes[n]
	}
	sampling := exec == engine.ExecutionCluster
	if sampling {
		b, err := json.Marshal(vms)
		if err != nil {
			return modeWave{}, err
		}
		if _, err := cluster.ask("sample-pods start " + string(b)); err != nil {
			return modeWave{}, fmt.Errorf("sampling the copy pods: %w", err)
		}
	}
	resetPeakRSS()
	r0, w0 := runnerIO()
	u0 := getUsage()
	start := time.Now()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := spec(n)
			s.Host = vms[n]
			s.Execution = exec
			if exec == engine.ExecutionCluster {
				s.StorageClass = claimsClass
			}
			_, errs[i] = measure(ctx, en, cluster, hostCPU, s)
		}()
	}
	wg.Wait()
	w.wall = time.Since(start)
	w.cpu = getUsage().cpu - u0.cpu
	r1, w1 := runnerIO()
	w.read, w.written = r1-r0, w1-w0
	w.peakRSS = peakRSS()
	if sampling {
		got, err := cluster.ask("sample-pods stop")
		if err != nil || len(got) != 2 {
			return w, fmt.Errorf("the copy pods' samples: %v %w", got, err)
		}
		if err := json.Unmarshal([]byte(got[0]), &w.perHost); err != nil {
			return w, fmt.Errorf("the copy pods' samples %q: %w", got[0], err)
		}
		if got[1] != "0" {
			fmt.Printf("   (%s samples of the copy pods failed)\n", got[1])
		}
	} else {
		w.perHost = map[string]int{}
		for _, h := range vms {
			w.perHost[h] = en.MaxConcurrent(h)
		}
	}
	return w, errors.Join(errs...)
}

// jobsRun is what runJobs needs of run.
type jobsRun struct {
	en       *engine.Engine
	kc       *kube.Client
	cluster  *child
	hostCPU  func() time.Duration
	spec     func(vm string) engine.Spec
	lay      layout
	hosts    []string
	catRates []float64
	// waveProfile, if set, gets the runner's CPU profile of the cluster
	// execution wave.
	waveProfile string
	linkRate    float64
	root        string
	events      func() []engine.Event
	// hook adds a function that sees every event; write has the guest of
	// a VM write n bytes.
	hook  func(func(engine.Event))
	write func(vm string, n int64) error
}

// runJobs migrates "cluster-cold" in cluster execution and the two waves
// (local, then cluster), and prints what they measured against the goals:
// the dense disk's copy against `ssh cat`, the cold downtime against the
// link, and the runner's CPU, memory and bytes in cluster execution
// against local execution's.
func runJobs(ctx context.Context, j jobsRun) error {
	GiB := float64(1 << 30)
	fmt.Println()
	fmt.Println("== cold migration of \"cluster-cold\" in cluster execution: copy Jobs write the claims, the runner decides and observes")
	vm, ok := j.lay.vm("cluster-cold")
	if !ok {
		return errors.New("no cluster-cold VM in the layout")
	}
	s := j.spec(vm.Name)
	s.Execution, s.StorageClass = engine.ExecutionCluster, claimsClass
	dropPageCache(j.root, vm.Name)
	resetPeakRSS()
	r0, w0 := runnerIO()
	cold, err := measure(ctx, j.en, j.cluster, j.hostCPU, s)
	if err != nil {
		return err
	}
	r1, w1 := runnerIO()
	coldPeak := peakRSS()
	warm, warmed, err := runClusterWarm(ctx, j)
	if err != nil {
		return err
	}

	var local, cluster modeWave
	var wl, wc map[string]string
	sizes := map[string]int64{}
	for _, v := range j.lay.VMs {
		sizes[v.Name] = v.allocated()
		var i int
		if _, err := fmt.Sscanf(v.Name, "wl-%d", &i); err == nil {
			if wl == nil {
				wl = map[string]string{}
			}
			wl[v.Name] = j.hosts[i%len(j.hosts)]
		} else if _, err := fmt.Sscanf(v.Name, "wc-%d", &i); err == nil {
			if wc == nil {
				wc = map[string]string{}
			}
			wc[v.Name] = j.hosts[i%len(j.hosts)]
		}
	}
	if len(wl) > 0 {
		fmt.Printf("== a wave of %d VMs from %d hosts in local execution, then %d more in cluster execution (2 migrations at once per host)\n",
			len(wl), len(j.hosts), len(wc))
		dropPageCache(j.root, keys(wl)...)
		if local, err = runModeWave(ctx, j.en, j.kc, j.cluster, j.hostCPU, j.spec, engine.ExecutionLocal, wl, sizes); err != nil {
			return err
		}
		dropPageCache(j.root, keys(wc)...)
		stop, err := startCPUProfile(j.waveProfile)
		if err != nil {
			return err
		}
		cluster, err = runModeWave(ctx, j.en, j.kc, j.cluster, j.hostCPU, j.spec, engine.ExecutionCluster, wc, sizes)
		stop()
		if err != nil {
			return err
		}
	}

	fmt.Println()
	fmt.Printf("cluster execution, VM \"cluster-cold\" (%.2f GiB of data): downtime %.1f s (copy %.1f s, VM created and started %.1f s)\n",
		float64(vm.allocated())/GiB, cold.downtime.Seconds(), cold.copy.Seconds(), cold.start.Seconds())
	if j.linkRate > 0 {
		ideal := float64(vm.allocated()) / j.linkRate
		goal := 1.15*ideal + 10
		fmt.Printf("   ideal (data / link rate): %.1f s; goal 1.15 x ideal + 10 s = %.1f s; cold downtime %.2f x ideal (%s the goal)\n",
			ideal, goal, cold.downtime.Seconds()/ideal, verdict(cold.downtime.Seconds() <= goal))
	}
	if len(j.catRates) == len(vm.Disks) {
		evs := j.events()
		for i, d := range vm.Disks {
			sec := firstCopyDone(evs, vm.Name, i, cold.rec)
			if sec <= 0 {
				continue
			}
			r := float64(d.Capacity) / sec
			line := fmt.Sprintf("   disk %d (%s %s) by its copy Job: %.1f s, %.1f MB/s = %.2f x `ssh cat`", i, gib(d.Capacity), d.kind(), sec, r/1e6, r/j.catRates[i])
			if !d.Thin {
				line += fmt.Sprintf(" (goal >= 0.9x: %s)", verdict(r/j.catRates[i] >= 0.9))
			}
			fmt.Println(line)
		}
	}
	fmt.Printf("   runner: CPU %.2f s, read %s and wrote %s through files and sockets (the VM has %s of data), peak RSS %.0f MiB\n",
		cold.cpu.Seconds(), gib(r1-r0), gib(w1-w0), gib(vm.allocated()), float64(coldPeak)/(1<<20))
	if warmed {
		fmt.Printf("cluster execution, VM \"cluster-warm\": downtime %.1f s (copy after power-off %.1f s, %s of it; precopy %.1f s while the VM ran, %s); warm downtime = %.0f%% of cluster-cold (goal <= 15%%: %s)\n",
			warm.downtime.Seconds(), warm.copy.Seconds(), gib(warm.rec.Warm.CutoverBytes), warm.precopy.Seconds(), gib(warm.precopyBytes),
			100*warm.downtime.Seconds()/cold.downtime.Seconds(), verdict(warm.downtime.Seconds() <= 0.15*cold.downtime.Seconds()))
	}
	if local.vms == 0 {
		return nil
	}
	fmt.Println()
	fmt.Printf("wave of %d VMs per execution from %d hosts, %s of data each wave; the runner's share:\n", local.vms, len(j.hosts), gib(local.bytes))
	fmt.Printf("%-10s %9s %9s %14s %14s %9s   %s\n", "execution", "wall", "CPU", "read", "written", "peak RSS", "most at once per host")
	for _, w := range []modeWave{local, cluster} {
		what := "migrations"
		if w.execution == engine.ExecutionCluster {
			what = "copy pods running"
		}
		var per []string
		for _, h := range j.hosts {
			per = append(per, fmt.Sprintf("%s %d", h, w.perHost[h]))
		}
		fmt.Printf("%-10s %8.1fs %8.1fs %14s %14s %5.0f MiB   %s: %s\n", w.execution, w.wall.Seconds(), w.cpu.Seconds(), gib(w.read), gib(w.written),
			float64(w.peakRSS)/(1<<20), what, strings.Join(per, ", "))
	}
	ratio := cluster.cpu.Seconds() / local.cpu.Seconds()
	fmt.Printf("cluster execution's runner CPU = %.1f%% of local's (goal <= 5%%: %s); peak RSS %.0f MiB (goal <= 150 MiB: %s)\n",
		100*ratio, verdict(ratio <= 0.05), float64(cluster.peakRSS)/(1<<20), verdict(cluster.peakRSS <= 150<<20))
	fmt.Printf("cluster execution's runner read %s in all for %s of disk data: %.2f%% (disk bytes pass through the copy Jobs, not the runner)\n",
		gib(cluster.read), gib(cluster.bytes), 100*float64(cluster.read)/float64(cluster.bytes))
	for _, h := range j.hosts {
		if cluster.perHost[h] > 2 {
			fmt.Printf("host %s: %d copy pods ran at once, above max_concurrent_migrations 2: MISSES\n", h, cluster.perHost[h])
		}
	}
	return nil
}

// runClusterWarm migrates "cluster-warm" warm in cluster execution, its
// guest writing 5% of its data once the precopy's first Job copies.
func runClusterWarm(ctx context.Context, j jobsRun) (result, bool, error) {
	vm, ok := j.lay.vm("cluster-warm")
	if !ok {
		return result{}, false, nil
	}
	fmt.Println("== warm migration of \"cluster-warm\" in cluster execution: its guest writes 5% of its data during the precopy")
	s := j.spec(vm.Name)
	s.Execution, s.StorageClass, s.Mode = engine.ExecutionCluster, claimsClass, engine.ModeWarm
	// From the first precopy Job's creation (after the round's snapshot,
	// so into its delta): a small VM's Job may end before any progress.
	guest := newPrecopyWriter(vm.Name, func(ev engine.Event) bool {
		return ev.Phase == record.PhasePreparing && (ev.Kind == engine.EventProgress || strings.Contains(ev.Message, "copy Job"))
	}, func() error { return j.write(vm.Name, vm.allocated()/20) })
	j.hook(guest.hook)
	dropPageCache(j.root, vm.Name)
	warm, err := measure(ctx, j.en, j.cluster, j.hostCPU, s)
	if err != nil {
		return result{}, false, err
	}
	if err := guest.result(); err != nil {
		return result{}, false, err
	}
	if warm.rec.Warm == nil || len(warm.rec.Warm.Snapshots) == 0 {
		return result{}, false, errors.New("the warm migration in cluster execution took no precopy round")
	}
	return warm, true, nil
}

// firstCopyDone is how long the copy of one disk took: from the source's
// power-off to the first report of all its bytes copied (in cluster
// execution read from the worker's log; the Job's end is observed later).
func firstCopyDone(events []engine.Event, name string, disk int, rec record.Record) float64 {
	if rec.Timestamps.SourcePoweredOff == nil {
		return 0
	}
	for _, ev := range events {
		if ev.Name == name && ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing &&
			ev.Disk == disk && ev.Transfer.Kind == engine.TransferCopy && ev.BytesTotal > 0 && ev.BytesDone == ev.BytesTotal {
			return ev.Time.Sub(*rec.Timestamps.SourcePoweredOff).Seconds()
		}
	}
	return 0
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// vm is the layout's VM of that name.
func (l layout) vm(name string) (vmLayout, bool) {
	for _, v := range l.VMs {
		if v.Name == name {
			return v, true
		}
	}
	return vmLayout{}, false
}

// startCPUProfile starts the process's CPU profile into file (nothing
// without one); stop ends it.
func startCPUProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
