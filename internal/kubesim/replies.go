package kubesim

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// Write is a kind of write to the API server that ReplyFaults can lose the
// reply to.
type Write string

const (
	// Create is a POST to the object's collection.
	Create Write = "create"
	// Update is a PUT of the object.
	Update Write = "update"
	// UpdateStatus is a PUT of the object's status subresource.
	UpdateStatus Write = "update status"
	// Patch is a PATCH of the object.
	Patch Write = "patch"
)

// ReplyFaults makes chosen writes "complete but time out": the request
// reaches the API server, which applies it (the object is created or
// updated), and then the caller gets a reset connection instead of the
// reply. It models an API server or network that fails between commit and
// answer, so tests can check that the caller observes before it acts
// again. It acts on the clients built from a configuration passed through
// Wrap. The zero value is not usable: call NewReplyFaults. Safe for
// concurrent use.
type ReplyFaults struct {
	mu    sync.Mutex
	rules []*replyRule
	lost  int
}

type replyRule struct {
	write              Write
	resource, ns, name string
	remaining          int
}

// NewReplyFaults returns a ReplyFaults with nothing armed.
func NewReplyFaults() *ReplyFaults { return &ReplyFaults{} }

// LoseReply arms a fault: the replies to the next n successful writes of
// the given kind on the object namespace/name are lost after the API
// server has applied them. kind is the object's Kind ("VirtualMachine",
// "DataVolume", "ConfigMap") or its lower-case plural resource
// ("virtualmachines"); namespace is "" for cluster-scoped objects. A write
// the API server refuses (AlreadyExists, Conflict, ...) is passed through
// and does not count. n <= 0 disarms the rule for that object and write.
func (f *ReplyFaults) LoseReply(w Write, kind, namespace, name string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := resourceOf(kind)
	kept := f.rules[:0]
	for _, r := range f.rules {
		if r.write != w || r.resource != res || r.ns != namespace || r.name != name {
			kept = append(kept, r)
		}
	}
	f.rules = kept
	if n > 0 {
		f.rules = append(f.rules, &replyRule{write: w, resource: res, ns: namespace, name: name, remaining: n})
	}
}

// Lost returns how many replies have been lost so far.
func (f *ReplyFaults) Lost() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

// Clear disarms every rule.
func (f *ReplyFaults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Wrap returns a copy of cfg whose clients go through f.
func (f *ReplyFaults) Wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(f.RoundTripper)
	return c
}

// RoundTripper returns rt with f's faults applied.
func (f *ReplyFaults) RoundTripper(rt http.RoundTripper) http.RoundTripper {
	return &replyTransport{f: f, next: rt}
}

type replyTransport struct {
	f    *ReplyFaults
	next http.RoundTripper
}

// errLostReply is what the caller sees instead of the reply: the error of
// a connection the peer reset.
func errLostReply(req *http.Request) error {
	return &net.OpError{Op: "read", Net: "tcp", Addr: fakeAddr(req.URL.Host), Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

func (t *replyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w, res, ns, name, sub := classifyWrite(req)
	if w == "" || !t.f.armed(w, res, ns) {
		return t.next.RoundTrip(req)
	}
	if w == Create && req.Body != nil && req.Body != http.NoBody {
		// The name of a created object is in its body.
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		name = objectName(body)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.ContentLength = int64(len(body))
	}
	if sub != "" && !(sub == "status" && w == UpdateStatus) {
		return t.next.RoundTrip(req)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, err
	}
	if !t.f.take(w, res, ns, name) {
		return resp, nil
	}
	// The write is applied: drop its answer.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errLostReply(req)
}

func (f *ReplyFaults) armed(w Write, res, ns string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.write == w && r.resource == res && r.ns == ns && r.remaining > 0 {
			return true
		}
	}
	return false
}

func (f *ReplyFaults) take(w Write, res, ns, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.write == w && r.resource == res && r.ns == ns && r.name == name && r.remaining > 0 {
			r.remaining--
			f.lost++
			return true
		}
	}
	return false
}

// deserializer decodes request bodies in any encoding client-go sends
// (protobuf for built-in kinds, JSON for the others).
var deserializer = serializer.NewCodecFactory(testcluster.Scheme()).UniversalDeserializer()

// objectName is metadata.name of an encoded object, or "".
func objectName(body []byte) string {
	if obj, _, err := deserializer.Decode(body, nil, nil); err == nil {
		if m, err := meta.Accessor(obj); err == nil {
			return m.GetName()
		}
	}
	var o struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	_ = json.Unmarshal(body, &o)
	return o.Metadata.Name
}

// classifyWrite reads a write's target from its URL:
// /api/v1/[namespaces/NS/]RES[/NAME[/SUB]] or
// /apis/GROUP/VERSION/[namespaces/NS/]RES[/NAME[/SUB]]. w is "" for
// anything else (reads, deletes, discovery).
func classifyWrite(req *http.Request) (w Write, res, ns, name, sub string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", "", "", "", ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		return "", "", "", "", ""
	}
	res = parts[0]
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = parts[2]
	}
	switch {
	case req.Method == http.MethodPost && name == "":
		w = Create
	case req.Method == http.MethodPut && name != "" && sub == "status":
		w = UpdateStatus
	case req.Method == http.MethodPut && name != "":
		w = Update
	case req.Method == http.MethodPatch && name != "":
		w = Patch
	}
	if w == "" {
		return "", "", "", "", ""
	}
	return w, res, ns, name, sub
}

// resourceOf turns a Kind into its plural resource name ("DataVolume" ->
// "datavolumes"); a lower-case plural is returned as is.
func resourceOf(kind string) string {
	if kind == strings.ToLower(kind) && strings.HasSuffix(kind, "s") {
		return kind
	}
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "s"):
		return k + "es"
	case strings.HasSuffix(k, "y"):
		return k[:len(k)-1] + "ies"
	}
	return k + "s"
}
