// Package esxisim is an in-process SSH server that behaves like a VMware ESXi
// host as far as an SSH client can tell: keyboard-interactive and public-key
// logins with an account lockout, exec channels only, a BusyBox-like mini shell
// implementing exactly the client/simulator contract, a datastore tree served
// from a local directory, a VM registry with vim-cmd outputs in the formats of
// real hosts, power and VMware Tools state, file locks on running VMs, and
// fault injection for tests.
//
// It is deliberately independent of internal/esxi (the client) so that it
// catches the client's mistakes instead of sharing them.
package esxisim

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// DefaultVersion is what `vmware -v` prints unless Options.Version is set.
const DefaultVersion = "VMware ESXi 8.0.2 build-22380479"

// DefaultMaxAuthFailures is the number of failed logins after which an account
// is locked, as on ESXi (Security.AccountLockFailures = 10).
const DefaultMaxAuthFailures = 10

// KeyType names a host key algorithm family for GenerateHostKey.
type KeyType string

// Host key types.
const (
	KeyEd25519 KeyType = "ed25519"
	KeyECDSA   KeyType = "ecdsa" // ECDSA P-256
	KeyRSA     KeyType = "rsa"   // RSA 3072
)

// GenerateHostKey returns a new random host key of the given type.
func GenerateHostKey(t KeyType) (ssh.Signer, error) {
	var key any
	var err error
	switch t {
	case KeyEd25519, "":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case KeyECDSA:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyRSA:
		key, err = rsa.GenerateKey(rand.Reader, 3072)
	default:
		return nil, fmt.Errorf("esxisim: unknown host key type %q", t)
	}
	if err != nil {
		return nil, fmt.Errorf("esxisim: generating %s host key: %w", t, err)
	}
	return ssh.NewSignerFromKey(key)
}

// User is an account on the simulated host.
type User struct {
	// Name is the login name, e.g. "root".
	Name string
	// Password is answered to the keyboard-interactive "Password:" prompt.
	// Empty disables password logins for this user.
	Password string
	// AuthorizedKeys are accepted for public-key logins (the content of
	// /etc/ssh/keys-<user>/authorized_keys on a real host).
	AuthorizedKeys []ssh.PublicKey
}

// Options configures a Server.
type Options struct {
	// Root is the local directory served as /vmfs/volumes: Root/<datastore>/...
	Root string
	// Users are the accounts that may log in.
	Users []User
	// HostKey is the server's host key; a new ed25519 key is generated if nil
	// (an ECDSA P-256 key when FIPS is set).
	HostKey ssh.Signer
	// FIPS makes the server behave like ESXi 8 in FIPS mode: host key
	// algorithms limited to ecdsa-sha2-* and rsa-sha2-256/512, client keys
	// limited to ECDSA and RSA (ed25519 refused), FIPS ciphers, MACs and KEX.
	FIPS bool
	// MaxAuthFailures locks an account after that many failed password
	// attempts (DefaultMaxAuthFailures if 0; negative disables the lockout).
	MaxAuthFailures int
	// FirstVmid is the Vmid of the first registered VM (default 1).
	FirstVmid int
	// VmidStep is the increment between Vmids (default 1; ESXi 5 used 16).
	VmidStep int
	// Version is printed by `vmware -v` (DefaultVersion if empty).
	Version string
	// ShutdownDelay is how long a guest takes to power off after
	// `power.shutdown` (default 2s).
	ShutdownDelay time.Duration
	// Legacy renders vim-cmd object dumps and faults like ESXi 4/5 (with
	// `dynamicType = <unset>` and a comma after every field) instead of the
	// ESXi 6.5+/8 style (no dynamicType, no comma after the last field).
	Legacy bool
}

// Stats counts what the server has served.
type Stats struct {
	// ActiveExecs is the number of exec sessions running now.
	ActiveExecs int64
	// Conns is the number of SSH connections that completed authentication.
	Conns int64
	// Execs is the number of exec requests (one per session channel).
	Execs int64
	// Commands is the number of simple commands run by the shell.
	Commands int64
	// VimCmds is the number of vim-cmd invocations (a subset of Commands).
	VimCmds int64
	// StdoutBytes is the number of stdout bytes sent to clients.
	StdoutBytes int64
	// AuthFailures is the number of failed password attempts.
	AuthFailures int64
	// PowerCommands counts power.off and power.shutdown commands that ran
	// on the host (not those received and abandoned before running, as when
	// the client vanished during a command delay).
	PowerCommands int64
	// RejectedRequests counts refused shell/pty/subsystem requests and
	// refused non-session channels (such as direct-tcpip).
	RejectedRequests int64
	// PeakExecs is the most exec sessions that ran at once, over all
	// connections.
	PeakExecs int64
}

// LoggedCommand is one exec command line as the host's auth.log records it.
type LoggedCommand struct {
	Time    time.Time
	User    string
	Command string
}

// Server is a simulated ESXi host. Create it with New, then Start it.
// All methods are safe for concurrent use.
type Server struct {
	opts Options
	root *os.Root

	mu        sync.Mutex
	hostKey   ssh.Signer
	listener  net.Listener
	conns     map[net.Conn]struct{}
	closed    bool
	failures  map[string]int
	lockdown  bool
	cmdLog    []LoggedCommand
	sparse    []SparseRead
	vms       []*vmEntry
	nextVmid  int
	timers    map[*time.Timer]struct{}
	delay     time.Duration
	dropBytes int64 // remaining stdout bytes before a drop; <0 when disarmed
	dropCmds  int   // remaining commands before a drop; <0 when disarmed
	vimFail   int
	vimMode   VimFailure
	// lostReplies is the DropAfterRunning fault: commands matching
	// lostMatch run, then their connection drops before the answer.
	lostMatch   string
	lostReplies int
	lostFired   int
	// sysFiles are host files kept in memory outside /vmfs/volumes (system
	// VMs' .vmx under SystemVMDir), by host path.
	sysFiles map[string][]byte
	// inventoryXML replaces the generated vmInventory.xml when
	// inventoryXMLSet is true.
	inventoryXML    string
	inventoryXMLSet bool

	stats struct {
		conns, execs, commands, vimcmds, stdout, authFail, rejected, power atomic.Int64
		// active exec sessions now, and the most at once.
		active, peak atomic.Int64
	}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a server for opts. It does not listen yet: call Start.
func New(opts Options) (*Server, error) {
	if opts.Root == "" {
		return nil, errors.New("esxisim: Options.Root is required")
	}
	root, err := os.OpenRoot(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("esxisim: opening datastore root: %w", err)
	}
	if opts.MaxAuthFailures == 0 {
		opts.MaxAuthFailures = DefaultMaxAuthFailures
	}
	if opts.FirstVmid == 0 {
		opts.FirstVmid = 1
	}
	if opts.VmidStep <= 0 {
		opts.VmidStep = 1
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if opts.ShutdownDelay == 0 {
		opts.ShutdownDelay = 2 * time.Second
	}
	key := opts.HostKey
	if key == nil {
		kt := KeyEd25519
		if opts.FIPS {
			kt = KeyECDSA
		}
		if key, err = GenerateHostKey(kt); err != nil {
			root.Close()
			return nil, err
		}
	}
	s := &Server{
		opts:      opts,
		root:      root,
		conns:     map[net.Conn]struct{}{},
		failures:  map[string]int{},
		timers:    map[*time.Timer]struct{}{},
		nextVmid:  opts.FirstVmid,
		dropBytes: -1,
		dropCmds:  -1,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.SetHostKey(key); err != nil {
		root.Close()
		return nil, err
	}
	return s, nil
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves connections in the
// background until Close.
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("esxisim: listen %s: %w", addr, err)
	}
	s.mu.Lock()
	if s.closed || s.listener != nil {
		s.mu.Unlock()
		ln.Close()
		return errors.New("esxisim: server already started or closed")
	}
	s.listener = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go s.acceptLoop(ln)
	return nil
}

// StopListening simulates the host going down (a reboot, or its SSH
// service stopped): it closes the listener and drops every connection, so
// new connections are refused, but keeps the host's state (VMs, files,
// faults). Start it again, on the same address to model a reboot, with
// Start(addr).
func (s *Server) StopListening() {
	s.mu.Lock()
	ln := s.listener
	s.listener = nil
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// Addr returns the listening address ("127.0.0.1:port"), or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Close stops listening, drops every connection, cancels pending power
// transitions and waits for all of the server's goroutines to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	if s.listener != nil {
		s.listener.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	for t := range s.timers {
		t.Stop()
	}
	s.timers = map[*time.Timer]struct{}{}
	s.mu.Unlock()
	s.wg.Wait()
	return s.root.Close()
}

// HostKey returns the current host public key.
func (s *Server) HostKey() ssh.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hostKey.PublicKey()
}

// Fingerprint returns the current host key's SHA256 fingerprint
// ("SHA256:..."), as `ssh-keygen -l` prints it.
func (s *Server) Fingerprint() string {
	return ssh.FingerprintSHA256(s.HostKey())
}

// SetHostKey replaces the host key for new connections, as when a host is
// reinstalled. In FIPS mode an ed25519 key is refused and RSA keys are
// offered with rsa-sha2-256/512 only.
func (s *Server) SetHostKey(key ssh.Signer) error {
	if key == nil {
		return errors.New("esxisim: nil host key")
	}
	if s.opts.FIPS {
		switch key.PublicKey().Type() {
		case ssh.KeyAlgoRSA:
			as, ok := key.(ssh.AlgorithmSigner)
			if !ok {
				return errors.New("esxisim: RSA host key cannot sign with rsa-sha2")
			}
			mk, err := ssh.NewSignerWithAlgorithms(as, []string{ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512})
			if err != nil {
				return fmt.Errorf("esxisim: restricting RSA host key: %w", err)
			}
			key = mk
		case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		default:
			return fmt.Errorf("esxisim: host key type %s is not allowed in FIPS mode", key.PublicKey().Type())
		}
	}
	s.mu.Lock()
	s.hostKey = key
	s.mu.Unlock()
	return nil
}

// SetLockdown turns lockdown mode on or off: while on, every login is refused.
func (s *Server) SetLockdown(on bool) {
	s.mu.Lock()
	s.lockdown = on
	s.mu.Unlock()
}

// AuthFailures returns the number of consecutive failed password attempts
// recorded for user (reset by a successful login or Unlock).
func (s *Server) AuthFailures(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures[user]
}

// Locked reports whether user is locked out after too many failures.
func (s *Server) Locked(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lockedLocked(user)
}

func (s *Server) lockedLocked(user string) bool {
	return s.opts.MaxAuthFailures > 0 && s.failures[user] >= s.opts.MaxAuthFailures
}

// Unlock clears user's failure counter, as when the lockout period expires.
func (s *Server) Unlock(user string) {
	s.mu.Lock()
	delete(s.failures, user)
	s.mu.Unlock()
}

// Stats returns the counters of what the server has served so far.
func (s *Server) Stats() Stats {
	return Stats{
		Conns:            s.stats.conns.Load(),
		Execs:            s.stats.execs.Load(),
		Commands:         s.stats.commands.Load(),
		VimCmds:          s.stats.vimcmds.Load(),
		StdoutBytes:      s.stats.stdout.Load(),
		AuthFailures:     s.stats.authFail.Load(),
		RejectedRequests: s.stats.rejected.Load(),
		PowerCommands:    s.stats.power.Load(),
		PeakExecs:        s.stats.peak.Load(),
		ActiveExecs:      s.stats.active.Load(),
	}
}

// ResetStats zeroes the counters and clears the command log.
func (s *Server) ResetStats() {
	s.stats.conns.Store(0)
	s.stats.execs.Store(0)
	s.stats.commands.Store(0)
	s.stats.vimcmds.Store(0)
	s.stats.stdout.Store(0)
	s.stats.authFail.Store(0)
	s.stats.rejected.Store(0)
	s.stats.power.Store(0)
	s.stats.peak.Store(s.stats.active.Load())
	s.mu.Lock()
	s.cmdLog = nil
	s.sparse = nil
	s.mu.Unlock()
}

// SparseRead is one range the host's sparse reader was asked for.
type SparseRead struct {
	Path           string
	Offset, Length int64
}

// SparseReads returns the ranges the sparse reader was asked for, in
// order: the ranges on the command line of a reader run per range, and
// those a long-lived reader (--serve) was sent on its stdin, which no
// command log shows.
func (s *Server) SparseReads() []SparseRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SparseRead(nil), s.sparse...)
}

func (s *Server) logSparseRead(r SparseRead) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sparse = append(s.sparse, r)
}

// ddReadRe matches the read command of a host without Python, as
// internal/esxi sends it: dd 'if=PATH' bs=N skip=S count=C.
var ddReadRe = regexp.MustCompile(`^dd 'if=(.*)' bs=(\d+) skip=(\d+) count=(\d+)$`)

// DDReads returns the ranges read with dd, in order, from the command log
// (a host without Python runs one dd per range).
func (s *Server) DDReads() []SparseRead {
	var out []SparseRead
	for _, c := range s.Commands() {
		m := ddReadRe.FindStringSubmatch(c)
		if m == nil {
			continue
		}
		bs, _ := strconv.ParseInt(m[2], 10, 64)
		skip, _ := strconv.ParseInt(m[3], 10, 64)
		count, _ := strconv.ParseInt(m[4], 10, 64)
		out = append(out, SparseRead{Path: strings.ReplaceAll(m[1], `'\''`, "'"), Offset: skip * bs, Length: count * bs})
	}
	return out
}

// CommandLog returns every exec command line received, in order, as the
// host's auth.log would record it ("User 'root' running command '...'").
func (s *Server) CommandLog() []LoggedCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LoggedCommand(nil), s.cmdLog...)
}

// Commands returns the exec command lines received, in order.
func (s *Server) Commands() []string {
	log := s.CommandLog()
	out := make([]string, len(log))
	for i, l := range log {
		out[i] = l.Command
	}
	return out
}

// CommandsContaining returns the logged command lines that contain sub,
// in order.
func (s *Server) CommandsContaining(sub string) []string {
	var out []string
	for _, c := range s.Commands() {
		if strings.Contains(c, sub) {
			out = append(out, c)
		}
	}
	return out
}

// authConfig builds the ssh.ServerConfig for one new connection, so that a
// host key changed with SetHostKey applies to the next connection.
func (s *Server) authConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-OpenSSH_9.3",
		MaxAuthTries:  -1, // the lockout is ours, per account
		KeyboardInteractiveCallback: func(meta ssh.ConnMetadata, challenge ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			answers, err := challenge("", "", []string{"Password: "}, []bool{false})
			if err != nil {
				return nil, err
			}
			return s.checkPassword(meta.User(), answers)
		},
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			return s.checkKey(meta.User(), key)
		},
	}
	if s.opts.FIPS {
		cfg.PublicKeyAuthAlgorithms = []string{
			ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
			ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
		}
		cfg.Ciphers = []string{ssh.CipherAES256GCM, ssh.CipherAES128GCM, ssh.CipherAES256CTR, ssh.CipherAES192CTR, ssh.CipherAES128CTR}
		cfg.MACs = []string{ssh.HMACSHA256, ssh.HMACSHA512}
		cfg.KeyExchanges = []string{ssh.KeyExchangeECDHP256, ssh.KeyExchangeECDHP384, ssh.KeyExchangeECDHP521, ssh.KeyExchangeDH16SHA512, ssh.KeyExchangeDH14SHA256}
	}
	s.mu.Lock()
	cfg.AddHostKey(s.hostKey)
	s.mu.Unlock()
	return cfg
}

var errDenied = errors.New("permission denied")

func (s *Server) findUser(name string) (User, bool) {
	for _, u := range s.opts.Users {
		if u.Name == name {
			return u, true
		}
	}
	return User{}, false
}

func (s *Server) checkPassword(user string, answers []string) (*ssh.Permissions, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lockdown || s.closed {
		return nil, errDenied
	}
	u, ok := s.findUser(user)
	good := ok && u.Password != "" && len(answers) == 1 && answers[0] == u.Password
	if s.lockedLocked(user) {
		// A locked account refuses even the right password, and every attempt counts.
		good = false
	}
	if !good {
		s.failures[user]++
		s.stats.authFail.Add(1)
		return nil, errDenied
	}
	delete(s.failures, user)
	return &ssh.Permissions{}, nil
}

func (s *Server) checkKey(user string, key ssh.PublicKey) (*ssh.Permissions, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lockdown || s.closed || s.lockedLocked(user) {
		return nil, errDenied
	}
	u, ok := s.findUser(user)
	if !ok {
		return nil, errDenied
	}
	for _, k := range u.AuthorizedKeys {
		if k.Type() == key.Type() && string(k.Marshal()) == string(key.Marshal()) {
			return &ssh.Permissions{}, nil
		}
	}
	return nil, errDenied
}
