package esxisim

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestAuth(t *testing.T) {
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edSigner, _ := ssh.NewSignerFromKey(edPriv)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecSigner, _ := ssh.NewSignerFromKey(ecPriv)
	s := newServer(t, func(o *Options) {
		o.Users[0].AuthorizedKeys = []ssh.PublicKey{edSigner.PublicKey(), ecSigner.PublicKey()}
		o.MaxAuthFailures = 3
	})
	tests := []struct {
		name string
		user string
		auth ssh.AuthMethod
		ok   bool
	}{
		{"keyboard-interactive", "root", passwordAuth(testPassword), true},
		{"password method refused", "root", ssh.Password(testPassword), false},
		{"public key", "root", ssh.PublicKeys(edSigner), true},
		{"unknown user key", "admin", ssh.PublicKeys(edSigner), false},
	}
	for _, tt := range tests {
		c, err := dialWith(s, tt.user, tt.auth)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if c != nil {
			c.Close()
		}
	}
	// The prompt is "Password: " with echo off, like ESXi.
	var prompts []string
	c, err := dialWith(s, "root", ssh.KeyboardInteractive(func(_, _ string, qs []string, echo []bool) ([]string, error) {
		prompts = append(prompts, qs...)
		if echo[0] {
			t.Errorf("password prompt echoes")
		}
		return []string{testPassword}, nil
	}))
	if err != nil || len(prompts) != 1 || prompts[0] != "Password: " {
		t.Errorf("prompts %q, err %v", prompts, err)
	}
	c.Close()

	// Lockout after MaxAuthFailures wrong passwords: even the right one fails.
	for i := 0; i < 3; i++ {
		if _, err := dialWith(s, "root", passwordAuth("wrong")); err == nil {
			t.Fatal("wrong password accepted")
		}
	}
	if got := s.AuthFailures("root"); got != 3 || !s.Locked("root") {
		t.Errorf("failures %d locked %v, want 3 true", got, s.Locked("root"))
	}
	if _, err := dialWith(s, "root", passwordAuth(testPassword)); err == nil {
		t.Error("locked account accepted the right password")
	}
	if _, err := dialWith(s, "root", ssh.PublicKeys(ecSigner)); err == nil {
		t.Error("locked account accepted a key")
	}
	s.Unlock("root")
	c, err = dialWith(s, "root", passwordAuth(testPassword))
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	c.Close()

	s.SetLockdown(true)
	if _, err := dialWith(s, "root", passwordAuth(testPassword)); err == nil {
		t.Error("lockdown mode accepted a login")
	}
	s.SetLockdown(false)
}

func TestFIPSAndHostKeys(t *testing.T) {
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edSigner, _ := ssh.NewSignerFromKey(edPriv)
	rsaKey, err := GenerateHostKey(KeyRSA)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, func(o *Options) {
		o.FIPS = true
		o.HostKey = rsaKey
		o.Users[0].AuthorizedKeys = []ssh.PublicKey{edSigner.PublicKey()}
	})
	// ssh-rsa (SHA-1) is not offered, rsa-sha2-256 is.
	for _, tt := range []struct {
		algo string
		ok   bool
	}{{ssh.KeyAlgoRSA, false}, {ssh.KeyAlgoRSASHA256, true}, {ssh.KeyAlgoED25519, false}} {
		c, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{passwordAuth(testPassword)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), HostKeyAlgorithms: []string{tt.algo}, Timeout: 5 * time.Second})
		if (err == nil) != tt.ok {
			t.Errorf("host key algorithm %s: err %v, want ok=%v", tt.algo, err, tt.ok)
		}
		if c != nil {
			c.Close()
		}
	}
	// ed25519 client keys are refused in FIPS mode (esxi802-ssh-ed25519-key-rejected.txt).
	if _, err := dialWith(s, "root", ssh.PublicKeys(edSigner)); err == nil {
		t.Error("FIPS mode accepted an ed25519 client key")
	}
	if err := s.SetHostKey(edSigner); err == nil {
		t.Error("FIPS mode accepted an ed25519 host key")
	}

	// SetHostKey: a reinstalled host presents a new key; pinned clients fail.
	old := s.HostKey()
	ec, _ := GenerateHostKey(KeyECDSA)
	if err := s.SetHostKey(ec); err != nil {
		t.Fatal(err)
	}
	_, err = ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{passwordAuth(testPassword)},
		HostKeyCallback: ssh.FixedHostKey(old), Timeout: 5 * time.Second})
	if err == nil {
		t.Error("client pinned to the old key connected after SetHostKey")
	}
	if !strings.HasPrefix(s.Fingerprint(), "SHA256:") || s.Fingerprint() != ssh.FingerprintSHA256(ec.PublicKey()) {
		t.Errorf("Fingerprint = %q", s.Fingerprint())
	}
}

func TestChannelsAndRequests(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	// direct-tcpip refused.
	if _, err := c.Dial("tcp", "127.0.0.1:22"); err == nil {
		t.Error("direct-tcpip accepted")
	}
	// shell and pty refused.
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err == nil {
		t.Error("pty accepted")
	}
	if err := sess.Shell(); err == nil {
		t.Error("shell accepted")
	}
	sess.Close()
	if st := s.Stats(); st.RejectedRequests < 3 {
		t.Errorf("RejectedRequests = %d, want >= 3", st.RejectedRequests)
	}
	// stdout and stderr are separate, exit status sent.
	r := mustRun(t, c, "echo out; cat /nope")
	if r.out != "out\n" || r.err != "cat: can't open '/nope': No such file or directory\n" || r.code != 1 {
		t.Errorf("got %+v", r)
	}
}

func TestStatsAndCommandLog(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	mustRun(t, c, "echo a; echo b && vim-cmd vmsvc/getallvms")
	mustRun(t, c, "echo 'x y'")
	st := s.Stats()
	if st.Conns != 1 || st.Execs != 2 || st.Commands != 4 || st.VimCmds != 1 {
		t.Errorf("stats %+v, want 1 conn, 2 execs, 4 commands, 1 vim-cmd", st)
	}
	want := []string{"echo a; echo b && vim-cmd vmsvc/getallvms", "echo 'x y'"}
	if got := s.Commands(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("command log %q, want %q", got, want)
	}
	if log := s.CommandLog(); log[0].User != "root" {
		t.Errorf("log user %q", log[0].User)
	}
	s.ResetStats()
	if st := s.Stats(); st.Execs != 0 || len(s.Commands()) != 0 {
		t.Errorf("after reset: %+v", st)
	}
}

func TestFaultDropAfterBytes(t *testing.T) {
	s := newServer(t, nil)
	writeFile(t, s, "ds/big", make([]byte, 1<<20))
	c := dial(t, s)
	mustRun(t, c, "echo 12345")
	s.DropAfterBytes(1000)
	r := run(t, c, "cat /vmfs/volumes/ds/big")
	if r.runErr == nil {
		t.Errorf("transfer finished (exit %d, %d bytes) despite the drop", r.code, len(r.out))
	}
	if len(r.out) > 1000 {
		t.Errorf("got %d bytes, want <= 1000", len(r.out))
	}
	// The connection is gone; a new one works and the fault is one-shot.
	c2 := dial(t, s)
	if r := mustRun(t, c2, "cat /vmfs/volumes/ds/big"); len(r.out) != 1<<20 {
		t.Errorf("after drop: %d bytes", len(r.out))
	}
}

func TestFaultDropAfterCommandsAndDelay(t *testing.T) {
	s := newServer(t, nil)
	c := dial(t, s)
	s.DropAfterCommands(2)
	r := run(t, c, "echo a; echo b; echo c")
	if r.runErr == nil || r.out != "a\nb\n" {
		t.Errorf("drop after 2 commands: out %q err %v", r.out, r.runErr)
	}
	c2 := dial(t, s)
	s.SetCommandDelay(100 * time.Millisecond)
	start := time.Now()
	mustRun(t, c2, "echo a; echo b")
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("2 delayed commands took %v", el)
	}
	s.ClearFaults()
	start = time.Now()
	mustRun(t, c2, "echo a")
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Errorf("after ClearFaults a command took %v", el)
	}
}

// goroutinesIn counts goroutines whose stack mentions the package.
func goroutinesIn(pkg string) int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	count := 0
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, pkg) && !strings.Contains(g, "testing.tRunner") {
			count++
		}
	}
	return count
}

func TestCloseEndsEverything(t *testing.T) {
	s := newServer(t, nil)
	writeFile(t, s, "ds/big", make([]byte, 8<<20))
	id, _, err := s.AddVM(VMSpec{Name: "v", Disks: []DiskSpec{{CapacityBytes: 1 << 20}}, Power: PoweredOn, Tools: ToolsRunning})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	mustRun(t, c, "vim-cmd vmsvc/power.shutdown "+strconv.Itoa(id))
	// A transfer in progress whose reader is stalled.
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := sess.StdoutPipe()
	if err := sess.Start("cat /vmfs/volumes/ds/big"); err != nil {
		t.Fatal(err)
	}
	s.SetCommandDelay(time.Hour)
	sess2, _ := c.NewSession()
	_ = sess2.Start("echo never")
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	_, _ = io.Copy(io.Discard, out)
	if err := sess.Wait(); err == nil {
		t.Error("session survived Close")
	}
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for goroutinesIn("esxisim.(*") > 0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines left after Close:\n%s", buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := dialWith(s, "root", passwordAuth(testPassword)); err == nil {
		t.Error("dial after Close succeeded")
	}
}
