// Command migrate is the whole-VM part of `make bench`: it migrates VMs
// with the provider's engine from a host behind a shaped link into a real
// kube-apiserver with the simulated KubeVirt and CDI, and prints downtime
// and its parts, as ratios to what the link allows, from the same run.
//
// The host is a real OpenSSH sshd (-sshd), started by scripts/bench.sh in
// its network namespace and chrooted into a tree laid out like ESXi's:
// the provider's logins, execs, shell, cat, dd, stat and /bin/python are
// real, and read the datastore files the simulator wrote into the chroot's
// /vmfs/volumes. Only the ESXi control commands are not: the chroot's
// vim-cmd and vmware are scripts/bench/esxitool, which hands each command
// line to the simulator over a Unix socket, so that power state, the
// inventory and snapshots stay the simulator's. The simulator's own SSH
// server migrates one more VM, "sim-cold", reported on a line of its own
// for comparison. Without -sshd (the smoke test) every migration runs
// against the simulator's SSH server.
//
// It runs as three processes so that each one's CPU and memory are its own:
//
//	migrate host    the ESXi host's state: the simulator, which writes the
//	                VMs' files, answers esxitool on a Unix socket and serves
//	                its own SSH server, started by "run" inside the
//	                benchmark's network namespace (behind the tbf link);
//	migrate cluster kube-apiserver, etcd and the simulated controllers;
//	migrate run     the provider's engine, which starts the other two and
//	                measures.
//
// scripts/bench.sh builds the namespace, the link and the real sshd and
// calls "run".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kubesim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/transfer"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
	"golang.org/x/crypto/ssh"
)

const (
	hostName = "bench"
	// simHostName is the simulator's own SSH server when a real sshd is
	// the bench's host.
	simHostName  = "bench-sim"
	namespace    = "bench"
	storageClass = "standard"
	password     = "bench-Pa55word"
	datastore    = "datastore1"
	// grain is the unit of the guest's writes during a warm precopy.
	grain = 64 << 10
)

// layout is the benchmark's VMs, as the host creates them.
type layout struct {
	VMs []vmLayout `json:"vms"`
}

type vmLayout struct {
	Name  string       `json:"name"`
	Disks []diskLayout `json:"disks"`
}

// diskLayout is a dense disk (Runs 0: data everywhere) or a thin one with
// Runs runs of RunBytes of data spread evenly.
type diskLayout struct {
	Capacity int64  `json:"capacity"`
	Thin     bool   `json:"thin"`
	Runs     int    `json:"runs"`
	RunBytes int64  `json:"runBytes"`
	Seed     uint64 `json:"seed"`
}

func (d diskLayout) extents() []esxisim.Extent {
	if !d.Thin {
		return []esxisim.Extent{{Offset: 0, Length: d.Capacity, Seed: d.Seed}}
	}
	var ex []esxisim.Extent
	stride := d.Capacity / int64(d.Runs)
	for i := 0; i < d.Runs; i++ {
		ex = append(ex, esxisim.Extent{Offset: int64(i) * stride, Length: d.RunBytes, Seed: d.Seed + uint64(i)})
	}
	return ex
}

// kind says "dense", or "thin, <its data> of data".
func (d diskLayout) kind() string {
	if !d.Thin {
		return "dense"
	}
	return "thin, " + gib(d.allocated()) + " of data"
}

func (d diskLayout) allocated() int64 {
	var n int64
	for _, e := range d.extents() {
		n += e.Length
	}
	return n
}

func (v vmLayout) allocated() int64 {
	var n int64
	for _, d := range v.Disks {
		n += d.allocated()
	}
	return n
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: migrate host|cluster|run [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "host":
		err = hostMain(os.Args[2:])
	case "cluster":
		err = clusterMain(os.Args[2:])
	case "run":
		err = runMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown role %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "migrate %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// hostMain serves the VMs of -layout from -root on -listen, prints
// "READY <fingerprint>", then answers commands on stdin until it closes.
// With -control it also answers scripts/bench/esxitool (the vim-cmd and
// vmware of a real sshd's chroot) on that Unix socket, and with
// -inventory it writes the host's vmInventory.xml there, for the real
// sshd's cat. Commands on stdin:
//
//	write <vm> <bytes>   the running guest writes <bytes> of new data in
//	                     64 KiB blocks spread over its disks' data
//	controls             how many command lines esxitool handed over
func hostMain(args []string) error {
	fl := flag.NewFlagSet("host", flag.ContinueOnError)
	root := fl.String("root", "", "directory served as /vmfs/volumes")
	listen := fl.String("listen", "", "address to listen on")
	layoutFile := fl.String("layout", "", "the VMs (JSON)")
	control := fl.String("control", "", "Unix socket answering esxitool's command lines")
	inventory := fl.String("inventory", "", "file to write the host's vmInventory.xml to")
	if err := fl.Parse(args); err != nil {
		return err
	}
	var lay layout
	b, err := os.ReadFile(*layoutFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &lay); err != nil {
		return err
	}
	key, err := esxisim.GenerateHostKey(esxisim.KeyECDSA)
	if err != nil {
		return err
	}
	s, err := esxisim.New(esxisim.Options{Root: *root, Users: []esxisim.User{{Name: "root", Password: password}},
		HostKey: key, ShutdownDelay: time.Second})
	if err != nil {
		return err
	}
	s.SetPython(esxisim.HostPython()) // ESXi 7 and 8 have /bin/python
	type vm struct {
		id    int
		files *esxisim.VMFiles
		l     vmLayout
	}
	vms := map[string]vm{}
	for _, v := range lay.VMs {
		spec := esxisim.VMSpec{Datastore: datastore, Name: v.Name, GuestOS: "rhel9-64",
			NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
			Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.7"}}
		for _, d := range v.Disks {
			spec.Disks = append(spec.Disks, esxisim.DiskSpec{CapacityBytes: d.Capacity, Thin: d.Thin, Content: d.extents()})
		}
		id, files, err := s.AddVM(spec)
		if err != nil {
			return fmt.Errorf("VM %s: %w", v.Name, err)
		}
		vms[v.Name] = vm{id: id, files: files, l: v}
	}
	if err := s.Start(*listen); err != nil {
		return err
	}
	defer s.Close()
	if *inventory != "" {
		if err := os.WriteFile(*inventory, []byte(s.InventoryXML()), 0o644); err != nil {
			return err
		}
	}
	if *control != "" {
		_ = os.Remove(*control)
		ln, err := net.Listen("unix", *control)
		if err != nil {
			return err
		}
		defer ln.Close()
		go serveControl(s, ln)
	}
	fmt.Printf("READY %s\n", s.Fingerprint())
	in := bufio.NewScanner(os.Stdin)
	rng := rand.New(rand.NewPCG(1, 2))
	for in.Scan() {
		f := strings.Fields(in.Text())
		if in.Text() == "controls" {
			fmt.Printf("OK %d\n", controlCommands.Load())
			continue
		}
		if len(f) != 3 || f[0] != "write" {
			fmt.Printf("ERR unknown command %q\n", in.Text())
			continue
		}
		v, ok := vms[f[1]]
		n, err := strconv.ParseInt(f[2], 10, 64)
		if !ok || err != nil || n < 0 {
			fmt.Printf("ERR bad write %q\n", in.Text())
			continue
		}
		if err := guestWrites(s, rng, v.id, v.files, v.l, n); err != nil {
			fmt.Printf("ERR %v\n", err)
			continue
		}
		fmt.Println("OK")
	}
	return in.Err()
}

// guestWrites writes n bytes in grain-sized blocks at random places of the
// VM's data, each disk in proportion to its data, in one batch per disk.
func guestWrites(s *esxisim.Server, rng *rand.Rand, id int, files *esxisim.VMFiles, l vmLayout, n int64) error {
	total := l.allocated()
	for i, d := range l.Disks {
		blocks := n * d.allocated() / total / grain
		ex := d.extents()
		var batch []vmdk.Write
		for b := int64(0); b < blocks; b++ {
			e := ex[rng.IntN(len(ex))]
			off := e.Offset + rng.Int64N(max(e.Length/grain, 1))*grain
			buf := make([]byte, min(grain, d.Capacity-off))
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			batch = append(batch, vmdk.Write{Offset: off, Data: buf})
		}
		if err := s.GuestWrites(id, files.Disks[i].Controller, batch); err != nil {
			return err
		}
	}
	return nil
}

// clusterInfo is what "cluster" tells "run".
type clusterInfo struct {
	Kubeconfig string `json:"kubeconfig"`
	Context    string `json:"context"`
	ProxyURL   string `json:"proxyURL"`
	ProxyCA    string `json:"proxyCA"`
	ProxyName  string `json:"proxyServerName"`
}

// clusterMain starts the cluster and the simulated controllers, prints
// "READY <json>", and stops everything when stdin closes.
func clusterMain(args []string) error {
	fl := flag.NewFlagSet("cluster", flag.ContinueOnError)
	dir := fl.String("dir", "", "working directory")
	worker := fl.String("worker", "", "the worker binary: run the controllers and a node for cluster execution's Jobs")
	if err := fl.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := testcluster.Start(ctx, testcluster.Options{Controllers: *worker != ""})
	if err != nil {
		return err
	}
	defer c.Stop()
	kc := filepath.Join(*dir, "kubeconfig")
	if err := c.WriteKubeconfig(kc); err != nil {
		return err
	}
	cl := c.AdminClient()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	if err := cl.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: "kubevirt.io.hostpath-provisioner"}); err != nil {
		return err
	}
	sim, err := kubesim.Start(ctx, kubesim.Options{Cluster: c, Namespaces: []string{namespace}, Dir: filepath.Join(*dir, "cdi"),
		ProvisionVolumes: *worker != ""})
	if err != nil {
		return err
	}
	defer sim.Stop()
	if *worker != "" {
		if err := cl.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: claimsClass}, Provisioner: kubesim.Provisioner}); err != nil {
			return err
		}
		node, err := startJobs(ctx, c, *worker)
		if err != nil {
			return err
		}
		defer node.Stop()
	}
	b, err := json.Marshal(clusterInfo{Kubeconfig: kc, Context: testcluster.ContextName, ProxyURL: sim.UploadProxyURL(), ProxyCA: string(sim.UploadProxyCACertPEM()),
		ProxyName: sim.UploadProxyServerName()})
	if err != nil {
		return err
	}
	fmt.Printf("READY %s\n", b)
	// "received <DataVolume>" answers with what the simulated CDI wrote to
	// the claim: the SHA-256 of its content and the bytes that arrived.
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	var sampler *copyPodSampler
	for in.Scan() {
		if dv, ok := strings.CutPrefix(in.Text(), "claim "); ok {
			fmt.Println(claimAnswer(sim, dv))
			continue
		}
		if cmd, ok := strings.CutPrefix(in.Text(), "sample-pods "); ok {
			// The copy pods are counted here, in the cluster's process,
			// so that the sampling's CPU is not counted as the runner's.
			fmt.Println(samplerCommand(ctx, c, &sampler, cmd))
			continue
		}
		dv, ok := strings.CutPrefix(in.Text(), "received ")
		r, got := sim.ReceivedImage(namespace, dv)
		if !ok || !got {
			fmt.Printf("ERR nothing received for %q\n", in.Text())
			continue
		}
		fmt.Printf("OK %s %d\n", r.SHA256, r.SentBytes)
	}
	return in.Err()
}

// child is a started role that said READY.
type child struct {
	mu    sync.Mutex
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	ready string
}

func startChild(ctx context.Context, name string, args ...string) (*child, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(make([]byte, 1<<20), 1<<20)
	for c.out.Scan() {
		if r, ok := strings.CutPrefix(c.out.Text(), "READY "); ok {
			c.ready = r
			return c, nil
		}
		fmt.Println(c.out.Text())
	}
	_ = cmd.Wait()
	return nil, fmt.Errorf("%s %s ended before it was ready", name, strings.Join(args, " "))
}

// ask sends a command and returns the words of its answer after "OK".
func (c *child) ask(line string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		return nil, err
	}
	if !c.out.Scan() {
		return nil, errors.New("no answer")
	}
	f := strings.Fields(c.out.Text())
	if len(f) == 0 || f[0] != "OK" {
		return nil, errors.New(c.out.Text())
	}
	return f[1:], nil
}

func (c *child) stop() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// procCPU is the CPU time of process pid and its reaped children (the
// host's python readers), from /proc.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// treeCPU is the CPU time of process pid and of every process under it,
// living or reaped, from /proc: a real sshd's connections, their shells
// and what those ran.
func treeCPU(pid int) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	kids := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		kids[ppid] = append(kids[ppid], p)
	}
	var total time.Duration
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], kids[p]...)
		total += procCPU(p)
	}
	return total
}

// usage is this process's CPU time (its own and its reaped children's,
// qemu-img included) and peak RSS.
type usage struct {
	cpu    time.Duration
	maxRSS int64
}

func getUsage() usage {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return usage{cpu: tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime), maxRSS: self.Maxrss * 1024}
}

type runFlags struct {
	work, root, listen, netnsExec, sshCat string
	smoke                                 bool
	wave                                  int
	// worker is the worker binary for cluster execution's Jobs (none:
	// local execution only); modeWave the VMs of the wave migrated in
	// each execution.
	worker                                     string
	modeWave                                   int
	cpuProfile, warmCPUProfile, waveCPUProfile string
	// The real sshd playing the host: its address, the client's private
	// key, its host public key (pinned), its pid (for its CPU time) and its
	// chroot (for the control socket and vmInventory.xml).
	sshd, sshdKey, sshdHostKey, chroot string
	sshdPID                            int
	onlyCluster                        bool
}

func runMain(args []string) error {
	var f runFlags
	fl := flag.NewFlagSet("run", flag.ContinueOnError)
	fl.StringVar(&f.work, "work", "", "working directory")
	fl.StringVar(&f.root, "root", "", "directory the host serves as /vmfs/volumes")
	fl.StringVar(&f.listen, "listen", "", "host address:port (inside the namespace)")
	fl.StringVar(&f.netnsExec, "netns-exec", "", "command prefix that runs the host inside the namespace (\"ip netns exec NAME\")")
	fl.StringVar(&f.sshCat, "ssh-cat", "", "ssh command line (without the remote command) for the `ssh cat` baseline")
	fl.BoolVar(&f.smoke, "smoke", false, "tiny disks")
	fl.IntVar(&f.wave, "wave", 4, "VMs in the wave")
	fl.StringVar(&f.worker, "worker", "", "the worker binary (cmd/vmmigration-worker): also migrate in cluster execution, its Jobs run by a simulated node")
	fl.IntVar(&f.modeWave, "mode-wave", 40, "with -worker, VMs of the wave migrated in each execution, local then cluster, spread over the hosts")
	fl.BoolVar(&f.onlyCluster, "only-cluster", false, "with -worker, migrate only in cluster execution (after the `ssh cat` baseline): its cold and warm VMs and its wave")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the provider's CPU profile of the cold migration to this file")
	fl.StringVar(&f.waveCPUProfile, "wave-cpuprofile", "", "with -worker, write the runner's CPU profile of the cluster execution wave to this file")
	fl.StringVar(&f.warmCPUProfile, "warm-cpuprofile", "", "write the provider's CPU profile of the warm migration's cutover (from the power-off) to this file")
	fl.StringVar(&f.sshd, "sshd", "", "address:port of a real sshd serving -root as /vmfs/volumes (the migrations' host; the simulator's own SSH server then migrates only \"sim-cold\")")
	fl.StringVar(&f.sshdKey, "sshd-key", "", "the real sshd's client private key (OpenSSH or PEM)")
	fl.StringVar(&f.sshdHostKey, "sshd-host-key", "", "the real sshd's host public key, pinned by its fingerprint")
	fl.IntVar(&f.sshdPID, "sshd-pid", 0, "the real sshd's pid: its processes' CPU time is the host's")
	fl.StringVar(&f.chroot, "chroot", "", "the real sshd's chroot: the host's control socket (/var/run/esxisim.sock) and /etc/vmware/hostd/vmInventory.xml go there")
	if err := fl.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, f)
}

// The VMs: "cold" and "warm" are the benchmark's VM (a 2 GiB dense disk and an
// 8 GiB thin disk with 512 MiB of data in 64 runs); the wave's VMs each
// have a 512 MiB dense disk and an 8 GiB thin disk with 5% data. With
// simCold, "sim-cold", last, is the benchmark's VM again, migrated from
// the simulator's own SSH server for comparison. With jobs, "cluster-cold"
// and "cluster-warm" are the benchmark's VM again, migrated in cluster
// execution cold and warm, and the
// local and cluster waves' VMs ("wl-N", "wc-N") each have a 16 MiB dense
// disk and a 256 MiB thin disk with 5% data.
func benchLayout(smoke bool, wave int, simCold, jobs bool, modeWave int) layout {
	MiB := int64(1 << 20)
	dense, thin, runLen, waveDense, waveRun := 2048*MiB, 8192*MiB, 8*MiB, 512*MiB, thinFivePercent(8192*MiB)
	if smoke {
		dense, thin, runLen, waveDense, waveRun = 16*MiB, 256*MiB, 64<<10, 4*MiB, thinFivePercent(64*MiB)
	}
	vm := func(name string, seed uint64, dense, thin, run int64) vmLayout {
		return vmLayout{Name: name, Disks: []diskLayout{
			{Capacity: dense, Seed: seed},
			{Capacity: thin, Thin: true, Runs: 64, RunBytes: run, Seed: seed + 1000},
		}}
	}
	l := layout{VMs: []vmLayout{vm("cold", 1, dense, thin, runLen), vm("warm", 2, dense, thin, runLen)}}
	for i := 0; i < wave; i++ {
		l.VMs = append(l.VMs, vm(fmt.Sprintf("wave-%d", i), uint64(10+i), waveDense, thin, waveRun))
	}
	if jobs {
		l.VMs = append(l.VMs, vm("cluster-cold", 4, dense, thin, runLen), vm("cluster-warm", 5, dense, thin, runLen))
		mwDense, mwThin := 16*MiB, 256*MiB
		if smoke {
			mwDense, mwThin = 2*MiB, 64*MiB
		}
		for i := 0; i < modeWave; i++ {
			l.VMs = append(l.VMs, vm(fmt.Sprintf("wl-%d", i), uint64(100+i), mwDense, mwThin, thinFivePercent(mwThin)),
				vm(fmt.Sprintf("wc-%d", i), uint64(200+i), mwDense, mwThin, thinFivePercent(mwThin)))
		}
	}
	if simCold {
		l.VMs = append(l.VMs, vm("sim-cold", 3, dense, thin, runLen))
	}
	return l
}

// thinFivePercent is the run length (64 runs, 64 KiB aligned) that puts
// 5% of a thin disk's capacity in data.
func thinFivePercent(capacity int64) int64 {
	return capacity / 20 / 64 / grain * grain
}

func run(ctx context.Context, f runFlags) error {
	realSSHD := f.sshd != ""
	lay := benchLayout(f.smoke, f.wave, realSSHD, f.worker != "", f.modeWave)
	coldCache = !f.smoke
	lb, err := json.Marshal(lay)
	if err != nil {
		return err
	}
	layoutFile := filepath.Join(f.work, "layout.json")
	if err := os.WriteFile(layoutFile, lb, 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Println("== starting kube-apiserver, etcd and the simulated KubeVirt and CDI")
	if err := os.MkdirAll(filepath.Join(f.work, "cluster"), 0o755); err != nil {
		return err
	}
	clusterArgs := []string{"cluster", "-dir", filepath.Join(f.work, "cluster")}
	if f.worker != "" {
		fmt.Println("   with the real kube-controller-manager and kube-scheduler, and a node running cluster execution's Jobs")
		clusterArgs = append(clusterArgs, "-worker", f.worker)
	}
	cl, err := startChild(ctx, self, clusterArgs...)
	if err != nil {
		return err
	}
	defer cl.stop()
	var ci clusterInfo
	if err := json.Unmarshal([]byte(cl.ready), &ci); err != nil {
		return err
	}
	hostArgs := append(strings.Fields(f.netnsExec), self, "host", "-root", f.root, "-listen", f.listen, "-layout", layoutFile)
	if realSSHD {
		fmt.Printf("== writing the VMs' disks; the host is the real sshd on %s (chroot %s), its vim-cmd and vmware answered by the simulator; the simulator's own SSH server on %s serves \"sim-cold\"\n",
			f.sshd, f.chroot, f.listen)
		for _, d := range []string{"var/run", "etc/vmware/hostd"} {
			if err := os.MkdirAll(filepath.Join(f.chroot, d), 0o755); err != nil {
				return err
			}
		}
		hostArgs = append(hostArgs, "-control", filepath.Join(f.chroot, "var/run/esxisim.sock"),
			"-inventory", filepath.Join(f.chroot, "etc/vmware/hostd/vmInventory.xml"))
	} else {
		fmt.Printf("== writing the VMs' disks; the host is the simulator (no real sshd given) on %s\n", f.listen)
	}
	host, err := startChild(ctx, hostArgs[0], hostArgs[1:]...)
	if err != nil {
		return err
	}
	defer host.stop()
	// The host's CPU time: the simulator's, and with a real sshd, that of
	// sshd and every process under it (sessions, shells, cat, dd, python,
	// esxitool).
	hostPID := host.cmd.Process.Pid
	hostCPU := func() time.Duration {
		d := procCPU(hostPID)
		if realSSHD && f.sshdPID > 0 {
			d += treeCPU(f.sshdPID)
		}
		return d
	}

	reg := esxi.NewRegistry(nil)
	defer reg.Close()
	// The provider's defaults: 4 sessions, 2 streams per disk, 2
	// migrations at once per host.
	simAddr, simPortText, _ := strings.Cut(f.listen, ":")
	simPort, _ := strconv.Atoi(simPortText)
	simCfg := esxi.HostConfig{Name: hostName, Address: simAddr, Port: simPort, Password: password,
		HostKeyFingerprint: host.ready, MaxSessions: 4, StreamsPerDisk: 2}
	if realSSHD {
		cfg, err := sshdConfig(f)
		if err != nil {
			return err
		}
		if _, err := reg.Add(cfg); err != nil {
			return err
		}
		simCfg.Name = simHostName
	}
	if _, err := reg.Add(simCfg); err != nil {
		return err
	}
	kc := kube.New(kube.Config{ConfigPath: ci.Kubeconfig, ConfigContext: ci.Context})
	var (
		evMu   sync.Mutex
		events []engine.Event
		hooks  []func(engine.Event)
	)
	lastPrint := map[string]time.Time{}
	en, err := engine.New(engine.Deps{ESXi: reg, Kube: kc, HostLimits: map[string]int{hostName: 2, simHostName: 2}, WorkerImage: workerImage,
		Progress: func(ev engine.Event) {
			evMu.Lock()
			events = append(events, ev)
			hs := append([]func(engine.Event){}, hooks...)
			key := ev.Name + "/" + strconv.Itoa(ev.Disk)
			// A disk's progress every 5 s, and its last (a copy Job's
			// result with where its pod's time went).
			show := ev.Kind == engine.EventProgress && ev.RateText() != "" && (time.Since(lastPrint[key]) > 5*time.Second || ev.Percent >= 100)
			if show {
				lastPrint[key] = time.Now()
			}
			evMu.Unlock()
			// Cluster execution's steps (claims, Jobs) for its VMs, to the
			// tenth of a second: where a downtime's seconds went.
			if show || ev.Kind == engine.EventPhase || strings.HasPrefix(ev.Name, "cluster-") && ev.Kind == engine.EventInfo {
				fmt.Printf("   %s %-8s %s\n", ev.Time.Format("15:04:05.0"), ev.Name, ev.Message)
			}
			for _, h := range hs {
				h(ev)
			}
		}})
	if err != nil {
		return err
	}
	spec := func(vm string) engine.Spec {
		return engine.Spec{Host: hostName, VMName: vm, Namespace: namespace, Name: vm, StorageClass: storageClass,
			NetworkMap: map[string]string{"VM Network": "pod"}, PowerOffPolicy: "graceful", ShutdownTimeout: time.Minute,
			Conversion: engine.ConversionNone, // the disks hold generated data, not an OS
			Transport: engine.Transport{Kind: engine.TransportCDIUpload, UploadProxyURL: ci.ProxyURL, UploadProxyCAPEM: ci.ProxyCA,
				UploadProxyServerName: ci.ProxyName},
			Validation:   engine.Validation{GuestAgent: true, IPReported: true, Timeout: 2 * time.Minute},
			StartTimeout: 2 * time.Minute, WorkDir: filepath.Join(f.work, "staging", vm),
			Retry: engine.RetryPolicy{Attempts: 3, Initial: time.Second, Max: 5 * time.Second}}
	}
	catRates, err := baseline(ctx, f, lay.VMs[0])
	if err != nil {
		return err
	}
	var linkRate float64
	if len(catRates) > 0 {
		linkRate = catRates[0]
	}

	// The cluster execution part, after the local one or, with
	// -only-cluster, instead of it.
	clusterPart := func() error {
		hosts := []string{hostName}
		if realSSHD {
			hosts = append(hosts, simHostName)
		}
		return runJobs(ctx, jobsRun{en: en, kc: kc, cluster: cl, hostCPU: hostCPU, spec: spec, lay: lay, hosts: hosts, waveProfile: f.waveCPUProfile,
			hook: func(h func(engine.Event)) {
				evMu.Lock()
				hooks = append(hooks, h)
				evMu.Unlock()
			},
			write: func(vm string, n int64) error {
				_, err := host.ask(fmt.Sprintf("write %s %d", vm, n))
				return err
			},
			catRates: catRates, linkRate: linkRate, root: f.root, events: func() []engine.Event {
				evMu.Lock()
				defer evMu.Unlock()
				return slices.Clone(events)
			}})
	}
	if f.onlyCluster && f.worker != "" {
		return clusterPart()
	}

	fmt.Println("== cold migration of \"cold\"")
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	dropPageCache(f.root, "cold")
	cold, err := measure(ctx, en, cl, hostCPU, spec("cold"))
	stopProfile()
	if err != nil {
		return err
	}
	if realSSHD {
		// The provider's vim-cmd and vmware went through the real sshd's
		// esxitool, not the simulator's own SSH server.
		got, err := host.ask("controls")
		if err != nil || len(got) != 1 || got[0] == "0" {
			return fmt.Errorf("the cold migration ran no vim-cmd through the real sshd (%v %v)", got, err)
		}
		fmt.Printf("   (%s vim-cmd and vmware command lines answered through the real sshd)\n", got[0])
	}
	coldVM := lay.VMs[0]
	ideal := float64(coldVM.allocated()) / linkRate
	goal := 1.15*ideal + 10

	fmt.Println("== warm migration of \"warm\": its guest writes 5% of its data during the precopy")
	warmSpec := spec("warm")
	warmSpec.Mode = engine.ModeWarm
	// The guest writes once the precopy is under way (into the migration's
	// snapshot delta), beside the copy, not in its progress callback.
	warmGuest := newPrecopyWriter("warm", func(ev engine.Event) bool {
		return ev.Kind == engine.EventProgress && strings.HasPrefix(ev.Message, "precopy:")
	}, func() error {
		_, err := host.ask(fmt.Sprintf("write warm %d", lay.VMs[1].allocated()/20))
		return err
	})
	evMu.Lock()
	hooks = append(hooks, warmGuest.hook)
	stopWarmProfile := func() {}
	if f.warmCPUProfile != "" {
		pf, err := os.Create(f.warmCPUProfile)
		if err != nil {
			return err
		}
		var started sync.Once
		hooks = append(hooks, func(ev engine.Event) {
			if ev.Name == "warm" && strings.HasPrefix(ev.Message, "powering off source VM") {
				started.Do(func() { _ = pprof.StartCPUProfile(pf) })
			}
		})
		stopWarmProfile = func() { pprof.StopCPUProfile(); pf.Close() }
	}
	evMu.Unlock()
	dropPageCache(f.root, "warm")
	warm, err := measure(ctx, en, cl, hostCPU, warmSpec)
	stopWarmProfile()
	if err != nil {
		return err
	}
	if err := warmGuest.result(); err != nil {
		return err
	}

	fmt.Printf("== a wave of %d VMs on one host (2 migrations at once, 4 SSH sessions, 2 streams per disk)\n", f.wave)
	var waveVMs []string
	waveLay := lay.VMs[2 : 2+f.wave]
	for _, v := range waveLay {
		waveVMs = append(waveVMs, v.Name)
	}
	dropPageCache(f.root, waveVMs...)
	waveStart := time.Now()
	u0, h0 := getUsage(), hostCPU()
	var wg sync.WaitGroup
	wave := make([]result, f.wave)
	waveErr := make([]error, f.wave)
	for i := 0; i < f.wave; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wave[i], waveErr[i] = measure(ctx, en, cl, hostCPU, spec(fmt.Sprintf("wave-%d", i)))
		}()
	}
	wg.Wait()
	waveTime := time.Since(waveStart)
	waveCPU, waveHostCPU := getUsage().cpu-u0.cpu, hostCPU()-h0
	if err := errors.Join(waveErr...); err != nil {
		return err
	}
	var waveBytes int64
	for _, v := range waveLay {
		waveBytes += v.allocated()
	}

	// The same VM from the simulator's own SSH server: a second line, for
	// comparison with the host the project measured against before.
	var simCold result
	if realSSHD {
		fmt.Println("== sim-cold: cold migration of \"sim-cold\" from the simulator's own SSH server (not a real sshd; for comparison)")
		dropPageCache(f.root, "sim-cold")
		simSpec := spec("sim-cold")
		simSpec.Host = simHostName
		if simCold, err = measure(ctx, en, cl, hostCPU, simSpec); err != nil {
			return err
		}
	}

	// The peak so far: the cluster execution part below measures its own.
	peak := getUsage().maxRSS
	GiB := float64(1 << 30)
	fmt.Println()
	if realSSHD {
		py := "with /bin/python (the sparse reader)"
		if _, err := os.Lstat(filepath.Join(f.chroot, "bin", "python")); err != nil {
			py = "without /bin/python (as ESXi 6.x: reads through dd)"
		}
		fmt.Printf("host: a real OpenSSH sshd on %s, chrooted into a tree laid out like ESXi's, %s; its vim-cmd and vmware answered by the simulator\n", f.sshd, py)
	} else {
		fmt.Println("host: the Go simulator's own SSH server (no real sshd given)")
	}
	if linkRate > 0 {
		fmt.Printf("link: `ssh cat` of the dense disk through OpenSSH: %.1f MB/s\n", linkRate/1e6)
	}
	fmt.Printf("VM \"cold\": %.2f GiB of data (dense %s + thin %s holding %s)\n", float64(coldVM.allocated())/GiB,
		gib(coldVM.Disks[0].Capacity), gib(coldVM.Disks[1].Capacity), gib(coldVM.Disks[1].allocated()))
	fmt.Println()
	fmt.Printf("%-28s %10s %10s\n", "", "cold", "warm")
	row := func(name string, c, w float64) { fmt.Printf("%-28s %9.1fs %9.1fs\n", name, c, w) }
	row("copy after power-off", cold.copy.Seconds(), warm.copy.Seconds())
	row("convert / flatten", cold.convert.Seconds(), warm.convert.Seconds())
	row("import (upload to CDI)", cold.importing.Seconds(), warm.importing.Seconds())
	row("VM created and started", cold.start.Seconds(), warm.start.Seconds())
	row("downtime", cold.downtime.Seconds(), warm.downtime.Seconds())
	if warm.rec.Warm != nil {
		fmt.Printf("%-28s %10s %9.1fs (%s copied while the VM ran)\n", "precopy (VM running)", "-", warm.precopy.Seconds(), gib(warm.precopyBytes))
		fmt.Printf("%-28s %10s %10s\n", "copied after power-off", gib(coldVM.allocated()), gib(warm.rec.Warm.CutoverBytes))
	}
	fmt.Printf("%-28s %10s %10s\n", "sent to CDI's upload proxy", gib(cold.uploaded), gib(warm.uploaded))
	fmt.Printf("%-28s %9.2fs %9.2fs\n", "provider CPU s per GiB", cold.cpu.Seconds()/(float64(coldVM.allocated())/GiB),
		warm.cpu.Seconds()/(float64(lay.VMs[1].allocated())/GiB))
	fmt.Printf("%-28s %9.2fs %9.2fs\n", "host CPU s per GiB", cold.hostCPU.Seconds()/(float64(coldVM.allocated())/GiB),
		warm.hostCPU.Seconds()/(float64(lay.VMs[1].allocated())/GiB))
	fmt.Println()
	if len(catRates) == len(coldVM.Disks) {
		// The disks copy at once and share the link, so these are not the
		// dense copy's goal: the journaled copy of the dense disk on its
		// own is (the stream comparison before the migrations).
		fmt.Println("per disk of \"cold\" (copied at once from the power-off; MB/s of the disk's size against `ssh cat` of the same file, same link, same run):")
		for i, d := range coldVM.Disks {
			sec := diskCopySeconds(events, "cold", i, cold.rec)
			if sec <= 0 {
				continue
			}
			r := float64(d.Capacity) / sec
			fmt.Printf("   disk %d (%s %s): copy %.1f s, %.1f MB/s = %.2f x `ssh cat` (%.1f MB/s)\n", i, gib(d.Capacity), d.kind(), sec, r/1e6, r/catRates[i], catRates[i]/1e6)
			if st, ok := diskCopyStages(events, "cold", i); ok {
				fmt.Printf("      %s\n", stagesLine(st))
			}
		}
	}
	if linkRate > 0 {
		fmt.Printf("ideal (data / link rate): %.1f s; goal 1.15 x ideal + 10 s = %.1f s; cold downtime %.1f s = %.2f x ideal (%s the goal)\n",
			ideal, goal, cold.downtime.Seconds(), cold.downtime.Seconds()/ideal, verdict(cold.downtime.Seconds() <= goal))
	}
	if cold.copy > 0 && linkRate > 0 {
		r := float64(coldVM.allocated()) / cold.copy.Seconds()
		fmt.Printf("copy of the VM's data (both disks at once): %.1f MB/s = %.2f x `ssh cat`\n", r/1e6, r/linkRate)
	}
	fmt.Printf("warm downtime = %.0f%% of cold (goal <= 15%%: %s)\n", 100*warm.downtime.Seconds()/cold.downtime.Seconds(),
		verdict(warm.downtime.Seconds() <= 0.15*cold.downtime.Seconds()))
	if realSSHD {
		sc := lay.VMs[len(lay.VMs)-1]
		line := fmt.Sprintf("sim-cold (second line: the Go simulator's own SSH server as the host, not a real sshd): downtime %.1f s (copy %.1f s, import %.1f s)",
			simCold.downtime.Seconds(), simCold.copy.Seconds(), simCold.importing.Seconds())
		if linkRate > 0 {
			line += fmt.Sprintf(" = %.2f x ideal", simCold.downtime.Seconds()/ideal)
			if simCold.copy > 0 {
				line += fmt.Sprintf(", copy %.2f x `ssh cat`", float64(sc.allocated())/simCold.copy.Seconds()/linkRate)
			}
		}
		fmt.Printf("%s; provider CPU %.2f s per GiB\n", line, simCold.cpu.Seconds()/(float64(sc.allocated())/GiB))
	}
	fmt.Println()
	if f.wave > 0 {
		fmt.Printf("wave: %d VMs, %s of data, in %.1f s: %.1f MB/s; CPU per GiB: provider %.2f s, host %.2f s\n", f.wave, gib(waveBytes),
			waveTime.Seconds(), float64(waveBytes)/waveTime.Seconds()/1e6,
			waveCPU.Seconds()/(float64(waveBytes)/GiB), waveHostCPU.Seconds()/(float64(waveBytes)/GiB))
		sort.Slice(wave, func(i, j int) bool { return wave[i].rec.Identity.Name < wave[j].rec.Identity.Name })
		for _, w := range wave {
			fmt.Printf("   %-8s downtime %6.1f s (copy %5.1f s, import %5.1f s)\n", w.rec.Identity.Name, w.downtime.Seconds(), w.copy.Seconds(), w.importing.Seconds())
		}
		fmt.Printf("migrations at once on the host: at most %d (max_concurrent_migrations 2)\n", en.MaxConcurrent(hostName))
	}
	rss := float64(peak) / (1 << 20)
	fmt.Printf("provider peak RSS: %.0f MiB (goal <= 150 MiB: %s)\n", rss, verdict(rss <= 150))
	if f.worker == "" {
		return nil
	}
	return clusterPart()
}

func verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}

func gib(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// baseline is `ssh cat` through OpenSSH of each of vm's disk files, in
// bytes of the file per second: the first, the dense disk's, is the link's
// rate. None without -ssh-cat.
func baseline(ctx context.Context, f runFlags, vm vmLayout) ([]float64, error) {
	if f.sshCat == "" {
		fmt.Println("== no `ssh cat` baseline (-ssh-cat not given): no ratios to the link")
		return nil, nil
	}
	var rates []float64
	for i, d := range vm.Disks {
		name := vm.Name + "-flat.vmdk"
		if i > 0 {
			name = fmt.Sprintf("%s_%d-flat.vmdk", vm.Name, i)
		}
		local := filepath.Join(f.root, datastore, vm.Name, name)
		// Like the migrations, from the page cache: the data only, holes
		// skipped.
		if _, err := readData(local); err != nil {
			return nil, err
		}
		p := fmt.Sprintf("/vmfs/volumes/%s/%s/%s", datastore, vm.Name, name)
		args := append(strings.Fields(f.sshCat), "cat", p)
		start := time.Now()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		n, err := io.Copy(io.Discard, out)
		if werr := cmd.Wait(); err == nil {
			err = werr
		}
		if err != nil {
			return nil, fmt.Errorf("ssh cat: %w", err)
		}
		if n != d.Capacity {
			return nil, fmt.Errorf("ssh cat of %s read %d bytes, want %d", p, n, d.Capacity)
		}
		el := time.Since(start)
		fmt.Printf("== baseline: `ssh cat` of %s: %.1f s, %.1f MB/s\n", p, el.Seconds(), float64(n)/el.Seconds()/1e6)
		rates = append(rates, float64(n)/el.Seconds())
	}
	return rates, nil
}

// sshdConfig is the provider's configuration of the real sshd: its
// client key, and its host key pinned by fingerprint.
func sshdConfig(f runFlags) (esxi.HostConfig, error) {
	addr, portText, err := net.SplitHostPort(f.sshd)
	if err != nil {
		return esxi.HostConfig{}, fmt.Errorf("-sshd: %w", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return esxi.HostConfig{}, fmt.Errorf("-sshd: %w", err)
	}
	key, err := os.ReadFile(f.sshdKey)
	if err != nil {
		return esxi.HostConfig{}, err
	}
	pub, err := os.ReadFile(f.sshdHostKey)
	if err != nil {
		return esxi.HostConfig{}, err
	}
	hk, _, _, _, err := ssh.ParseAuthorizedKey(pub)
	if err != nil {
		return esxi.HostConfig{}, fmt.Errorf("%s: %w", f.sshdHostKey, err)
	}
	return esxi.HostConfig{Name: hostName, Address: addr, Port: port, PrivateKeyPEM: string(key),
		HostKeyFingerprint: ssh.FingerprintSHA256(hk), MaxSessions: 4, StreamsPerDisk: 2}, nil
}

type result struct {
	rec                                             record.Record
	copy, convert, importing, start, downtime, wall time.Duration
	precopy                                         time.Duration
	precopyBytes                                    int64
	uploaded                                        int64
	hostCPU                                         time.Duration
	cpu                                             time.Duration
}

// coldCache makes the cold and warm migrations, and the wave, start with
// an empty page cache but for the data of the migrated VMs' files on the
// host (not in the smoke run).
//
// The layout was just written: without the drop, the cache is full of
// the host's disk files. The host's files are then read back, holes
// skipped, as the `ssh cat` baseline's disk is: on this machine a read from
// its disk costs about 3 s of CPU per GiB (the block device and the first
// touch of each page in a VM whose hypervisor takes back free memory, see
// the README), on the same 2 cores as the provider. An ESXi host reads its
// datastore with its own CPUs, and the baseline is measured from the
// cache, so the migrations are too. The provider's side (staged copies,
// the simulated claims) starts cold.
var coldCache = false

// dropPageCache writes back and drops the page cache (needs root; a
// failure only makes the measurement warmer, so it is reported and run
// on), then reads the data of the files of the VMs named into it.
func dropPageCache(root string, vms ...string) {
	if !coldCache {
		return
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cannot drop the page cache: %v\n", err)
	}
	start := time.Now()
	var n int64
	for _, vm := range vms {
		dir := filepath.Join(root, datastore, vm)
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			continue
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				k, err := readData(filepath.Join(dir, e.Name()))
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: reading the host's %s: %v\n", e.Name(), err)
				}
				n += k
			}
		}
	}
	if len(vms) == 0 {
		return
	}
	fmt.Printf("   (page cache dropped; the host's files of %s read back: %s in %.1f s)\n", strings.Join(vms, ", "), gib(n), time.Since(start).Seconds())
}

// readData reads the data spans of the file at path, not its holes, and
// returns how many bytes it read.
func readData(path string) (int64, error) {
	var total int64
	err := sparsefile.WalkFile(path, func(f *os.File, off, n int64, data bool) error {
		if !data {
			return nil
		}
		k, err := io.Copy(io.Discard, io.NewSectionReader(f, off, n))
		total += k
		return err
	})
	return total, err
}

// measure runs one migration and checks that every DataVolume holds the
// content the source's disk had, as the simulated CDI computed it.
func measure(ctx context.Context, en *engine.Engine, cluster *child, hostCPU func() time.Duration, spec engine.Spec) (result, error) {
	u0, h0 := getUsage(), hostCPU()
	start := time.Now()
	rec, err := en.Run(ctx, spec)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", spec.Name, err)
	}
	if rec.Phase != record.PhaseCompleted {
		return result{}, fmt.Errorf("%s ended in %s", spec.Name, rec.Phase)
	}
	var sent int64
	for _, d := range rec.Disks {
		if spec.Execution == engine.ExecutionCluster {
			// The copy Job wrote the claim; nothing was uploaded.
			got, err := cluster.ask("claim " + d.DataVolume)
			if err != nil || len(got) != 1 || got[0] != d.SourceSHA256 || d.SourceSHA256 == "" {
				return result{}, fmt.Errorf("%s disk %d: the claim of DataVolume %s holds %v (%v), the source %q", spec.Name, d.Index, d.DataVolume, got, err, d.SourceSHA256)
			}
			continue
		}
		got, err := cluster.ask("received " + d.DataVolume)
		if err != nil || len(got) != 2 {
			return result{}, fmt.Errorf("%s disk %d: DataVolume %s: %v", spec.Name, d.Index, d.DataVolume, err)
		}
		if got[0] != d.SourceSHA256 || d.SourceSHA256 == "" {
			return result{}, fmt.Errorf("%s disk %d: the DataVolume holds %s, the source %q", spec.Name, d.Index, got[0], d.SourceSHA256)
		}
		n, _ := strconv.ParseInt(got[1], 10, 64)
		sent += n
	}
	ts := rec.Timestamps
	between := func(a, b *time.Time) time.Duration {
		if a == nil || b == nil {
			return 0
		}
		return b.Sub(*a)
	}
	r := result{rec: rec, uploaded: sent, hostCPU: hostCPU() - h0, wall: time.Since(start), cpu: getUsage().cpu - u0.cpu, downtime: rec.Downtime(),
		copy: between(ts.SourcePoweredOff, ts.Acquired), convert: between(ts.Acquired, ts.Converted),
		importing: between(ts.Converted, ts.Imported), start: between(ts.Imported, ts.VMStarted)}
	if w := rec.Warm; w != nil && len(w.Snapshots) > 0 {
		r.precopy = between(ts.Validated, ts.SourcePoweredOff)
		for _, s := range w.Snapshots {
			r.precopyBytes += s.CopiedBytes
		}
	}
	return r, nil
}

// diskCopyStages is where the copy of one disk spent its time, from its
// last copy progress report (transfer.Stages, summed over its streams).
func diskCopyStages(events []engine.Event, name string, disk int) (transfer.Stages, bool) {
	var st transfer.Stages
	ok := false
	for _, ev := range events {
		if ev.Name == name && ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing &&
			ev.Disk == disk && ev.Transfer.Kind == engine.TransferCopy {
			st, ok = ev.Stages, true
		}
	}
	return st, ok
}

// stagesLine prints a copy's stages in seconds, summed over its streams.
func stagesLine(st transfer.Stages) string {
	return fmt.Sprintf("stages, s summed over streams: waiting for the host %.1f, reading %.1f, writing %.1f, fsync %.1f, hashing %.1f, journal %.1f",
		st.Waiting.Seconds(), st.Reading.Seconds(), st.Writing.Seconds(), st.Syncing.Seconds(), st.Hashing.Seconds(), st.Journal.Seconds())
}

// diskCopySeconds is how long the copy of one disk took: from the source's
// power-off (the copies of all the VM's disks start then, at once) to its
// own last report.
func diskCopySeconds(events []engine.Event, name string, disk int, rec record.Record) float64 {
	if rec.Timestamps.SourcePoweredOff == nil {
		return 0
	}
	var end time.Time
	for _, ev := range events {
		if ev.Name == name && ev.Kind == engine.EventProgress && ev.Phase == record.PhasePreparing &&
			ev.Disk == disk && ev.BytesDone == ev.BytesTotal {
			end = ev.Time
		}
	}
	if end.IsZero() {
		return 0
	}
	return end.Sub(*rec.Timestamps.SourcePoweredOff).Seconds()
}

// precopyWriter has a warm migration's guest write while the precopy
// runs: the writes start at the migration's first event that start
// accepts, beside the engine (not in its callback), and the power-off
// waits for them, as a guest's writes in flight land before ESXi's
// power-off completes. The wait is before the power-off, so it is not
// downtime.
type precopyWriter struct {
	name    string
	start   func(engine.Event) bool
	write   func() error
	once    sync.Once
	done    chan struct{}
	err     error
	started bool
}

func newPrecopyWriter(name string, start func(engine.Event) bool, write func() error) *precopyWriter {
	return &precopyWriter{name: name, start: start, write: write, done: make(chan struct{})}
}

// hook is the engine's event callback.
func (w *precopyWriter) hook(ev engine.Event) {
	if ev.Name != w.name {
		return
	}
	if w.start(ev) {
		w.once.Do(func() {
			w.started = true
			go func() {
				w.err = w.write()
				close(w.done)
			}()
		})
	}
	if ev.Reason == "PoweringOff" {
		w.once.Do(func() {}) // too late to start: the guest is going off
		if w.started {
			<-w.done
		}
	}
}

// result is the writes' outcome once the migration has ended.
func (w *precopyWriter) result() error {
	w.once.Do(func() {})
	if !w.started {
		return errors.New("the warm guest wrote nothing during the precopy")
	}
	<-w.done
	if w.err != nil {
		return fmt.Errorf("the warm guest's writes: %w", w.err)
	}
	return nil
}
