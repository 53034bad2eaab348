package esxi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/fault"
)

// Logger receives debug lines. It must be safe for concurrent use. Lines
// never contain secrets.
type Logger func(format string, args ...any)

// Client runs commands on one ESXi host over a single SSH connection with a
// bounded pool of concurrent exec sessions. It connects lazily on first use
// and reconnects after the connection drops (network errors only). A
// refused authentication or a host key failure is sticky: the client never
// tries again, because ESXi locks the account after repeated failures.
//
// A Client is safe for concurrent use.
type Client struct {
	cfg    HostConfig
	signer ssh.Signer
	logf   Logger
	sem    chan struct{}

	// PollInterval is how often Shutdown polls power.getstate (default 2s).
	pollInterval time.Duration

	mu           sync.Mutex
	conn         *ssh.Client
	dialing      chan struct{}
	fatal        error    // sticky: authentication refused, host key failure
	hostKeyAlgos []string // learned after the first verified handshake
	closed       bool
	// lastAlive is when this host was last seen answering: a handshake
	// that succeeded, or a connection that was up until it ended. Within
	// rebootWindow of it, a refused, reset or unreachable connection means
	// the host is down for a while (rebooting, hostd or SSH restarting),
	// not that SSH was never enabled.
	lastAlive    time.Time
	rebootWindow time.Duration
	// hostKey is the SHA256 fingerprint of the host key the last
	// verified handshake saw.
	hostKey string

	// streams are the clients of StreamClients; parent is the client a
	// stream client belongs to.
	streams []*Client
	parent  *Client
	// servers are the idle long-lived sparse readers of this client and
	// its stream clients (sparseserve.go).
	servers serverFamily
}

// RebootWindow is how long after a host was last seen answering a refused
// or failed connection is still taken for a reboot (and retried) rather
// than for a disabled SSH service. An ESXi host reboots in 5-15 minutes.
const RebootWindow = 30 * time.Minute

// NewClient validates cfg and returns a client that has not connected yet.
// Most callers use a [Registry] instead so that every caller in the process
// shares one connection per host.
func NewClient(cfg HostConfig, logf Logger) (*Client, error) {
	cfg = cfg.withDefaults()
	signer, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.InsecureIgnoreHostKey {
		logf("esxi %s: WARNING: host key verification is disabled (insecure_ignore_host_key)", cfg.Name)
	}
	return &Client{
		cfg:          cfg,
		signer:       signer,
		logf:         logf,
		sem:          make(chan struct{}, cfg.MaxSessions),
		pollInterval: 2 * time.Second,
		rebootWindow: RebootWindow,
	}, nil
}

// Name returns the configured host name.
func (c *Client) Name() string { return c.cfg.Name }

// Config returns the client's configuration with defaults applied and the
// secrets removed.
func (c *Client) Config() HostConfig {
	cfg := c.cfg
	cfg.Password = ""
	cfg.PrivateKeyPEM = ""
	return cfg
}

// Credential is what the client logs in with: a private key when it has
// one, else its password (the other is empty). It is for a copy Job that
// logs in as this client does (cluster execution hands it over in a
// Secret); never log or print it.
func (c *Client) Credential() (password, privateKeyPEM string) {
	if c.cfg.PrivateKeyPEM != "" {
		return "", c.cfg.PrivateKeyPEM
	}
	return c.cfg.Password, ""
}

// HostKeyFingerprint is the SHA256 fingerprint ("SHA256:<base64>") of the
// host key this client last verified in a handshake, "" before the first.
func (c *Client) HostKeyFingerprint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hostKey
}

// Close closes the connection. Further operations fail.
func (c *Client) Close() error {
	c.family().closeIdle(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.closeStreams()
	if c.conn != nil {
		err := c.conn.Close()
		c.conn = nil
		return err
	}
	return nil
}

// connection returns the live connection, dialing if there is none. Only
// one dial runs at a time; other callers wait for it (or their ctx).
func (c *Client) connection(ctx context.Context) (*ssh.Client, error) {
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return nil, &Error{Class: Permanent, Host: c.cfg.Name, Msg: "client is closed"}
		case c.fatal != nil:
			err := c.fatal
			c.mu.Unlock()
			return nil, err
		case c.conn != nil:
			conn := c.conn
			c.mu.Unlock()
			return conn, nil
		case c.dialing != nil:
			ch := c.dialing
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, c.ctxError(ctx, "waiting for the connection")
			}
		}
		ch := make(chan struct{})
		c.dialing = ch
		algos := c.hostKeyAlgos
		c.mu.Unlock()
		if err := c.parentFatal(ctx); err != nil {
			c.mu.Lock()
			c.dialing = nil
			close(ch)
			c.mu.Unlock()
			return nil, err
		}

		conn, learned, err := c.dial(ctx, algos)

		c.mu.Lock()
		c.dialing = nil
		close(ch)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && (errors.Is(err, ErrAuthFailed) || errors.Is(err, ErrHostKeyMismatch) || errors.Is(err, ErrUnknownHostKey)) {
				c.fatal = err
			}
			c.mu.Unlock()
			return nil, err
		}
		if c.closed {
			c.mu.Unlock()
			conn.Close()
			continue
		}
		c.conn = conn
		c.lastAlive = time.Now()
		if learned != nil {
			c.hostKeyAlgos = learned
		}
		c.mu.Unlock()
		go c.watch(conn)
		return conn, nil
	}
}

// dropConn forgets conn (if it is still current) and closes it.
func (c *Client) dropConn(conn *ssh.Client) {
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.mu.Unlock()
	conn.Close()
}

// watch sends keepalives and forgets the connection when it dies.
func (c *Client) watch(conn *ssh.Client) {
	done := make(chan struct{})
	go func() {
		_ = conn.Wait()
		close(done)
	}()
	if c.cfg.KeepAliveInterval > 0 {
		t := time.NewTicker(c.cfg.KeepAliveInterval)
		defer t.Stop()
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				reply := make(chan error, 1)
				go func() {
					_, _, err := conn.SendRequest("keepalive@openssh.com", true, nil)
					reply <- err
				}()
				select {
				case err := <-reply:
					if err != nil {
						c.logf("esxi %s: keepalive failed, dropping connection: %v", c.cfg.Name, err)
						c.dropConn(conn)
					}
				case <-time.After(c.cfg.KeepAliveInterval):
					c.logf("esxi %s: no keepalive reply for %s, dropping connection", c.cfg.Name, c.cfg.KeepAliveInterval)
					c.dropConn(conn)
				case <-done:
					break loop
				}
			}
		}
	}
	<-done
	c.mu.Lock()
	c.lastAlive = time.Now() // it was up until now
	c.mu.Unlock()
	c.dropConn(conn)
}

// dial connects and authenticates. When only a fingerprint is pinned and
// the key type is unknown, it tries one host key family per handshake
// (authentication only ever happens after the key matched, so this never
// costs a failed login).
func (c *Client) dial(ctx context.Context, learned []string) (*ssh.Client, []string, error) {
	var known ssh.HostKeyCallback
	if c.cfg.KnownHostsFile != "" {
		cb, err := knownhosts.New(c.cfg.KnownHostsFile)
		if err != nil {
			return nil, nil, &Error{Class: NeedsHuman, Kind: ErrUnknownHostKey, Host: c.cfg.Name, Op: "reading known_hosts",
				Msg: fmt.Sprintf("cannot read known_hosts file %s: fix the path or the file", c.cfg.KnownHostsFile), Err: err}
		}
		known = cb
	}
	var families [][]string
	switch {
	case learned != nil:
		families = [][]string{learned}
	case c.cfg.HostKeyFingerprint != "":
		families = hostKeyFamilies
	default:
		families = [][]string{nil} // decided after TCP connect (known_hosts) or defaults
	}
	var offered []ssh.PublicKey
	var lastErr error
	for _, fam := range families {
		conn, key, err := c.handshake(ctx, fam, known)
		if key != nil {
			offered = append(offered, key)
		}
		if err == nil {
			return conn, algorithmsForKeyType(key.Type()), nil
		}
		lastErr = err
		if errors.Is(err, errFingerprintMismatch) || strings.Contains(err.Error(), "no common algorithm for host key") {
			continue
		}
		break
	}
	if errors.Is(lastErr, errFingerprintMismatch) || strings.Contains(lastErr.Error(), "no common algorithm for host key") {
		return nil, nil, hostKeyError(c.cfg, offered, errFingerprintMismatch)
	}
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	if errors.As(lastErr, &ke) || errors.As(lastErr, &re) {
		return nil, nil, hostKeyError(c.cfg, offered, lastErr)
	}
	return nil, nil, lastErr
}

func (c *Client) handshake(ctx context.Context, algos []string, known ssh.HostKeyCallback) (*ssh.Client, ssh.PublicKey, error) {
	addr := c.cfg.addr()
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	c.logf("esxi %s: connecting to %s as %s", c.cfg.Name, addr, c.cfg.User)
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, c.dialError(ctx, err)
	}
	if algos == nil && known != nil {
		algos = knownHostAlgorithms(known, addr, raw.RemoteAddr())
	}
	check := &hostKeyCheck{cfg: c.cfg, known: known}
	conf := &ssh.ClientConfig{
		User:              c.cfg.User,
		Auth:              c.authMethods(),
		HostKeyCallback:   check.callback,
		HostKeyAlgorithms: algos,
		Timeout:           c.cfg.DialTimeout,
		ClientVersion:     "SSH-2.0-terraform-provider-vmmigration",
	}
	conf.Ciphers = preferredCiphers

	// The handshake honours the dial timeout and ctx.
	deadline := time.Now().Add(c.cfg.DialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = raw.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(raw, addr, conf)
	stop()
	if err != nil {
		raw.Close()
		if errors.Is(err, errFingerprintMismatch) {
			return nil, check.offered, err
		}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		if errors.As(err, &ke) || errors.As(err, &re) {
			return nil, check.offered, err
		}
		if check.verified && strings.Contains(err.Error(), "unable to authenticate") {
			return nil, check.offered, c.authError(err)
		}
		if ctx.Err() != nil {
			return nil, check.offered, c.ctxError(ctx, "connecting")
		}
		msg := fmt.Sprintf("SSH handshake with %s failed: retry; if it persists check that %s is the host's SSH service", addr, addr)
		if c.hasAnswered() {
			msg = fmt.Sprintf("SSH handshake with %s failed: %s", addr, rebootingMsg)
		}
		return nil, check.offered, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: "SSH handshake", Msg: msg, Err: err}
	}
	_ = raw.SetDeadline(time.Time{})
	fp := ssh.FingerprintSHA256(check.offered)
	c.logf("esxi %s: connected, host key %s %s", c.cfg.Name, check.offered.Type(), fp)
	c.mu.Lock()
	c.hostKey = fp
	c.mu.Unlock()
	return ssh.NewClient(sc, chans, reqs), check.offered, nil
}

func (c *Client) authMethods() []ssh.AuthMethod {
	var m []ssh.AuthMethod
	if c.signer != nil {
		m = append(m, ssh.PublicKeys(c.signer))
	}
	if c.cfg.Password != "" {
		m = append(m, ssh.KeyboardInteractive(answerOnce(c.cfg.Password)))
	}
	return m
}

// answerOnce answers every prompt of the first keyboard-interactive round
// with the password and refuses to answer a second round: a second password
// prompt means the first answer was wrong, and answering again would count
// as another failed login towards ESXi's account lockout.
func answerOnce(password string) ssh.KeyboardInteractiveChallenge {
	answered := false
	return func(name, instruction string, questions []string, echos []bool) ([]string, error) {
		if len(questions) == 0 {
			return nil, nil
		}
		if answered {
			return nil, errors.New("the host asked for the password again; not answering, to avoid locking the account")
		}
		answered = true
		answers := make([]string, len(questions))
		for i := range answers {
			answers[i] = password
		}
		return answers, nil
	}
}

func (c *Client) authError(err error) *Error {
	hint := "check the user name and password/key; after repeated failures ESXi locks the account for 2-15 minutes (the provider will not retry); if the host is in lockdown mode, add the user to the exception users or disable lockdown"
	if c.signer != nil && c.signer.PublicKey().Type() == ssh.KeyAlgoED25519 {
		hint += "; ESXi 8 in FIPS mode refuses ed25519 keys: use an RSA (>= 2048 bits) or ECDSA key"
	}
	return &Error{Class: NeedsHuman, Kind: ErrAuthFailed, Host: c.cfg.Name, Op: "authenticating",
		Msg: fmt.Sprintf("host %s (%s) refused authentication as %q: %s", c.cfg.Name, c.cfg.addr(), c.cfg.User, hint), Err: err}
}

// hasAnswered reports whether this host answered this client within the
// last rebootWindow.
func (c *Client) hasAnswered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.lastAlive.IsZero() && time.Since(c.lastAlive) < c.rebootWindow
}

// rebootingMsg is the advice for a host that answered before and now
// refuses, resets or cannot be reached.
const rebootingMsg = "the host answered before and may be rebooting (or its SSH service restarting); retrying"

func (c *Client) dialError(ctx context.Context, err error) *Error {
	if ctx.Err() != nil {
		return c.ctxError(ctx, "connecting")
	}
	if c.hasAnswered() {
		return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: "connecting",
			Msg: fmt.Sprintf("cannot connect to %s: %s", c.cfg.addr(), rebootingMsg), Err: err}
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &Error{Class: NeedsHuman, Kind: ErrSSHUnavailable, Host: c.cfg.Name, Op: "connecting",
			Msg: fmt.Sprintf("%s refused the connection: enable the SSH service on the host (Host > Actions > Services > Enable Secure Shell) and check that lockdown mode is off", c.cfg.addr()), Err: err}
	}
	return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: "connecting",
		Msg: fmt.Sprintf("cannot reach %s: check the address, routing and firewall; retrying may help", c.cfg.addr()), Err: err}
}

func (c *Client) ctxError(ctx context.Context, op string) *Error {
	return &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Msg: "cancelled or timed out", Err: ctx.Err()}
}

// maxCapture bounds the output read into memory for one exec (inventory
// files, vim-cmd dumps). Disk data is streamed, never captured.
const maxCapture = 64 << 20

type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.limit {
		b.over = true
		return 0, fmt.Errorf("output larger than %d bytes", b.limit)
	}
	return b.buf.Write(p)
}

// execResult is what one exec produced.
type execResult struct {
	stderr string
	status int
}

// exec runs script in one exec session, streaming stdout to w. It waits for
// a free session slot, reconnects once if the connection turned out to be
// dead before the command started, and closes the session when ctx ends.
func (c *Client) exec(ctx context.Context, op, script string, w io.Writer) (execResult, error) {
	if err := c.acquireSession(ctx, op); err != nil {
		return execResult{}, err
	}
	defer func() { <-c.sem }()

	sess, conn, err := c.openSession(ctx, op)
	if err != nil {
		return execResult{}, err
	}
	defer sess.Close()

	stderr := &limitedBuffer{limit: 1 << 20}
	out := &outputWriter{w: w, failed: make(chan struct{})}
	sess.Stdout = out
	sess.Stderr = stderr
	if err := sess.Start(script); err != nil {
		if isNetworkError(err) {
			c.dropConn(conn)
		}
		return execResult{}, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Msg: "the host refused to start the command", Err: err}
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err = <-done:
	case <-out.failed:
		// Nothing reads the channel any more, so the host would block on
		// a full window and never send its exit status: end the session.
		_ = sess.Close()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
		}
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		return execResult{stderr: stderr.buf.String()}, c.ctxError(ctx, op)
	}
	res := execResult{stderr: stderr.buf.String()}
	if werr := out.failure(); werr != nil {
		return res, c.outputError(op, w, werr)
	}
	return c.exitResult(op, res, err)
}

// openSession opens an SSH session on the host's connection, reconnecting
// once when the connection turns out to be dead.
func (c *Client) openSession(ctx context.Context, op string) (*ssh.Session, *ssh.Client, error) {
	for attempt := 0; ; attempt++ {
		conn, err := c.connection(ctx)
		if err != nil {
			return nil, nil, err
		}
		sess, err := conn.NewSession()
		if err == nil {
			return sess, conn, nil
		}
		broken := isNetworkError(err) || strings.Contains(err.Error(), "EOF")
		if broken {
			// Only a dead transport is dropped: a refused channel (session
			// limit) must not kill the other sessions on this connection.
			c.dropConn(conn)
		}
		if attempt > 0 || !broken {
			return nil, nil, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op,
				Msg: "could not open an SSH session (the host may limit sessions; lower max_sessions if this repeats)", Err: err}
		}
		c.logf("esxi %s: connection lost, reconnecting: %v", c.cfg.Name, err)
	}
}

// exitResult reads the session's end, waitErr from Wait: an exit status
// goes into res; a missing one or an interrupted session is Transient.
func (c *Client) exitResult(op string, res execResult, waitErr error) (execResult, error) {
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case waitErr == nil:
		return res, nil
	case errors.As(waitErr, &ee):
		res.status = ee.ExitStatus()
		return res, nil
	case errors.As(waitErr, &missing):
		return res, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Msg: "the command ended without an exit status (connection dropped?): retry", Err: waitErr}
	default:
		return res, &Error{Class: Transient, Kind: ErrConnection, Host: c.cfg.Name, Op: op, Msg: "the command was interrupted (connection dropped?): retry", Err: waitErr}
	}
}

// outputWriter passes a command's stdout to w and remembers w's first
// error, so that exec can end the session instead of waiting for an exit
// status that a host blocked on a full window never sends.
type outputWriter struct {
	w      io.Writer
	mu     sync.Mutex
	err    error
	failed chan struct{}
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
			close(o.failed)
		}
		o.mu.Unlock()
	}
	return n, err
}

func (o *outputWriter) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// outputError classifies a failure to store a command's output here: too
// much output, or the local error of w (a full or read-only disk needs a
// human, see fault.OfErrno).
func (c *Client) outputError(op string, w io.Writer, err error) *Error {
	if l, ok := w.(*limitedBuffer); ok && l.over {
		return &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op, Msg: fmt.Sprintf("output exceeded %d bytes", l.limit)}
	}
	if class, ok := fault.OfErrno(err); ok {
		msg := "writing the output on this machine failed"
		if adv := fault.ErrnoAdvice(err); adv != "" {
			msg += ": " + adv
		}
		return &Error{Class: class, Host: c.cfg.Name, Op: op, Msg: msg, Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Class: Classify(err), Host: c.cfg.Name, Op: op, Msg: "writing the output on this machine failed", Err: err}
}

// runBatch runs b in one exec and returns its sections.
func (c *Client) runBatch(ctx context.Context, op string, b *Batch) ([]Result, []Problem, error) {
	out := &limitedBuffer{limit: maxCapture}
	res, err := c.exec(ctx, op, b.Script(), out)
	if err != nil {
		return nil, nil, err
	}
	results, probs := b.Parse(out.buf.Bytes())
	if len(probs) > 0 && res.stderr != "" {
		// The shell itself failed (syntax error, missing command): say so.
		probs = append(probs, Problem{Source: "stderr", Message: truncate(strings.TrimSpace(res.stderr), 500)})
	}
	return results, probs, nil
}
