package kubesim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/sparsefile"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// The upload pods. CDI's upload controller (v1.65.0,
// pkg/controller/upload-controller.go) runs one upload server pod per claim
// that takes uploads; its upload proxy (pkg/uploadproxy/uploadproxy.go)
// forwards each upload to that pod's Service over mutual TLS. Here the pod
// is a process of CDI's own cmd/cdi-uploadserver (built from the CDI module
// into .testbin/ by tools/build-testcluster.sh), given the environment the
// controller's makeUploadPodContainers gives it, and its /data and /scratch
// in a mount namespace of its own, as the pod's volumes are mounted. What it
// writes to /data/disk.img is the claim's content.

// Names and paths of CDI's upload server pod (v1.65.0: pkg/common/common.go,
// pkg/controller/upload-controller.go).
const (
	// uploadClientName is the common name the upload server accepts the
	// proxy's client certificate under (uploadServerClientName).
	uploadClientName = "client.upload-server.cdi.kubevirt.io"
	// claimMount, scratchMount and terminationLog are the paths the server
	// writes to (common.ImporterVolumePath, common.ScratchDataDir, the pod's
	// terminationMessagePath).
	claimMount     = "/data"
	scratchMount   = "/scratch"
	terminationLog = "/dev/termination-log"
	// diskImageName is the claim's image file (common.DiskImageName).
	diskImageName = "disk.img"
	// scratchImageName is the file an upload is kept in in scratch space
	// until it is converted (pkg/importer/upload-datasource.go).
	scratchImageName = "tmpimage"
	// podRunningReason is the Running condition's reason while the pod runs
	// (pkg/controller/util.go, PodRunningReason).
	podRunningReason = "Pod is running"
	// uploadServerCiphers are the OpenSSL names of the cipher suites CDI's
	// default (intermediate) TLS profile hands the server in TLS_CIPHERS.
	uploadServerCiphers = "ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256,ECDHE-ECDSA-AES256-GCM-SHA384," +
		"ECDHE-RSA-AES256-GCM-SHA384,ECDHE-ECDSA-CHACHA20-POLY1305,ECDHE-RSA-CHACHA20-POLY1305"
)

// uploadServiceName is the Service CDI creates in front of a claim's upload
// pod, and the name in that pod's serving certificate
// (naming.GetServiceNameFromResourceName("cdi-upload-" + claim)).
func uploadServiceName(namespace, claim string) string {
	return "cdi-upload-" + claim + "." + namespace + ".svc"
}

// uploadPKI holds CDI's upload server signer (which signs each pod's serving
// certificate and which the proxy trusts) and the proxy's client
// certificate, signed by the client signer the pods trust.
type uploadPKI struct {
	serverCA     *certAuthority
	clientCAPEM  []byte
	proxyClient  *http.Transport
	serverBinary string
}

func (s *Sim) startUploadPKI() error {
	serverCA, err := newCA("cdi-uploadserver-signer", 48*time.Hour)
	if err != nil {
		return err
	}
	clientCA, err := newCA("cdi-uploadserver-client-signer", 48*time.Hour)
	if err != nil {
		return err
	}
	client, err := clientCA.issue(uploadClientName, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	s.upload = &uploadPKI{
		serverCA:    serverCA,
		clientCAPEM: clientCA.certPEM,
		proxyClient: &http.Transport{
			Proxy: nil,
			TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{client.cert},
			},
			// The URL names the pod's Service; this cluster has no
			// Service network, so the name leads to the pod's port.
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, _, _ := net.SplitHostPort(addr)
				port, ok := s.uploadPodPort(host)
				if !ok {
					return nil, fmt.Errorf("dial %s: no upload pod behind this Service", addr)
				}
				var d net.Dialer
				return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			},
			ExpectContinueTimeout: time.Second,
		},
		serverBinary: s.opts.UploadServer,
	}
	return ensureMountPoints()
}

// ensureMountPoints makes sure the paths the upload server writes to exist
// on this machine, so that each server's mount namespace can bind its
// claim's folders over them. They stay empty here: only the servers' own
// namespaces see anything mounted on them.
func ensureMountPoints() error {
	for _, d := range []string{claimMount, scratchMount} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kubesim: the upload server needs %s as a mount point: %w", d, err)
		}
	}
	if _, err := os.Stat(terminationLog); errors.Is(err, os.ErrNotExist) {
		f, err := os.OpenFile(terminationLog, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("kubesim: the upload server needs %s as a mount point: %w", terminationLog, err)
		}
		_ = f.Close()
	}
	return nil
}

// findUploadServer returns the cdi-uploadserver binary the sim runs.
func findUploadServer(path string) (string, error) {
	if path == "" {
		var err error
		if path, err = testcluster.ToolBinary("cdi-uploadserver", testcluster.CDIUploadServerVersion); err != nil {
			return "", fmt.Errorf("kubesim: uploads go to CDI's own upload server: %w", err)
		}
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return "", fmt.Errorf("kubesim: the upload server runs in a mount namespace of its own, made with unshare (util-linux): %w", err)
	}
	if os.Geteuid() != 0 {
		return "", errors.New("kubesim: the upload server runs in a mount namespace of its own, with its claim bind-mounted on /data: that needs root")
	}
	return path, nil
}

// uploadPod is one run of a claim's upload server (one container start).
type uploadPod struct {
	namespace, claim string
	uid              types.UID
	service          string
	port             int
	dir              string // certificates, termination message, log
	claimDir         string // mounted on /data
	scratchDir       string // mounted on /scratch
	cmd              *exec.Cmd
	ready            atomic.Bool
	done             chan struct{}
	exitErr          error // set before done closes

	// sent describes the last request the server answered 200 to, as it
	// passed through the proxy.
	mu   sync.Mutex
	sent sentImage
}

// sentImage is what crossed the proxy in one request.
type sentImage struct {
	bytes  int64
	sha256 string
	format string
	// virtual is the disk's size: the bytes sent for raw, the size in
	// the header for qcow2.
	virtual int64
}

// uploadPodPort returns the port of the running upload pod behind the
// Service host.
func (s *Sim) uploadPodPort(host string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		if p.service == host {
			return p.port, true
		}
	}
	return 0, false
}

// uploadPodReady reports whether the upload pod of uid runs and is ready,
// as CDI's proxy reads it from the claim's annotations.
func (s *Sim) uploadPodReady(uid types.UID) bool {
	s.mu.Lock()
	p := s.pods[uid]
	s.mu.Unlock()
	return p != nil && p.ready.Load()
}

// startUploadPod starts the upload server for dv's claim. restarts is the
// container's restart count (0 for the first start).
func (s *Sim) startUploadPod(dv *cdiv1.DataVolume) (*uploadPod, error) {
	_, available, err := capacity(dv, s.opts.FilesystemOverhead)
	if err != nil {
		return nil, err
	}
	claimDir := filepath.Dir(imagePath(s.dir, dv.Namespace, dv.Name))
	p := &uploadPod{
		namespace: dv.Namespace, claim: dv.Name, uid: dv.UID,
		service:    uploadServiceName(dv.Namespace, dv.Name),
		dir:        claimDir + ".pod",
		claimDir:   claimDir,
		scratchDir: claimDir + ".scratch",
		done:       make(chan struct{}),
	}
	if err := s.preparePodFiles(p); err != nil {
		return nil, err
	}
	if p.port, err = freePort(); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(p.dir, "log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	p.cmd = s.uploadServerCommand(p, s.uploadOverhead(dv), available)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the upload server: %w", err)
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		p.exitErr = p.cmd.Wait()
		p.ready.Store(false)
		close(p.done)
		s.poke()
	}()
	go func() {
		defer s.wg.Done()
		s.probeUploadPod(p)
	}()
	return p, nil
}

// preparePodFiles makes the pod's folders and writes its serving
// certificate, the client CA and an empty termination log.
func (s *Sim) preparePodFiles(p *uploadPod) error {
	for _, d := range []string{p.dir, p.claimDir, p.scratchDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	leaf, err := s.upload.serverCA.issue(p.service, []string{p.service}, nil, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	files := map[string][]byte{"tls.crt": leaf.certPEM, "tls.key": leaf.keyPEM, "client-ca.crt": s.upload.clientCAPEM, "termination-log": nil}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// uploadOverhead is the file system overhead CDI gives the server: none
// for a block volume.
func (s *Sim) uploadOverhead(dv *cdiv1.DataVolume) string {
	if dv.Spec.PVC != nil && (dv.Spec.PVC.VolumeMode == nil || *dv.Spec.PVC.VolumeMode != corev1.PersistentVolumeBlock) ||
		dv.Spec.Storage != nil && (dv.Spec.Storage.VolumeMode == nil || *dv.Spec.Storage.VolumeMode != corev1.PersistentVolumeBlock) {
		return strconv.FormatFloat(s.opts.FilesystemOverhead, 'f', -1, 64)
	}
	return "0"
}

// uploadServerCommand is CDI's upload server for p, configured as CDI
// configures its pod; available is the claim's usable size.
func (s *Sim) uploadServerCommand(p *uploadPod, overhead string, available int64) *exec.Cmd {
	// The pod's volumes: the claim on /data, the scratch claim on /scratch,
	// and the termination message file, in a mount namespace of the
	// server's own.
	const mounts = `set -e; mount --bind "$1" ` + claimMount + `; mount --bind "$2" ` + scratchMount +
		`; mount --bind "$3" ` + terminationLog + `; shift 3; exec "$@"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", mounts, "sh",
		p.claimDir, p.scratchDir, filepath.Join(p.dir, "termination-log"), s.upload.serverBinary, "-v=1")
	cmd.Env = []string{
		"PATH=" + filepath.Dir(s.opts.QemuImg) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"TLS_KEY_FILE=" + filepath.Join(p.dir, "tls.key"),
		"TLS_CERT_FILE=" + filepath.Join(p.dir, "tls.crt"),
		"CLIENT_CERT_FILE=" + filepath.Join(p.dir, "client-ca.crt"),
		"CLIENT_NAME=" + uploadClientName,
		"FILESYSTEM_OVERHEAD=" + overhead,
		// CDI gives the claim's requested size and the server takes the
		// smaller of it and the free space it finds on /data (statfs).
		// /data is a folder of this machine here, so the claim's usable
		// size stands in for both.
		"UPLOAD_IMAGE_SIZE=" + strconv.FormatInt(available, 10),
		"PREALLOCATION=false",
		"TLS_CIPHERS=" + uploadServerCiphers,
		"TLS_MIN_VERSION=VersionTLS12",
		"LISTEN_ADDRESS=127.0.0.1",
		"LISTEN_PORT=" + strconv.Itoa(p.port),
	}
	return cmd
}

// probeUploadPod marks p ready once its /healthz answers, as the pod's
// readiness probe does.
func (s *Sim) probeUploadPod(p *uploadPod) {
	hc := &http.Client{Transport: s.upload.proxyClient, Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, "https://"+p.service+"/healthz", nil)
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.ready.Store(true)
				s.poke()
				return
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-p.done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill stops p's server and waits for it.
func (p *uploadPod) kill() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// exited reports whether p's server has exited, and how.
func (p *uploadPod) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.exitErr
	default:
		return false, nil
	}
}

// terminationMessage is what the kubelet reports for the container's end
// (TerminationMessageFallbackToLogsOnError): the termination message file,
// or, when the server failed without writing one, the end of its log.
func (p *uploadPod) terminationMessage() string {
	if b, err := os.ReadFile(filepath.Join(p.dir, "termination-log")); err == nil && len(bytes.TrimSpace(b)) > 0 {
		var m struct {
			Message *string `json:"message"`
		}
		if json.Unmarshal(b, &m) == nil && m.Message != nil {
			return *m.Message
		}
		return string(b)
	}
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	// The kubelet keeps the last 80 lines or 2048 bytes.
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// lastError returns the last error line of p's log, for a Running
// condition's message.
func (p *uploadPod) lastError() string {
	msg := p.terminationMessage()
	lines := strings.Split(msg, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "E") {
			if _, rest, ok := strings.Cut(lines[i], "] "); ok {
				return rest
			}
			return lines[i]
		}
	}
	return msg
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stepUpload moves an upload DataVolume along as CDI's upload controller
// and DataVolume controller do from the upload pod's state: UploadScheduled
// until the pod is ready, UploadReady while it is, Succeeded when it exits
// after an upload, and, when it fails, a restart (RestartCount, the Running
// condition False with the pod's message) and UploadReady again: a rejected
// upload never fails the DataVolume.
func (s *Sim) stepUpload(dv *cdiv1.DataVolume) {
	st := &dv.Status
	if !s.stepCommon(dv, cdiv1.UploadScheduled) {
		return
	}
	s.mu.Lock()
	p := s.pods[dv.UID]
	s.mu.Unlock()
	if p == nil {
		// The upload pod mounts the claim and its scratch claim (CDI
		// v1.65.0 pkg/controller/upload-controller.go).
		if !s.ensureScratchClaim(dv) {
			return
		}
		var err error
		if p, err = s.startUploadPod(dv); err != nil {
			setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "upload server: "+err.Error(), ReasonError)
			return
		}
		s.mu.Lock()
		s.pods[dv.UID] = p
		s.mu.Unlock()
	}
	if done, err := p.exited(); done {
		if err == nil && p.terminationMessage() == "Upload Complete" {
			s.uploadSucceeded(dv, p)
			return
		}
		setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionFalse, p.lastError(), ReasonError)
		if !s.due(dv.UID, fmt.Sprintf("upload-restart-%d", st.RestartCount), s.opts.Step) {
			return
		}
		st.RestartCount++
		s.mu.Lock()
		delete(s.pods, dv.UID)
		s.mu.Unlock()
		s.poke()
		return
	}
	if !p.ready.Load() {
		if st.Phase != cdiv1.UploadReady {
			st.Phase = cdiv1.UploadScheduled
		}
		return
	}
	st.Phase = cdiv1.UploadReady
	setDVCondition(st, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", podRunningReason)
	setDVCondition(st, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", ReasonTransferRunning)
}

// uploadSucceeded records what the upload server wrote to the claim and
// finishes the DataVolume. The scratch claim goes, as CDI deletes it.
func (s *Sim) uploadSucceeded(dv *cdiv1.DataVolume, p *uploadPod) {
	s.mu.Lock()
	_, known := s.received[dv.Namespace+"/"+dv.Name]
	s.mu.Unlock()
	if !known {
		p.mu.Lock()
		sent := p.sent
		p.mu.Unlock()
		path := filepath.Join(p.claimDir, diskImageName)
		if v, ok := virtualSize(s.opts.QemuImg, filepath.Join(p.scratchDir, scratchImageName)); ok {
			// What the server kept in scratch space, as qemu-img (which
			// converted it) sees it: a VMDK, say, is converted as one.
			sent.virtual = v
		}
		rec := Received{Path: path, Format: "raw", VirtualSize: sent.virtual,
			SentFormat: sent.format, SentBytes: sent.bytes, SentSHA256: sent.sha256}
		// CDI's upload server grows the image to the claim's usable size
		// after writing it (data-processor.go, resize): the disk that was
		// sent is the claim's first VirtualSize bytes, zeros after.
		rec.claimHash = &lazyHash{path: path, prefix: sent.virtual}
		_ = os.RemoveAll(p.scratchDir)
		s.recordReceived(dv.Namespace, dv.Name, &rec)
	}
	s.finish(dv, &transferResult{ok: true})
}

// virtualSize asks qemu-img for the virtual size of the image at path.
func virtualSize(qemuImg, path string) (int64, bool) {
	if _, err := os.Stat(path); err != nil {
		return 0, false
	}
	out, err := exec.Command(qemuImg, "info", "--output=json", path).Output()
	if err != nil {
		return 0, false
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if json.Unmarshal(out, &info) != nil || info.VirtualSize <= 0 {
		return 0, false
	}
	return info.VirtualSize, true
}

// stopUploadPod kills the upload pod of uid, if any, and forgets it.
func (s *Sim) stopUploadPod(uid types.UID) {
	s.mu.Lock()
	p := s.pods[uid]
	delete(s.pods, uid)
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// teeBody counts, hashes and sniffs the format of an upload's body as it
// passes through the proxy.
type teeBody struct {
	r      io.ReadCloser
	h      hash.Hash
	n      int64
	head   []byte
	counts func(int64)
}

func newTeeBody(r io.ReadCloser, counts func(int64)) *teeBody {
	return &teeBody{r: r, h: diskdigest.New(), counts: counts}
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.h.Write(p[:n])
		t.n += int64(n)
		if len(t.head) < 512 {
			t.head = append(t.head, p[:min(n, 512-len(t.head))]...)
		}
		t.counts(int64(n))
	}
	return n, err
}

func (t *teeBody) Close() error { return t.r.Close() }

// image describes what passed.
func (t *teeBody) image() sentImage {
	img := sentImage{bytes: t.n, sha256: hex.EncodeToString(t.h.Sum(nil)), format: "raw", virtual: t.n}
	if bytes.HasPrefix(t.head, []byte("QFI\xfb")) && len(t.head) >= 32 {
		// QCowHeader: magic, version, backing file offset and size,
		// cluster bits, then the size (big-endian, at byte 24).
		img.format, img.virtual = "qcow2", int64(binary.BigEndian.Uint64(t.head[24:32]))
	}
	return img
}

// hashPrefix returns the hex disk digest (package diskdigest) of the
// first prefix bytes of the file at
// path and their count when every byte after them is zero, or else (and
// when prefix is 0) of the whole file; and the file's length.
func hashPrefix(path string, prefix int64) (string, int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	total := st.Size()
	if prefix <= 0 || prefix > total || !zeroFrom(f, prefix) {
		sum, n, err := hashFile(path)
		return sum, n, total, err
	}
	h := diskdigest.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, prefix)); err != nil {
		return "", 0, 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), prefix, total, nil
}

// zeroFrom reports whether every byte of f from off on is zero; holes are
// not read.
func zeroFrom(f *os.File, off int64) bool {
	st, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, 1<<20)
	errNonZero := errors.New("non-zero")
	err = sparsefile.Walk(f, off, st.Size(), func(o, n int64, data bool) error {
		for data && n > 0 {
			k, err := f.ReadAt(buf[:min(n, int64(len(buf)))], o)
			if k == 0 && err != nil {
				return err
			}
			for _, b := range buf[:k] {
				if b != 0 {
					return errNonZero
				}
			}
			o, n = o+int64(k), n-int64(k)
		}
		return nil
	})
	return err == nil
}
