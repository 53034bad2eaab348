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
// What differs from virt-api: the cluster configuration comes from a
// KubeVirt CR given on the command line (the test cluster has no
// virt-operator), VirtualMachineInstancePresets are none, and every
// VirtualMachine create that the mutator answers is appended to
// -admitted-log, so that tests can compare the identity KubeVirt gave a VM
// with the one it keeps.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
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
	kubeconfig, listen, certFile, keyFile, caFile, admittedLog string
	// nameSuffix and namespaces let several test clusters' worth of
	// simulated controllers share one API server: each registers its own
	// webhook configurations, for its own namespaces.
	nameSuffix, namespaces  string
	disableSerialConsoleLog bool
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to register with")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "address to serve HTTPS on")
	flag.StringVar(&o.certFile, "tls-cert", "", "serving certificate (PEM)")
	flag.StringVar(&o.keyFile, "tls-key", "", "serving key (PEM)")
	flag.StringVar(&o.caFile, "ca-bundle", "", "CA that signed the serving certificate (PEM), given to the API server")
	flag.StringVar(&o.admittedLog, "admitted-log", "", "file to append the firmware identity of every admitted VirtualMachine create to (JSON lines)")
	flag.StringVar(&o.nameSuffix, "name-suffix", "", "appended to the webhook configurations' names (virt-api-mutator, virt-api-validator)")
	flag.StringVar(&o.namespaces, "namespaces", "", "comma-separated namespaces whose objects the webhooks admit (default: all)")
	flag.BoolVar(&o.disableSerialConsoleLog, "disable-serial-console-log", false, "the KubeVirt CR's spec.configuration.virtualMachineOptions.disableSerialConsoleLog")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "kubevirt-admission:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.kubeconfig == "" || o.certFile == "" || o.keyFile == "" || o.caFile == "" {
		return errors.New("-kubeconfig, -tls-cert, -tls-key and -ca-bundle are required")
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	virtCli, err := kubecli.GetKubevirtClientFromRESTConfig(restConfig)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(o.caFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	app := &app{
		clusterConfig:   clusterConfig(o),
		virtCli:         virtCli,
		informers:       emptyInformers(),
		serviceAccounts: webhooks.KubeVirtServiceAccounts(installNamespace),
		admittedLog:     o.admittedLog,
	}
	srv := &http.Server{Handler: app.mux(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, o.certFile, o.keyFile) }()

	base := "https://" + ln.Addr().String()
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	if err := register(ctx, cs, o, base, caPEM); err != nil {
		return err
	}
	// The line the parent process waits for.
	fmt.Printf("serving %s\n", base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}

// clusterConfig is KubeVirt's cluster configuration for a KubeVirt CR with
// the given options and KubeVirt's defaults for everything else, built the
// way KubeVirt's own tests build it (pkg/testutils/mock_config.go).
func clusterConfig(o options) *virtconfig.ClusterConfig {
	cfg := v1.KubeVirtConfiguration{}
	if o.disableSerialConsoleLog {
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

type app struct {
	clusterConfig   *virtconfig.ClusterConfig
	virtCli         kubecli.KubevirtClient
	informers       *webhooks.Informers
	serviceAccounts map[string]struct{}
	admittedLog     string
	logMu           sync.Mutex
}

// mux routes KubeVirt's webhook paths to KubeVirt's handlers, as
// virt-api's registerValidatingWebhooks and registerMutatingWebhook do.
func (a *app) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc(components.VMICreateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMICreate(w, r, a.clusterConfig, a.serviceAccounts,
			func(field *field.Path, spec *v1.VirtualMachineInstanceSpec, cfg *virtconfig.ClusterConfig) []metav1.StatusCause {
				return netadmitter.Validate(field, spec, cfg)
			})
	})
	m.HandleFunc(components.VMIUpdateValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMIUpdate(w, r, a.clusterConfig, a.serviceAccounts)
	})
	m.HandleFunc(components.VMValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeVMs(w, r, a.clusterConfig, a.virtCli, a.informers, a.serviceAccounts)
	})
	m.HandleFunc(components.StatusValidatePath, func(w http.ResponseWriter, r *http.Request) {
		validating_webhook.ServeStatusValidation(w, r, a.clusterConfig, a.virtCli, a.informers, a.serviceAccounts)
	})
	m.HandleFunc(components.VMMutatePath, a.recordAdmitted(func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMs(w, r, a.clusterConfig, a.virtCli)
	}))
	m.HandleFunc(components.VMIMutatePath, func(w http.ResponseWriter, r *http.Request) {
		mutating_webhook.ServeVMIs(w, r, a.clusterConfig, a.informers, a.serviceAccounts)
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
func (a *app) recordAdmitted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{ResponseWriter: w}
		h(rec, r)
		if a.admittedLog == "" {
			return
		}
		if adm, ok := admittedFirmware(body, rec.body.Bytes()); ok {
			a.appendAdmitted(adm)
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

func (a *app) appendAdmitted(adm Admitted) {
	line, err := json.Marshal(adm)
	if err != nil {
		return
	}
	a.logMu.Lock()
	defer a.logMu.Unlock()
	f, err := os.OpenFile(a.admittedLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
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
// virt-api-validator (named with o.nameSuffix), keeping the webhooks for
// the served resources, pointing them at base, and limiting them to
// o.namespaces.
func register(ctx context.Context, cs kubernetes.Interface, o options, base string, caPEM []byte) error {
	var selector *metav1.LabelSelector
	if o.namespaces != "" {
		selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: strings.Split(o.namespaces, ","),
		}}}
	}
	mut := components.NewVirtAPIMutatingWebhookConfiguration(installNamespace)
	mut.Name += o.nameSuffix
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
	val.Name += o.nameSuffix
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
