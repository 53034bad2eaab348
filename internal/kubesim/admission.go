package kubesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// Firmware is a VirtualMachine's SMBIOS identity as admission set it.
type Firmware struct {
	UUID   string `json:"uuid"`
	Serial string `json:"serial"`
}

// admission is the running KubeVirt admission server (tools/kubevirt-admission):
// KubeVirt v1.7.0's own VirtualMachine and VirtualMachineInstance webhooks
// (pkg/virt-api/webhooks), registered with the API server for the sim's
// namespaces under names of the sim's own.
type admission struct {
	cmd      *exec.Cmd
	port     int
	done     chan struct{}
	suffix   string
	admitted string // the server's -admitted-log
	log      string
}

// Names of KubeVirt's webhook configurations (virt-operator's
// components.VirtAPIMutatingWebhookName and VirtAPIValidatingWebhookName);
// each sim's carry a suffix of its own.
const (
	vmMutatorConfig   = "virt-api-mutator"
	vmValidatorConfig = "virt-api-validator"
)

// startAdmission runs KubeVirt's admission webhooks (see admission) and
// returns once the API server calls them: every VirtualMachine and
// VirtualMachineInstance created or updated in the sim's namespaces then
// passes KubeVirt's real validation and gets KubeVirt's real defaults.
func (s *Sim) startAdmission(ctx context.Context) error {
	bin, err := testcluster.ToolBinary("kubevirt-admission", testcluster.KubeVirtAdmissionVersion)
	if err != nil {
		return fmt.Errorf("kubesim: VirtualMachines are admitted by KubeVirt's own webhooks: %w", err)
	}
	dir := filepath.Join(s.dir, "admission")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	pki, err := newServingPKI("virt-api", []string{"virt-api.kubevirt.svc", "localhost"})
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	files := map[string][]byte{"tls.crt": pki.certPEM, "tls.key": pki.keyPEM, "ca.crt": pki.caPEM}
	kubeconfig, err := kubeconfigFor(s.opts.RESTConfig)
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	files["kubeconfig"] = kubeconfig
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return fmt.Errorf("kubesim: %w", err)
		}
	}
	suffix := "-kubesim-" + uuid.NewString()[:8]
	// The port is picked free and then handed to the server, so another
	// process may take it in between: the server then exits before it
	// registers anything, and a new port is tried.
	for attempt := 1; ; attempt++ {
		a := &admission{
			done:     make(chan struct{}),
			suffix:   suffix,
			admitted: filepath.Join(dir, "admitted.jsonl"),
			log:      filepath.Join(dir, "log"),
		}
		if a.port, err = admissionPort(); err != nil {
			return err
		}
		args := []string{
			"-listen", fmt.Sprintf("127.0.0.1:%d", a.port),
			"-kubeconfig", filepath.Join(dir, "kubeconfig"),
			"-tls-cert", filepath.Join(dir, "tls.crt"), "-tls-key", filepath.Join(dir, "tls.key"),
			"-ca-bundle", filepath.Join(dir, "ca.crt"),
			"-admitted-log", a.admitted, "-name-suffix", a.suffix,
		}
		if len(s.opts.Namespaces) > 0 {
			args = append(args, "-namespaces", strings.Join(s.opts.Namespaces, ","))
		}
		if s.opts.DisableSerialConsoleLog {
			args = append(args, "-disable-serial-console-log")
		}
		if err := a.start(bin, args); err != nil {
			return err
		}
		s.admission = a
		err = s.awaitAdmission(ctx)
		if err == nil || attempt == admissionPortAttempts || !errors.Is(err, errAdmissionPortTaken) {
			return err
		}
	}
}

// admissionPort picks the admission server's port (a test hands out a
// taken one).
var admissionPort = freePort

// admissionPortAttempts is how many free ports the admission server is
// given before its start fails.
const admissionPortAttempts = 5

// errAdmissionPortTaken marks an admission server that exited because its
// port was taken before it could listen.
var errAdmissionPortTaken = errors.New("its port was taken")

func (a *admission) start(bin string, args []string) error {
	logf, err := os.Create(a.log)
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	defer logf.Close()
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		return fmt.Errorf("kubesim: starting KubeVirt's admission webhooks: %w", err)
	}
	go func() {
		_ = a.cmd.Wait()
		close(a.done)
	}()
	return nil
}

// awaitAdmission returns once the server has registered its webhooks and
// a dry-run create in the sim's first namespace comes back with the
// firmware identity KubeVirt's mutator gives: the API server picks webhook
// configurations up through an informer. A sim whose namespace does not
// exist yet has nothing to admit: registration is enough.
func (s *Sim) awaitAdmission(ctx context.Context) error {
	ns := metav1.NamespaceDefault
	if len(s.opts.Namespaces) > 0 {
		ns = s.opts.Namespaces[0]
	}
	var err error
	for {
		if registered(s.admission.log) {
			probe := admissionProbe(ns)
			err = s.cl.Create(ctx, probe, client.DryRunAll)
			fw := probe.Spec.Template.Spec.Domain.Firmware
			if err == nil && fw != nil && fw.UUID != "" || isNamespaceNotFound(err) {
				return nil
			}
		}
		select {
		case <-s.admission.done:
			log := tail(s.admission.log)
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("kubesim: KubeVirt's admission webhooks exited, %w: %s", errAdmissionPortTaken, log)
			}
			return fmt.Errorf("kubesim: KubeVirt's admission webhooks exited: %s", log)
		case <-ctx.Done():
			return fmt.Errorf("kubesim: the API server does not call KubeVirt's admission webhooks (last probe: %v; server log: %s): %w",
				err, tail(s.admission.log), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// registered reports whether the admission server's log says it serves.
func registered(log string) bool {
	b, _ := os.ReadFile(log)
	return strings.Contains(string(b), "serving https://")
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

// stopAdmission stops the server and deletes its webhook configurations,
// so that the API server does not call a server that is gone.
func (s *Sim) stopAdmission(ctx context.Context) error {
	a := s.admission
	var errs []error
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: vmMutatorConfig + a.suffix}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: vmValidatorConfig + a.suffix}},
	} {
		if err := s.cl.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("kubesim: unregistering KubeVirt's admission webhooks: %w", err))
		}
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
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
