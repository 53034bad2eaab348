package esxi

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/esxisim"
)

const simPassword = "s3cret'pass"

type simEnv struct {
	srv *esxisim.Server
	cfg HostConfig
}

func newSim(t *testing.T, opts esxisim.Options) *simEnv {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.Users == nil {
		opts.Users = []esxisim.User{{Name: "root", Password: simPassword}}
	}
	if opts.ShutdownDelay == 0 {
		opts.ShutdownDelay = 300 * time.Millisecond
	}
	srv, err := esxisim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host, port := splitHostPortT(t, srv.Addr())
	return &simEnv{srv: srv, cfg: HostConfig{
		Name: "esxi-a", Address: host, Port: port, User: "root", Password: simPassword,
		HostKeyFingerprint: srv.Fingerprint(), DialTimeout: 10 * time.Second,
	}}
}

func splitHostPortT(t *testing.T, addr string) (string, int) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	var port int
	for _, c := range addr[i+1:] {
		port = port*10 + int(c-'0')
	}
	return addr[:i], port
}

func (e *simEnv) client(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(e.cfg, func(f string, a ...any) { t.Logf(f, a...) })
	if err != nil {
		t.Fatal(err)
	}
	c.SetPollInterval(50 * time.Millisecond)
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantErr(t *testing.T, err error, kind error, class Class, msgs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", kind)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Errorf("error %q is not %v", err, kind)
	}
	if Classify(err) != class {
		t.Errorf("class %v, want %v (%v)", Classify(err), class, err)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not contain %q", err, m)
		}
	}
}

func TestSimInventory(t *testing.T) {
	env := newSim(t, esxisim.Options{FIPS: true})
	id1, f1, err := env.srv.AddVM(esxisim.VMSpec{
		Name: "it's web (prod)", GuestOS: "rhel9-64", Firmware: "efi", SecureBoot: true, CPUs: 4, MemoryMiB: 8192, HardwareVersion: 20,
		Annotation: "owner: ops\n42 is the answer",
		Disks: []esxisim.DiskSpec{
			{CapacityBytes: 4 << 20, Thin: true},
			{CapacityBytes: 2 << 20, Subdir: "data", Controller: "nvme0:0"},
			{CapacityBytes: 1 << 20, Datastore: "datastore2", Controller: "sata0:1"},
		},
		NICs:  []esxisim.NICSpec{{Network: "VM Network", MAC: "00:50:56:aa:bb:cc", Adapter: "e1000e"}},
		Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning, IPs: []string{"10.0.0.7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id2, f2, err := env.srv.AddVM(esxisim.VMSpec{Name: "db", Snapshots: true, Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	env.srv.ResetStats()
	vms, probs, err := c.Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	wantNoProblems(t, probs)
	if len(vms) != 2 {
		t.Fatalf("%d VMs", len(vms))
	}
	vm := vms[0]
	if vm.VMID != id1 || vm.Name != "it's web (prod)" || vm.VMXPath != f1.VMXPath || vm.Datastore != "datastore1" || vm.GuestOS != "rhel9-64" ||
		vm.Firmware != FirmwareEFI || !vm.SecureBoot || vm.CPUs != 4 || vm.MemoryMiB != 8192 || vm.HardwareVersion != 20 ||
		vm.PowerState != PoweredOn || !vm.ToolsRunning || vm.Annotation != "owner: ops\n42 is the answer" {
		t.Errorf("vm1 %+v", vm)
	}
	if len(vm.GuestIPs) != 1 || vm.GuestIPs[0] != "10.0.0.7" {
		t.Errorf("guest IPs %v", vm.GuestIPs)
	}
	if len(vm.NICs) != 1 || vm.NICs[0].MAC != "00:50:56:aa:bb:cc" || vm.NICs[0].NetworkName != "VM Network" || vm.NICs[0].AdapterType != "e1000e" {
		t.Errorf("nics %+v", vm.NICs)
	}
	wantNoProblems(t, vm.Problems)
	byDev := map[string]Disk{}
	for _, d := range vm.Disks {
		byDev[d.Device] = d
	}
	for _, fd := range f1.Disks {
		d, ok := byDev[fd.Controller]
		if !ok {
			t.Errorf("disk %s missing from %+v", fd.Controller, vm.Disks)
			continue
		}
		if d.DescriptorPath != fd.Descriptor || d.DataPath != fd.Flat || d.CapacityBytes != fd.CapacityBytes || d.Thin != fd.Thin || d.OnSnapshotDelta {
			t.Errorf("disk %s = %+v, want %+v", fd.Controller, d, fd)
		}
	}
	vm = vms[1]
	if vm.VMID != id2 || vm.Name != "db" || vm.PowerState != PoweredOff || len(vm.Disks) != 1 || len(vm.Snapshots) != 1 {
		t.Fatalf("vm2 %+v", vm)
	}
	d := vm.Disks[0]
	if !d.OnSnapshotDelta || d.DescriptorPath != f2.Disks[0].Child || d.DataPath != f2.Disks[0].Delta || d.ParentDescriptorPath != f2.Disks[0].Descriptor {
		t.Errorf("snapshot disk %+v want %+v", d, f2.Disks[0])
	}
	if len(vm.Problems) != 0 {
		t.Errorf("problems %v", vm.Problems)
	}
	few := env.srv.Stats().Execs

	// The number of execs does not grow with the number of VMs.
	for i := 0; i < 30; i++ {
		if _, _, err := env.srv.AddVM(esxisim.VMSpec{Name: "bulk" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Disks: []esxisim.DiskSpec{{CapacityBytes: 1 << 20}}}); err != nil {
			t.Fatal(err)
		}
	}
	env.srv.ResetStats()
	vms, _, err = c.Inventory(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	many := env.srv.Stats().Execs
	// The snapshot VM's two-link chain adds two small round trips (its
	// base descriptor with the delta's size, then the base's size), of at
	// most two commands each.
	if len(vms) != 32 || many > int64(1+2*c.cfg.MaxSessions+2*2) {
		t.Errorf("%d VMs in %d execs (2 VMs took %d)", len(vms), many, few)
	}
	for _, l := range env.srv.CommandLog() {
		if strings.Contains(l.Command, simPassword) {
			t.Error("password on a command line")
		}
	}

	one, err := c.VM(ctxT(t), id1)
	if err != nil || one.Name != "it's web (prod)" || len(one.Disks) != 3 {
		t.Errorf("VM(%d) = %+v, %v", id1, one, err)
	}
	_, err = c.VM(ctxT(t), 9999)
	wantErr(t, err, ErrVMNotFound, Permanent, "vmid 9999")
}

func TestSimPower(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	on, _, _ := env.srv.AddVM(esxisim.VMSpec{Name: "on", Power: esxisim.PoweredOn, Tools: esxisim.ToolsRunning})
	noTools, _, _ := env.srv.AddVM(esxisim.VMSpec{Name: "notools", Power: esxisim.PoweredOn, Tools: esxisim.ToolsNotRunning})
	c := env.client(t)
	ctx := ctxT(t)

	if err := c.Shutdown(ctx, on); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if st, err := c.PowerState(ctx, on); err != nil || st != PoweredOff {
		t.Fatalf("after shutdown: %v %v", st, err)
	}
	if err := c.Shutdown(ctx, on); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := c.PowerOn(ctx, on); err != nil {
			t.Fatalf("power on #%d: %v", i, err)
		}
	}
	if st, _ := c.PowerState(ctx, on); st != PoweredOn {
		t.Errorf("state %v", st)
	}
	for i := 0; i < 2; i++ {
		if err := c.PowerOff(ctx, on); err != nil {
			t.Fatalf("power off #%d: %v", i, err)
		}
	}
	err := c.Shutdown(ctx, noTools)
	wantErr(t, err, ErrToolsUnavailable, NeedsHuman, "VMware Tools is not running", "vmid")
	if st, _ := c.PowerState(ctx, noTools); st != PoweredOn {
		t.Error("Shutdown without Tools touched the VM")
	}
	_, err = c.PowerState(ctx, 4242)
	wantErr(t, err, ErrVMNotFound, Permanent, "esxi-a", "vmid 4242")

	env.srv.FailVimCmd(1, esxisim.VimLoginReset)
	_, err = c.PowerState(ctx, on)
	wantErr(t, err, ErrHostdUnavailable, Transient, "retry")
	env.srv.FailVimCmd(1, esxisim.VimBadAlloc)
	_, err = c.PowerState(ctx, on)
	wantErr(t, err, ErrHostdUnavailable, Transient)
	if st, err := c.PowerState(ctx, on); err != nil || st != PoweredOff {
		t.Errorf("after faults: %v %v", st, err)
	}
}

func TestSimReadRange(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	id, files, err := env.srv.AddVM(esxisim.VMSpec{Name: "data", Disks: []esxisim.DiskSpec{{CapacityBytes: 8 << 20, Content: []esxisim.Extent{{Offset: 1 << 20, Length: 3 << 20, Seed: 7}}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := env.client(t)
	ctx := ctxT(t)
	flat := files.Disks[0].Flat
	local, err := os.ReadFile(files.Disks[0].LocalFlat)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 8 << 20}, {1<<20 + 4096, 65536}, {512, 1024}, {3 << 20, 2 << 20}} {
		var buf bytes.Buffer
		n, err := c.ReadRange(ctx, flat, r[0], r[1], &buf)
		if err != nil || n != r[1] || !bytes.Equal(buf.Bytes(), local[r[0]:r[0]+r[1]]) {
			t.Errorf("ReadRange(%d,%d) = %d, %v (equal=%v)", r[0], r[1], n, err, bytes.Equal(buf.Bytes(), local[r[0]:r[0]+r[1]]))
		}
	}
	_, err = c.ReadRange(ctx, flat, 100, 512, &bytes.Buffer{})
	wantErr(t, err, nil, Permanent, "not aligned")
	_, err = c.ReadRange(ctx, flat, 7<<20, 2<<20, &bytes.Buffer{})
	wantErr(t, err, ErrUnexpectedOutput, Permanent, "shorter")
	_, err = c.ReadRange(ctx, filepath.Dir(flat)+"/missing-flat.vmdk", 0, 512, &bytes.Buffer{})
	wantErr(t, err, ErrFileNotFound, Permanent, "missing-flat.vmdk")
	_, err = c.ReadRange(ctx, "/vmfs/volumes/datastore1/../../etc/passwd", 0, 512, &bytes.Buffer{})
	wantErr(t, err, nil, Permanent, "leave its datastore")

	if err := c.PowerOn(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = c.ReadRange(ctx, flat, 0, 512, &bytes.Buffer{})
	wantErr(t, err, ErrBusy, NeedsHuman, "power the VM off")

	sizes, err := c.FileSizes(ctx, flat)
	if err != nil || sizes[flat] != 8<<20 {
		t.Errorf("FileSizes = %v, %v", sizes, err)
	}
}

func TestSimAuthNeverRetried(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.cfg.Password = "wrong"
	c := env.client(t)
	for i := 0; i < 3; i++ {
		_, err := c.PowerState(ctxT(t), 1)
		wantErr(t, err, ErrAuthFailed, NeedsHuman, "refused authentication", "locks the account", "lockdown")
	}
	if n := env.srv.AuthFailures("root"); n != 1 {
		t.Errorf("%d failed logins, want exactly 1", n)
	}
}

func TestSimLockdown(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	env.srv.SetLockdown(true)
	_, err := env.client(t).PowerState(ctxT(t), 1)
	wantErr(t, err, ErrAuthFailed, NeedsHuman, "lockdown")
}

func TestSimPublicKey(t *testing.T) {
	keyPEM := testKeyPEM(t, "ecdsa")
	signer, _ := ssh.ParsePrivateKey([]byte(keyPEM))
	env := newSim(t, esxisim.Options{FIPS: true, Users: []esxisim.User{{Name: "root", AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}}}})
	env.cfg.Password = ""
	env.cfg.PrivateKeyPEM = keyPEM
	if _, err := env.client(t).Version(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSimHostKey(t *testing.T) {
	rsaKey, err := esxisim.GenerateHostKey(esxisim.KeyRSA)
	if err != nil {
		t.Fatal(err)
	}
	env := newSim(t, esxisim.Options{HostKey: rsaKey, FIPS: true})

	t.Run("pinned RSA fingerprint", func(t *testing.T) {
		c := env.client(t)
		if fp := c.HostKeyFingerprint(); fp != "" {
			t.Errorf("host key %q seen before connecting", fp)
		}
		v, err := c.Version(ctxT(t))
		if err != nil || v.Version == "" {
			t.Fatalf("%+v %v", v, err)
		}
		if got := strings.Join(c.hostKeyAlgos, ","); got != "rsa-sha2-512,rsa-sha2-256" {
			t.Errorf("learned algorithms %s", got)
		}
		if got, want := c.HostKeyFingerprint(), env.srv.Fingerprint(); got != want {
			t.Errorf("host key seen %q, want %q", got, want)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		cfg := env.cfg
		cfg.HostKeyFingerprint = "SHA256:" + strings.Repeat("A", 43)
		c, err := NewClient(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		before := env.srv.Stats()
		_, err = c.Version(ctxT(t))
		wantErr(t, err, ErrHostKeyMismatch, NeedsHuman, "does not match the pinned fingerprint", env.srv.Fingerprint(), "update host_key_fingerprint")
		// The host key is checked before authentication: no password was
		// tried and no connection authenticated.
		if after := env.srv.Stats(); after.AuthFailures != before.AuthFailures || after.Conns != before.Conns {
			t.Errorf("authenticated to an unverified host: auth failures %d -> %d, authenticated connections %d -> %d",
				before.AuthFailures, after.AuthFailures, before.Conns, after.Conns)
		}
	})
	t.Run("known_hosts", func(t *testing.T) {
		kh := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(kh, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := env.cfg
		cfg.HostKeyFingerprint = ""
		cfg.KnownHostsFile = kh
		c, _ := NewClient(cfg, nil)
		_, err := c.Version(ctxT(t))
		wantErr(t, err, ErrUnknownHostKey, NeedsHuman, "not in known_hosts", env.srv.Fingerprint())
		c.Close()

		line := knownHostsLine(cfg, env.srv.HostKey())
		if err := os.WriteFile(kh, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, _ = NewClient(cfg, nil)
		defer c.Close()
		if _, err := c.Version(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSimReconnectAndCancel(t *testing.T) {
	env := newSim(t, esxisim.Options{})
	id, _, _ := env.srv.AddVM(esxisim.VMSpec{Name: "x"})
	c := env.client(t)
	ctx := ctxT(t)
	if _, err := c.PowerState(ctx, id); err != nil {
		t.Fatal(err)
	}
	env.srv.DropAfterCommands(0)
	_, err := c.PowerState(ctx, id)
	wantErr(t, err, nil, Transient)
	if st, err := c.PowerState(ctx, id); err != nil || st != PoweredOff {
		t.Fatalf("after reconnect: %v %v", st, err)
	}

	env.srv.SetCommandDelay(5 * time.Second)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.PowerState(short, id)
	wantErr(t, err, nil, Transient)
	if time.Since(start) > 3*time.Second {
		t.Errorf("cancellation took %v", time.Since(start))
	}
	env.srv.ClearFaults()
	if _, err := c.PowerState(ctx, id); err != nil {
		t.Errorf("after cancel: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry(nil)
	cfg := HostConfig{Name: "a", Address: "192.0.2.1", Password: "p", InsecureIgnoreHostKey: true}
	c1, err := r.Add(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := r.Add(cfg); err != nil || c2 != c1 {
		t.Errorf("re-adding the same config: %v", err)
	}
	cfg2 := cfg
	cfg2.Address = "192.0.2.2"
	if _, err := r.Add(cfg2); err == nil {
		t.Error("conflicting config accepted")
	}
	if c, err := r.Client("a"); err != nil || c != c1 {
		t.Error(err)
	}
	if _, err := r.Client("b"); err == nil || !strings.Contains(err.Error(), "no ESXi host named") {
		t.Error(err)
	}
	if c1.Config().Password != "" {
		t.Error("Config leaks the password")
	}
	_ = r.Close()
}

func TestHostConfigValidate(t *testing.T) {
	base := HostConfig{Name: "a", Address: "esxi.example", Password: "p", HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43)}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	mod := func(f func(*HostConfig)) HostConfig { c := base; f(&c); return c }
	bad := map[string]HostConfig{
		"no host key":  mod(func(c *HostConfig) { c.HostKeyFingerprint = "" }),
		"bad fp":       mod(func(c *HostConfig) { c.HostKeyFingerprint = "MD5:aa:bb" }),
		"short fp":     mod(func(c *HostConfig) { c.HostKeyFingerprint = "SHA256:abc" }),
		"insecure+fp":  mod(func(c *HostConfig) { c.InsecureIgnoreHostKey = true }),
		"no creds":     mod(func(c *HostConfig) { c.Password = "" }),
		"no name":      mod(func(c *HostConfig) { c.Name = "" }),
		"bad port":     mod(func(c *HostConfig) { c.Port = 70000 }),
		"sessions":     mod(func(c *HostConfig) { c.MaxSessions = 50 }),
		"streams":      mod(func(c *HostConfig) { c.MaxSessions, c.StreamsPerDisk = 2, 3 }),
		"no streams":   mod(func(c *HostConfig) { c.StreamsPerDisk = -1 }),
		"bad key":      mod(func(c *HostConfig) { c.PrivateKeyPEM = "garbage" }),
		"address":      mod(func(c *HostConfig) { c.Address = "a b" }),
		"both sources": mod(func(c *HostConfig) { c.KnownHostsFile = "/x" }),
	}
	for name, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if Classify(err) != Permanent || !strings.Contains(err.Error(), "configuration") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := mod(func(c *HostConfig) { c.HostKeyFingerprint = "SHA256:" + strings.Repeat("A", 43) + "=" }).Validate(); err != nil {
		t.Errorf("padded fingerprint: %v", err)
	}
	if err := mod(func(c *HostConfig) { c.MaxSessions, c.StreamsPerDisk = 4, 4 }).Validate(); err != nil {
		t.Errorf("as many streams as sessions: %v", err)
	}
}

func knownHostsLine(cfg HostConfig, key ssh.PublicKey) string {
	return "[" + cfg.Address + "]:" + itoa(cfg.Port) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
