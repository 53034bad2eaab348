// Command kubevirt-admission serves KubeVirt's own admission webhooks for
// VirtualMachines and VirtualMachineInstances, built from KubeVirt v1.7.0's
// pkg/virt-api/webhooks, as virt-api serves them (pkg/virt-api/api.go), and
// registers them with the API server as virt-operator does
// (pkg/virt-operator/resource/generate/components/webhooks.go), with the
// webhooks' Service references replaced by a URL on loopback.
//
// The test cluster runs it so that every VirtualMachine a test, the demo or
// the provider creates or updates passes KubeVirt's real validation and gets
// KubeVirt's real defaults (the firmware UUID and serial included).
//
// What differs from virt-api: one server serves several simulated
// clusters of one API server, each registered with PUT /sims/{id} (see
// run) under webhook configurations of its own, for its own namespaces;
// the cluster configuration comes from the KubeVirt CR options given there
// (the test cluster has no virt-operator); VirtualMachineInstancePresets
// are none; and every VirtualMachine create that the mutator answers is
// appended to the sim's admitted log, so that tests can compare the
// identity KubeVirt gave a VM with the one it keeps.
package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks"
	mutating_webhook "kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook"
	validating_webhook "kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// installNamespace is where virt-api would run; the service accounts KubeVirt
// trusts to change VMI specs and VM status are named after it.
const installNamespace = "kubevirt"

// served are the resources whose webhooks are registered: the ones the
// provider and the simulated controllers write. KubeVirt's other webhooks
// (migrations, snapshots, pools, evictions, ...) concern objects the test
// cluster does not have.
var served = map[string]bool{
	"virtualmachines":                true,
	"virtualmachines/status":         true,
	"virtualmachineinstances":        true,
	"virtualmachineinstances/status": true,
}

type options struct {
	kubeconfig, listen, certFile, keyFile, caFile, tokenFile string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to register with")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "address to serve HTTPS on")
	flag.StringVar(&o.certFile, "tls-cert", "", "serving certificate (PEM)")
	flag.StringVar(&o.keyFile, "tls-key", "", "serving key (PEM)")
	flag.StringVar(&o.caFile, "ca-bundle", "", "CA that signed the serving certificate (PEM), given to the API server")
	flag.StringVar(&o.tokenFile, "control-token-file", "", "file holding the bearer token that PUT and DELETE /sims/{id} require")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-admission:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. One server is shared by every simulated
// cluster of a test process (KubeVirt's packages take seconds of CPU to
// initialise, more than most tests): each registers itself with PUT
// /sims/{id} (its namespaces, its KubeVirt configuration, its admitted
// log), which registers webhook configurations of its own pointing at
// /sims/{id}/..., and unregisters with DELETE /sims/{id}.
func run(ctx context.Context, o options) error {
	if o.kubeconfig == "" || o.certFile == "" || o.keyFile == "" || o.caFile == "" || o.tokenFile == "" {
		return errors.New("-kubeconfig, -tls-cert, -tls-key, -ca-bundle and -control-token-file are required")
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	virtCli, err := kubecli.GetKubevirtClientFromRESTConfig(restConfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(o.caFile)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(token)) < 16 {
		return fmt.Errorf("%s: the control token is shorter than 16 characters", o.tokenFile)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &server{
		base:            "https://" + ln.Addr().String(),
		caPEM:           caPEM,
		token:           bytes.TrimSpace(token),
		cs:              cs,
		virtCli:         virtCli,
		informers:       emptyInformers(),
		serviceAccounts: webhooks.KubeVirtServiceAccounts(installNamespace),
		sims:            map[string]*sim{},
		configs:         map[bool]*virtconfig.ClusterConfig{},
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ServeTLS(ln, o.certFile, o.keyFile) }()
	// The line the parent process waits for.
	fmt.Printf("serving %s\n", srv.base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(shutdown)
	}
}

// clusterConfig is KubeVirt's cluster configuration for a KubeVirt CR with
// the given options and KubeVirt's defaults for everything else, built the
// way KubeVirt's own tests build it (pkg/testutils/mock_config.go).
func clusterConfig(disableSerialConsoleLog bool) *virtconfig.ClusterConfig {
	cfg := v1.KubeVirtConfiguration{}
	if disableSerialConsoleLog {
		cfg.VirtualMachineOptions = &v1.VirtualMachineOptions{DisableSerialConsoleLog: &v1.DisableSerialConsoleLog{}}
	}
	c, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(&v1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: installNamespace},
		Spec:       v1.KubeVirtSpec{Configuration: cfg},
		Status:     v1.KubeVirtStatus{DefaultArchitecture: runtime.GOARCH},
	}, runtime.GOARCH)
	return c
}

// emptyInformers are informers over empty stores: there are no
// VirtualMachineInstancePresets, and the VirtualMachine admitter keeps the
// DataSource and Namespace informers without reading them.
func emptyInformers() *webhooks.Informers {
	empty := func(obj k8sruntime.Object) cache.SharedIndexInformer {
		lw := &cache.ListWatch{
			ListFunc:  func(metav1.ListOptions) (k8sruntime.Object, error) { return &metav1.List{}, nil },
			WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}
		return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	return &webhooks.Informers{
		VMIPresetInformer:  empty(&v1.VirtualMachineInstancePreset{}),
		VMRestoreInformer:  empty(&metav1.PartialObjectMetadata{}),
		DataSourceInformer: empty(&metav1.PartialObjectMetadata{}),
		NamespaceInformer:  empty(&metav1.PartialObjectMetadata{}),
	}
}

// server holds what every simulated cluster shares (the API server's
// clients, the empty informers) and each one's registration.
type server struct {
	base            string
	caPEM, token    []byte
	cs              kubernetes.Interface
	virtCli         kubecli.KubevirtClient
	informers       *webhooks.Informers
	serviceAccounts map[string]struct{}

	mu      sync.RWMutex
	sims    map[string]*sim
	configs map[bool]*virtconfig.ClusterConfig
	logMu   sync.Mutex // appends to the admitted logs
}

// sim is one simulated cluster's registration.
type sim struct {
	mux         *http.ServeMux
	admittedLog string
}

// simRegistration is the body of PUT /sims/{id}.
type simRegistration struct {
	// Namespaces whose objects the webhooks admit (all when empty).
	Namespaces []string `json:"namespaces"`
	// DisableSerialConsoleLog is the KubeVirt CR's
	// spec.configuration.virtualMachineOptions.disableSerialConsoleLog.
	DisableSerialConsoleLog bool `json:"disableSerialConsoleLog"`
	// AdmittedLog is the file the firmware identity of every admitted
	// VirtualMachine create is appended to (JSON lines); none when empty.
	AdmittedLog string `json:"admittedLog"`
}

// simID is what a registration may be called: it ends the webhook
// configurations' names and a URL path segment.
var simID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// ServeHTTP routes /sims/{id} to registration and /sims/{id}/<KubeVirt's
// webhook path> to that sim's handlers.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/sims/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	id, path, _ := strings.Cut(rest, "/")
	if !simID.MatchString(id) {
		http.Error(w, "bad sim id", http.StatusBadRequest)
		return
	}
	if path == "" {
		s.control(w, r, id)
		return
	}
	sm := s.registered(w, id)
	if sm == nil {
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + path
	sm.mux.ServeHTTP(w, r2)
}

// registered is the sim id's registration; without one it answers 404
// and returns nil.
func (s *server) registered(w http.ResponseWriter, id string) *sim {
	s.mu.RLock()
	sm := s.sims[id]
	s.mu.RUnlock()
	if sm == nil {
		http.Error(w, "no sim "+id+" is registered", http.StatusNotFound)
	}
	return sm
}

// control registers (PUT) or unregisters (DELETE) the sim id; both
// return once the API server has the webhook configurations or has none.
// GET answers whether id is registered (204) or not (404).
func (s *server) control(w http.ResponseWriter, r *http.Request, id string) {
	auth, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if subtle.ConstantTimeCompare([]byte(auth), s.token) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch r.Method {
	case http.MethodGet:
		if s.registered(w, id) == nil {
			return
		}
	case http.MethodPut:
		var reg simRegistration
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&reg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sm := &sim{admittedLog: reg.AdmittedLog}
		sm.mux = s.mux(s.clusterConfig(reg.DisableSerialConsoleLog), sm)
		s.mu.Lock()
		s.sims[id] = sm
		s.mu.Unlock()
		if err := register(r.Context(), s.cs, "-"+id, reg.Namespaces, s.base+"/sims/"+id, s.caPEM); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case http.MethodDelete:
		if err := unregister(r.Context(), s.cs, "-"+id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.mu.Lock()
		delete(s.sims, id)
		s.mu.Unlock()
	default:
		http.Error(w, "GET, PUT or DELETE", http.StatusMethodNotAllowed)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// clusterConfig is KubeVirt's cluster configuration with the given
// serial console setting, made once per setting.
func (s *server) clusterConfig(disableSerialConsoleLog bool) *virtconfig.ClusterConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.configs[disableSerialConsoleLog]
	if c == nil {
		c = clusterConfig(disableSerialConsoleLog)
		s.configs[disableSerialConsoleLog] = c
	}
	return c
}

// mux routes KubeVirt's webhook paths to KubeVirt's handlers, as
// virt-api's registerValidatingWebhooks and registerMutatingWebhook do.
func (s *server) mux(cfg *virtconfig.ClusterConfig, sm *sim) *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc(components.VMICreateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMICreate(w, r, cfg, s.serviceAccounts,
			func(field *field.Path, spec *v1.VirtualMachineInstanceSpec, cfg *virtconfig.ClusterConfig) []metav1.StatusCause {
				return netadmitter.Validate(field, spec, cfg)
			})
	})
	m.HandleFunc(components.VMIUpdateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMIUpdate(w, r, cfg, s.serviceAccounts)
	})
	m.HandleFunc(components.VMValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMs(w, r, cfg, s.virtCli, s.informers, s.serviceAccounts)
	})
	m.HandleFunc(components.StatusValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeStatusValidation(w, r, cfg, s.virtCli, s.informers, s.serviceAccounts)
	})
	m.HandleFunc(components.VMMutatePath, s.recordAdmitted(sm, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMs(w, r, cfg, s.virtCli)
	}))
	m.HandleFunc(components.VMIMutatePath, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMIs(w, r, cfg, s.informers, s.serviceAccounts)
	})
	return m
}

// Admitted is one line of -admitted-log: the firmware identity the mutator
// gave a VirtualMachine it admitted on create.
type Admitted struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
	Serial    string `json:"serial"`
}

// recordAdmitted runs h and, for a VirtualMachine create that is not a dry
// run and that h allowed, appends the firmware in the patched spec to the
// admitted log.
func (s *server) recordAdmitted(sm *sim, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		h(rec, r)
		if sm.admittedLog == "" {
			return
		}
		if adm, ok := admittedFirmware(body, rec.body.Bytes()); ok {
			s.appendAdmitted(sm.admittedLog, adm)
		}
	}
}

type recorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func admittedFirmware(request, response []byte) (Admitted, bool) {
	var in, out admissionv1.AdmissionReview
	if json.Unmarshal(request, &in) != nil || json.Unmarshal(response, &out) != nil || in.Request == nil || out.Response == nil {
		return Admitted{}, false
	}
	if in.Request.Operation != admissionv1.Create || (in.Request.DryRun != nil && *in.Request.DryRun) || !out.Response.Allowed {
		return Admitted{}, false
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(out.Response.Patch, &ops) != nil {
		return Admitted{}, false
	}
	for _, op := range ops {
		if op.Path != "/spec" {
			continue
		}
		var spec v1.VirtualMachineSpec
		if json.Unmarshal(op.Value, &spec) != nil || spec.Template == nil || spec.Template.Spec.Domain.Firmware == nil {
			return Admitted{}, false
		}
		fw := spec.Template.Spec.Domain.Firmware
		return Admitted{Namespace: in.Request.Namespace, Name: in.Request.Name, UUID: string(fw.UUID), Serial: fw.Serial}, true
	}
	return Admitted{}, false
}

func (s *server) appendAdmitted(path string, adm Admitted) {
	line, err := json.Marshal(adm)
	if err != nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-admission: admitted log:", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-admission: admitted log:", err)
	}
}

// register creates or replaces virt-operator's virt-api-mutator and
// virt-api-validator (named with suffix), keeping the webhooks for the
// served resources, pointing them at base, and limiting them to
// namespaces (all when empty).
func register(ctx context.Context, cs kubernetes.Interface, suffix string, namespaces []string, base string, caPEM []byte) error {
	var selector *metav1.LabelSelector
	if len(namespaces) > 0 {
		selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces,
		}}}
	}
	mut := components.NewVirtAPIMutatingWebhookConfiguration(installNamespace)
	mut.Name += suffix
	var hooks []admissionregistrationv1.MutatingWebhook
	for _, h := range mut.Webhooks {
		if servesAny(h.Rules) {
			h.ClientConfig = clientConfig(base, h.ClientConfig, caPEM)
			h.NamespaceSelector = selector
			hooks = append(hooks, h)
		}
	}
	mut.Webhooks = hooks
	val := components.NewVirtAPIValidatingWebhookConfiguration(installNamespace)
	val.Name += suffix
	var vhooks []admissionregistrationv1.ValidatingWebhook
	for _, h := range val.Webhooks {
		if servesAny(h.Rules) {
			h.ClientConfig = clientConfig(base, h.ClientConfig, caPEM)
			h.NamespaceSelector = selector
			vhooks = append(vhooks, h)
		}
	}
	val.Webhooks = vhooks

	muts := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := muts.Delete(ctx, mut.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replacing %s: %w", mut.Name, err)
	}
	if _, err := muts.Create(ctx, mut, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering %s: %w", mut.Name, err)
	}
	vals := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if err := vals.Delete(ctx, val.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replacing %s: %w", val.Name, err)
	}
	if _, err := vals.Create(ctx, val, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering %s: %w", val.Name, err)
	}
	return nil
}

// unregister deletes the webhook configurations register made with
// suffix, so that the API server no longer calls for them.
func unregister(ctx context.Context, cs kubernetes.Interface, suffix string) error {
	mut := components.NewVirtAPIMutatingWebhookConfiguration(installNamespace).Name + suffix
	if err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mut, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregistering %s: %w", mut, err)
	}
	val := components.NewVirtAPIValidatingWebhookConfiguration(installNamespace).Name + suffix
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, val, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregistering %s: %w", val, err)
	}
	return nil
}

// servesAny reports whether the rules name a resource served here. Their
// other resources are left in: the test cluster has no such objects.
func servesAny(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		for _, res := range r.Resources {
			if served[res] {
				return true
			}
		}
	}
	return false
}

func clientConfig(base string, cc admissionregistrationv1.WebhookClientConfig, caPEM []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := base + "/" + strings.TrimPrefix(path, "/")
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
}
