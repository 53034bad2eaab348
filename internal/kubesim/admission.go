package kubesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Firmware is a VirtualMachine's SMBIOS identity as admission set it.
type Firmware struct {
	UUID   string `json:"uuid"`
	Serial string `json:"serial"`
}

// admission is a sim's registration with KubeVirt's admission server
// (tools/kubevirt-admission): KubeVirt v1.7.0's own VirtualMachine and
// VirtualMachineInstance webhooks (pkg/virt-api/webhooks), registered with
// the API server for the sim's namespaces under names of the sim's own.
type admission struct {
	srv      *admissionServer
	id       string // the registration's name; the configurations end in "-"+id
	admitted string // the admitted log
}

// Names of KubeVirt's webhook configurations (virt-operator's
// components.VirtAPIMutatingWebhookName and VirtAPIValidatingWebhookName);
// each sim's end in "-" and its registration's id.
const (
	vmMutatorConfig   = "virt-api-mutator"
	vmValidatorConfig = "virt-api-validator"
)

// startAdmission registers the sim with the process's KubeVirt admission
// server for its API server (starting it if none runs) and returns once
// the API server calls it: every VirtualMachine and VirtualMachineInstance
// created or updated in the sim's namespaces then passes KubeVirt's real
// validation and gets KubeVirt's real defaults.
func (s *Sim) startAdmission(ctx context.Context) error {
	srv, err := acquireAdmissionServer(ctx, s.opts.RESTConfig)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "admission")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		srv.release()
		return fmt.Errorf("kubesim: %w", err)
	}
	a := &admission{srv: srv, id: "kubesim-" + uuid.NewString()[:8], admitted: filepath.Join(dir, "admitted.jsonl")}
	s.admission = a
	if err := srv.register(ctx, a.id, simRegistration{
		Namespaces:              s.opts.Namespaces,
		DisableSerialConsoleLog: s.opts.DisableSerialConsoleLog,
		AdmittedLog:             a.admitted,
	}); err != nil {
		return err
	}
	return s.awaitAdmission(ctx)
}

// awaitAdmission returns once a dry-run create in the sim's first
// namespace comes back with the firmware identity KubeVirt's mutator
// gives: the API server picks webhook configurations up through an
// informer. A sim whose namespace does not exist yet has nothing to admit:
// registration is enough.
func (s *Sim) awaitAdmission(ctx context.Context) error {
	ns := metav1.NamespaceDefault
	if len(s.opts.Namespaces) > 0 {
		ns = s.opts.Namespaces[0]
	}
	srv := s.admission.srv
	for {
		probe := admissionProbe(ns)
		err := s.cl.Create(ctx, probe, client.DryRunAll)
		fw := probe.Spec.Template.Spec.Domain.Firmware
		if err == nil && fw != nil && fw.UUID != "" || isNamespaceNotFound(err) {
			return nil
		}
		select {
		case <-srv.proc.Done():
			return fmt.Errorf("kubesim: KubeVirt's admission webhooks exited: %s", tail(srv.log))
		case <-ctx.Done():
			return fmt.Errorf("kubesim: the API server does not call KubeVirt's admission webhooks (last probe: %v; server log: %s): %w",
				err, tail(srv.log), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// isNamespaceNotFound reports whether err is the API server's refusal of an
// object in a namespace that does not exist.
func isNamespaceNotFound(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsNotFound(err) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// admissionProbe is the smallest VirtualMachine KubeVirt admits.
func admissionProbe(ns string) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubesim-admission-probe"},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{Resources: kubevirtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				}},
			}},
		},
	}
}

// stopAdmission unregisters the sim, so that the API server no longer
// calls for its namespaces, and lets go of the server.
func (s *Sim) stopAdmission(ctx context.Context) error {
	a := s.admission
	defer a.srv.release()
	err := a.srv.unregister(ctx, a.id)
	if err == nil {
		return nil
	}
	// The server is gone or does not answer: the configurations go
	// without it.
	var errs []error
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: vmMutatorConfig + "-" + a.id}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: vmValidatorConfig + "-" + a.id}},
	} {
		if err := s.cl.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("kubesim: unregistering KubeVirt's admission webhooks: %w", err))
		}
	}
	return errors.Join(errs...)
}

// AdmittedFirmware returns the firmware identity KubeVirt's mutator gave
// the VirtualMachine namespace/name when it was created (the last create,
// if it was created more than once); ok is false if it gave none.
func (s *Sim) AdmittedFirmware(namespace, name string) (Firmware, bool) {
	if s.admission == nil {
		return Firmware{}, false
	}
	b, err := os.ReadFile(s.admission.admitted)
	if err != nil {
		return Firmware{}, false
	}
	var fw Firmware
	ok := false
	for line := range strings.SplitSeq(string(b), "\n") {
		var rec struct {
			Namespace, Name string
			Firmware
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Namespace == namespace && rec.Name == name {
			fw, ok = rec.Firmware, true
		}
	}
	return fw, ok
}

// kubeconfigFor is a kubeconfig with cfg's server and credentials.
func kubeconfigFor(cfg *rest.Config) ([]byte, error) {
	read := func(data []byte, file string) ([]byte, error) {
		if len(data) > 0 || file == "" {
			return data, nil
		}
		return os.ReadFile(file)
	}
	ca, err := read(cfg.CAData, cfg.CAFile)
	if err != nil {
		return nil, err
	}
	cert, err := read(cfg.CertData, cfg.CertFile)
	if err != nil {
		return nil, err
	}
	key, err := read(cfg.KeyData, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	const name = "kubesim"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, TLSServerName: cfg.ServerName}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key, Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

// tail returns the end of the file at path, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// syncFirmwareUUID follows KubeVirt v1.7.0's FirmwareController.Sync
// (pkg/virt-controller/watch/vm/firmware.go): a VM whose template has no
// firmware UUID gets the legacy one, CalculateLegacyUUID(name), through a
// JSON patch that tests the firmware it read. The serial is not restored.
func (s *Sim) syncFirmwareUUID(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	if vm.Spec.Template == nil {
		return nil
	}
	old := vm.Spec.Template.Spec.Domain.Firmware
	if old != nil && old.UUID != "" {
		return nil
	}
	fw := &kubevirtv1.Firmware{}
	if old != nil {
		fw = old.DeepCopy()
	}
	fw.UUID = CalculateLegacyUUID(vm.Name)
	const path = "/spec/template/spec/domain/firmware"
	p, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": old},
		{"op": "add", "path": path, "value": fw},
	})
	if err != nil {
		return err
	}
	return s.cl.Patch(ctx, vm, client.RawPatch(types.JSONPatchType, p))
}

// legacyUUIDNamespace is KubeVirt's magicUUID
// (pkg/virt-controller/watch/vm/firmware.go, v1.7.0).
var legacyUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// CalculateLegacyUUID is KubeVirt's firmware UUID for a VM named name that
// has none of its own (pkg/virt-controller/watch/vm/firmware.go, v1.7.0).
func CalculateLegacyUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(legacyUUIDNamespace, []byte(name)).String())
}
