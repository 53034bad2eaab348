package podrun

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of the termination message, the kubelet's (v1.37
// pkg/kubelet/container/runtime.go): at most 4096 bytes from the end of the
// termination log; with FallbackToLogsOnError, at most 2048 bytes from the
// container's last 80 log lines.
const (
	maxTerminationMessage         = 4 * 1024
	maxTerminationMessageLogBytes = 2 * 1024
	maxTerminationMessageLogLines = 80
)

// terminationMessage is what the kubelet reports as a terminated
// container's message (getTerminationMessage and
// readLastStringFromContainerLogs in pkg/kubelet/kuberuntime/
// kuberuntime_container.go, v1.37): the end of the termination log; when
// that is empty and fallbackToLogs (FallbackToLogsOnError and a non-zero
// exit), the end of the log.
func terminationMessage(termPath, logPath string, fallbackToLogs bool) string {
	data, err := readAtMost(termPath, maxTerminationMessage)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Sprintf("Error on reading termination log %s: %v", termPath, err)
	case len(data) > 0 || !fallbackToLogs:
		return string(data)
	}
	if !fallbackToLogs {
		return ""
	}
	lines, err := readLog(logPath)
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	if len(lines) > maxTerminationMessageLogLines {
		lines = lines[len(lines)-maxTerminationMessageLogLines:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	s := b.String()
	if len(s) > maxTerminationMessageLogBytes {
		s = s[len(s)-maxTerminationMessageLogBytes:]
	}
	return s
}

// readAtMost returns at most max bytes from the end of the file at path.
func readAtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	return io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
}

// criLogWriter writes a stream's lines in the CRI log format the kubelet
// reads (k8s.io/cri-api's log format: "<RFC3339Nano time> <stream> F
// <line>"), holding a partial line until its end or flush.
type criLogWriter struct {
	w       io.Writer
	mu      *sync.Mutex // shared by the streams of one file
	stream  string
	partial []byte
}

func (l *criLogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial, p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		if err := l.line(buf[:i]); err != nil {
			return 0, err
		}
		buf = buf[i+1:]
	}
	l.partial = append([]byte(nil), buf...)
	return len(p), nil
}

func (l *criLogWriter) line(b []byte) error {
	_, err := fmt.Fprintf(l.w, "%s %s F %s\n", time.Now().UTC().Format(time.RFC3339Nano), l.stream, b)
	return err
}

// flush writes a last line without its end.
func (l *criLogWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		_ = l.line(l.partial)
		l.partial = nil
	}
}

// logLine is one line of a container's log.
type logLine struct{ time, text string }

// readLog parses a container's CRI log.
func readLog(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		ts, rest, _ := strings.Cut(sc.Text(), " ")
		_, rest, _ = strings.Cut(rest, " ")  // stream
		_, text, _ := strings.Cut(rest, " ") // tag
		out = append(out, logLine{time: ts, text: text})
	}
	return out, sc.Err()
}

// logServer is the runner's kubelet API: GET /containerLogs, which the API
// server's pods/log reaches through the Node's kubelet endpoint.
type logServer struct {
	srv  *http.Server
	port int

	mu   sync.Mutex
	logs map[string]string // namespace/pod/container -> log path
}

func startLogServer(r *Runner) (*logServer, error) {
	cert, err := selfSigned(r.opts.NodeName)
	if err != nil {
		return nil, fmt.Errorf("podrun: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("podrun: %w", err)
	}
	s := &logServer{port: l.Addr().(*net.TCPAddr).Port, logs: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// The API server is given no kubelet CA, so it does not verify this
	// throwaway certificate.
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(l, "", "") }()
	return s, nil
}

func (s *logServer) close() { _ = s.srv.Close() }

func (s *logServer) remember(namespace, pod, container, path string) {
	s.mu.Lock()
	s.logs[namespace+"/"+pod+"/"+container] = path
	s.mu.Unlock()
}

func (s *logServer) forget(namespace, pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.logs {
		if strings.HasPrefix(k, namespace+"/"+pod+"/") {
			delete(s.logs, k)
		}
	}
}

// serveLogs is the kubelet's GET /containerLogs/{ns}/{pod}/{container}
// with tailLines, limitBytes and timestamps (follow is not honoured: the
// log so far is returned).
func (s *logServer) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	s.mu.Lock()
	path, ok := s.logs[ns+"/"+pod+"/"+container]
	s.mu.Unlock()
	if !ok {
		http.Error(w, fmt.Sprintf("container %q in pod %s/%s not found", container, ns, pod), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	tail, limit := -1, -1
	for name, dst := range map[string]*int{"tailLines": &tail, "limitBytes": &limit} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, name+": want a non-negative integer", http.StatusBadRequest)
				return
			}
			*dst = n
		}
	}
	lines, err := readLog(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if tail >= 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	var out strings.Builder
	for _, l := range lines {
		if q.Get("timestamps") == "true" {
			out.WriteString(l.time + " ")
		}
		out.WriteString(l.text)
		out.WriteByte('\n')
	}
	text := out.String()
	if limit >= 0 && len(text) > limit {
		text = text[:limit]
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(text))
}

// selfSigned makes a throwaway serving certificate for 127.0.0.1.
func selfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{name, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
