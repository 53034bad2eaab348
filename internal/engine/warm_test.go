package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxi"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/vmdk"
)

// guestModel is what the guest of a simulated VM has written: its disk's
// content, kept in step with esxisim.Server.GuestWrite.
type guestModel struct {
	mu      sync.Mutex
	content []byte
}

func (m *guestModel) write(t *testing.T, h *esxiHost, vmid int, node string, off int64, n int, seed uint64) {
	b := make([]byte, n)
	esxisim.PatternBytes(b, seed, off)
	if err := h.GuestWrite(vmid, node, off, b); err != nil {
		t.Errorf("guest write: %v", err)
		return
	}
	m.mu.Lock()
	copy(m.content[off:], b)
	m.mu.Unlock()
}

func (m *guestModel) sha() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return diskdigest.Bytes(m.content)
}

const warmCapacity = 24 << 20

// addWarmVM adds a running VM with one thin disk and returns the model of
// its guest's content.
func addWarmVM(t *testing.T, e *env, name string) (int, *esxisim.VMFiles, *guestModel) {
	t.Helper()
	id, files := e.host.AddVM(t, esxisim.VMSpec{
		Name: name, GuestOS: "rhel9-64",
		Disks: []esxisim.DiskSpec{{CapacityBytes: warmCapacity, Thin: true}},
		NICs:  []esxisim.NICSpec{{Network: "VM Network"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.7"},
	})
	flat, err := os.ReadFile(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	return id, files, &guestModel{content: append(flat, make([]byte, warmCapacity-len(flat))...)}
}

// sourceClean checks that the source VM has no snapshot left, runs on its
// base again with no delta file, and that the base holds want.
func sourceClean(t *testing.T, e *env, id int, files *esxisim.VMFiles, name, want string) {
	t.Helper()
	c, err := e.reg.Client(hostName)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Snapshots(e.ctx(10e9), id)
	if err != nil || len(esxi.FindSnapshots(tree, func(esxi.Snapshot) bool { return true })) != 0 {
		t.Errorf("snapshots left on the source: %+v, %v", tree, err)
	}
	if ms, _ := filepath.Glob(filepath.Join(files.LocalDir, name+"-00000*")); len(ms) != 0 {
		t.Errorf("delta files left on the source: %v", ms)
	}
	vmx, _ := os.ReadFile(filepath.Join(files.LocalDir, name+".vmx"))
	if !strings.Contains(string(vmx), `fileName = "`+name+`.vmdk"`) {
		t.Errorf("the .vmx does not run on the base again:\n%s", vmx)
	}
	base, _ := os.ReadFile(files.Disks[0].LocalFlat)
	base = append(base, make([]byte, warmCapacity-len(base))...)
	if diskdigest.Bytes(base) != want {
		t.Error("the source's base does not hold the guest's content after the snapshots were removed")
	}
}

// A running VM migrates warm with two precopy rounds while its guest
// keeps writing: before the first snapshot, during the first copy, between
// the rounds and after the last. The DataVolume holds the guest's final
// content; the base was copied while the VM ran and only the last delta
// after the power-off; the migration's two snapshots are gone from the
// source afterwards, which runs on its base again holding that same
// content, with no delta file left.
func TestWarmMigrationCopiesTheLastDeltaOffline(t *testing.T) {
	e := newEnv(t)
	const capacity = warmCapacity
	id, files, m := addWarmVM(t, e, "warm")
	node := files.Disks[0].Controller

	spec := e.spec("warm", "warm")
	spec.Mode, spec.PrecopyRounds = engine.ModeWarm, 2
	var (
		mu                      sync.Mutex
		wrote                         = map[string]bool{}
		offBytes, lastDelta     int64 = -1, -1
		poweredOffAt            int64 = -1
		precopyProgressWhileRun bool
		creates                 int
	)
	once := func(key string, f func()) {
		mu.Lock()
		done := wrote[key]
		wrote[key] = true
		mu.Unlock()
		if !done {
			f()
		}
	}
	hook := func(ev engine.Event) {
		switch {
		case strings.Contains(ev.Message, "precopy round 1 of 2: taking snapshot"):
			once("before", func() { m.write(t, e.host, id, node, 64<<10, 8<<10, 1) }) // lands in the base
		case ev.Kind == engine.EventProgress && strings.HasPrefix(ev.Message, "precopy:"):
			if st, _ := e.host.PowerState(id); st == esxisim.PoweredOn {
				mu.Lock()
				precopyProgressWhileRun = true
				mu.Unlock()
			}
			once("during", func() { m.write(t, e.host, id, node, 3<<20, 64<<10, 2) }) // the first delta
		case strings.Contains(ev.Message, "precopy round 1 of 2: copied"):
			once("between", func() { m.write(t, e.host, id, node, 64<<10+4096, 4096, 3) })
		case strings.Contains(ev.Message, "precopy round 2 of 2: copied"):
			once("after", func() {
				m.write(t, e.host, id, node, capacity-1000, 1000, 4) // the disk's last grain
				m.write(t, e.host, id, node, 10<<20, 12<<10, 5)
			})
		case strings.HasPrefix(ev.Message, "powering off source VM"):
			once("off", func() {
				creates = len(e.commands("snapshot.create"))
				e.host.ResetStats()
				mu.Lock()
				poweredOffAt = 0
				mu.Unlock()
			})
		case strings.HasPrefix(ev.Message, "cutover:"):
			once("cutover", func() {
				ms, _ := filepath.Glob(filepath.Join(files.LocalDir, "warm-000002-*.vmdk"))
				if len(ms) == 1 {
					if fi, err := os.Stat(ms[0]); err == nil {
						mu.Lock()
						lastDelta = fi.Size()
						mu.Unlock()
					}
				}
			})
		case ev.Phase == record.PhaseConverting:
			once("converting", func() {
				mu.Lock()
				offBytes = e.host.Stats().StdoutBytes
				mu.Unlock()
			})
		}
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)
	e.onEvent.Store(nil)
	for _, k := range []string{"before", "during", "between", "after", "off", "cutover", "converting"} {
		if !wrote[k] {
			t.Errorf("the migration never reached the point %q", k)
		}
	}
	if !precopyProgressWhileRun || poweredOffAt != 0 {
		t.Errorf("precopy while running %v, power-off seen %v", precopyProgressWhileRun, poweredOffAt == 0)
	}

	want := m.sha()
	if got, ok := e.sim.ReceivedSHA256(e.ns, "warm-disk-0"); !ok || got != want {
		t.Errorf("the DataVolume received %q (%v), the guest's final content is %s", got, ok, want)
	}
	if d := rec.Disks[0]; d.GuestSHA256 != want {
		t.Errorf("guest sha %s, want %s", d.GuestSHA256, want)
	}

	w := rec.Warm
	if w == nil || w.Rounds != 2 || len(w.Snapshots) != 2 {
		t.Fatalf("warm evidence %+v", w)
	}
	for i, s := range w.Snapshots {
		if s.Round != i+1 || s.ID <= 0 || s.CreatedAt == nil || !s.Copied || !s.Removed || !strings.HasPrefix(s.Name, "vmmigration ") {
			t.Errorf("snapshot %+v", s)
		}
	}
	if w.Snapshots[0].CopiedBytes != capacity {
		t.Errorf("round 1 copied %d bytes, want the base's %d", w.Snapshots[0].CopiedBytes, capacity)
	}
	if b := w.Snapshots[1].CopiedBytes; b <= 0 || b > capacity/8 {
		t.Errorf("round 2 copied %d bytes, want the first delta's few", b)
	}
	if lastDelta <= 0 || w.CutoverBytes != lastDelta || w.CutoverFiles != 1 {
		t.Errorf("cutover copied %d bytes in %d files, the last delta is %d bytes", w.CutoverBytes, w.CutoverFiles, lastDelta)
	}
	// What crossed the wire with the source off: the last delta, plus
	// descriptors and vim-cmd answers, never the disk.
	if offBytes < lastDelta || offBytes > lastDelta+512<<10 {
		t.Errorf("%d bytes read from the host after the power-off, the last delta is %d bytes (the disk %d)", offBytes, lastDelta, capacity)
	}
	t.Logf("precopy %d + %d bytes; cutover %d bytes (last delta %d), %d bytes from the host with the source off; downtime %s",
		w.Snapshots[0].CopiedBytes, w.Snapshots[1].CopiedBytes, w.CutoverBytes, lastDelta, offBytes, rec.Downtime())
	if rec.Downtime() <= 0 {
		t.Errorf("downtime not recorded: %+v", rec.Timestamps)
	}

	// The source: no snapshot, the .vmx on its base, which holds the
	// guest's content, and no delta left.
	if n := creates + len(e.commands("snapshot.create")); n != 2 {
		t.Errorf("%d snapshot.create commands, want 2", n)
	}
	sourceClean(t, e, id, files, "warm", want)
}

// A VM that already runs on its owner's snapshots (a three-level chain)
// migrates warm: the migration's snapshot goes on top of the owner's
// chain, the destination gets the guest's content including what it wrote
// during the precopy, and afterwards the VM runs on the owner's chain
// again, the owner's snapshot kept.
func TestWarmOnOwnersSnapshots(t *testing.T) {
	e := newEnv(t)
	ch := addChainVM(t, e, "ownchain", vmdk.VMFSSparse, vmdk.SESparse)
	var id int
	for _, vm := range e.host.VMs() {
		if strings.HasSuffix(vm.VMXPath, "/ownchain.vmx") {
			id = vm.Vmid
		}
	}
	content := make([]byte, 24<<20)
	// <root>/datastore1/ownchain/ownchain-000002.vmdk
	root := filepath.Dir(filepath.Dir(filepath.Dir(ch.Links[0].LocalDescriptor)))
	c, err := vmdk.OpenChain(ch.Links[0].LocalDescriptor, esxisim.HostResolver(root))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(content, 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	m := &guestModel{content: content}
	spec := e.spec("ownchain", "ownchain")
	spec.Mode = engine.ModeWarm
	hook := func(ev engine.Event) {
		if strings.Contains(ev.Message, "precopy round 1 of 1: copied") {
			m.write(t, e.host, id, "scsi0:0", 9<<20, 8<<10, 21)
		}
	}
	e.onEvent.Store(&hook)
	rec := e.mustComplete(e.engine(), spec)
	e.onEvent.Store(nil)
	if got, _ := e.sim.ReceivedSHA256(e.ns, "ownchain-disk-0"); got != m.sha() {
		t.Errorf("received %s, want the guest's %s", got, m.sha())
	}
	if n := len(rec.Disks[0].Chain); n != 8 {
		t.Errorf("the chain copied has %d files, want 4 links", n)
	}
	cl, err := e.reg.Client(hostName)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := cl.Snapshots(e.ctx(10e9), id)
	if all := esxi.FindSnapshots(tree, func(esxi.Snapshot) bool { return true }); err != nil || len(all) != 1 || all[0].Name != "before-migration" {
		t.Errorf("snapshots after the migration: %+v, %v; want the owner's only", all, err)
	}
	vmx, _ := os.ReadFile(filepath.Join(filepath.Dir(ch.Links[0].LocalDescriptor), "ownchain.vmx"))
	if !strings.Contains(string(vmx), filepath.Base(ch.Links[0].Descriptor)) {
		t.Errorf("the VM does not run on its own top again:\n%s", vmx)
	}
	c, err = vmdk.OpenChain(ch.Links[0].LocalDescriptor, esxisim.HostResolver(root))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if sum, err := c.SHA256(); err != nil || sum != m.sha() {
		t.Errorf("the source chain reads %s (%v), want the guest's %s", sum, err, m.sha())
	}
}
