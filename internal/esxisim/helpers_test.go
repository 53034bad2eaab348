package esxisim

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

const testPassword = "s3cret!pw"

// newServer starts a simulator on a temporary root with user root and
// testPassword; mod may adjust the options first.
func newServer(t *testing.T, mod func(*Options)) *Server {
	t.Helper()
	opts := Options{
		Root:          t.TempDir(),
		Users:         []User{{Name: "root", Password: testPassword}},
		ShutdownDelay: 200 * time.Millisecond,
	}
	if mod != nil {
		mod(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// passwordAuth answers every keyboard-interactive prompt with pw.
func passwordAuth(pw string) ssh.AuthMethod {
	return ssh.KeyboardInteractive(func(_, _ string, qs []string, _ []bool) ([]string, error) {
		a := make([]string, len(qs))
		for i := range a {
			a[i] = pw
		}
		return a, nil
	})
}

func dialWith(s *Server, user string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	return ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{
		User:            user,
		Auth:            auth,
		HostKeyCallback: ssh.FixedHostKey(s.HostKey()),
		Timeout:         10 * time.Second,
	})
}

// dial logs in as root with the test password.
func dial(t *testing.T, s *Server) *ssh.Client {
	t.Helper()
	c, err := dialWith(s, "root", passwordAuth(testPassword))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// result is what one exec produced.
type result struct {
	out, err string
	code     int
	runErr   error
}

// run executes cmd in a new exec channel.
func run(t *testing.T, c *ssh.Client, cmd string) result {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		return result{runErr: err, code: -1}
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errb
	err = sess.Run(cmd)
	r := result{out: out.String(), err: errb.String(), runErr: err}
	var ee *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code, r.runErr = ee.ExitStatus(), nil
	default:
		r.code = -1
	}
	return r
}

// mustRun runs cmd and fails on transport errors.
func mustRun(t *testing.T, c *ssh.Client, cmd string) result {
	t.Helper()
	r := run(t, c, cmd)
	if r.runErr != nil {
		t.Fatalf("run %q: %v", cmd, r.runErr)
	}
	return r
}

// sample returns a file of testdata/ without its first "# source:" line.
func sample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "\n")
	return rest
}

// writeFile writes a file under the server root.
func writeFile(t *testing.T, s *Server, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(s.opts.Root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeVMX writes a minimal .vmx with the given key/value lines.
func writeVMX(t *testing.T, s *Server, rel string, kv ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(".encoding = \"UTF-8\"\n")
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i] + " = \"" + vmxEscape(kv[i+1]) + "\"\n")
	}
	writeFile(t, s, rel, []byte(b.String()))
}
