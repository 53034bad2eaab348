package kubesim

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// VMMutatorName is the MutatingWebhookConfiguration the sim registers for
// VirtualMachines, after virt-operator's virt-api-mutator.
const VMMutatorName = "kubesim-virt-api-mutator"

// vmMutatorPath is where the sim serves the VirtualMachine mutator, as
// virt-api serves it (pkg/virt-operator/resource/generate/components/webhooks.go).
const vmMutatorPath = "/virtualmachines-mutate"

// Firmware is a VirtualMachine's SMBIOS identity as admission set it.
type Firmware struct {
	UUID   string
	Serial string
}

// startAdmission serves KubeVirt's VirtualMachine mutating webhook on
// 127.0.0.1 and registers it with the API server, which calls it on every
// VirtualMachine create and update; Start returns once the API server
// applies it.
func (s *Sim) startAdmission(ctx context.Context) error {
	pki, err := newServingPKI("virt-api", []string{"virt-api.kubevirt.svc", "localhost"})
	if err != nil {
		return fmt.Errorf("kubesim: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+vmMutatorPath, s.serveVMMutate)
	s.admission, err = s.serveTLS(mux, func(srv *http.Server) {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12}
	})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", s.admission.port, vmMutatorPath)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: VMMutatorName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "virtualmachines-mutator.kubevirt.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: pki.caPEM},
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To(int32(10)),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{kubevirtv1.SchemeGroupVersion.Group}, APIVersions: []string{kubevirtv1.SchemeGroupVersion.Version},
					Resources: []string{"virtualmachines"},
				},
			}},
		}},
	}
	existing := &admissionregistrationv1.MutatingWebhookConfiguration{}
	switch err := s.cl.Get(ctx, client.ObjectKey{Name: VMMutatorName}, existing); {
	case apierrors.IsNotFound(err):
		err = s.cl.Create(ctx, cfg)
		if err != nil {
			return fmt.Errorf("kubesim: registering the VirtualMachine mutator: %w", err)
		}
	case err != nil:
		return fmt.Errorf("kubesim: registering the VirtualMachine mutator: %w", err)
	default:
		existing.Webhooks = cfg.Webhooks
		if err := s.cl.Update(ctx, existing); err != nil {
			return fmt.Errorf("kubesim: registering the VirtualMachine mutator: %w", err)
		}
	}
	// The API server picks webhook configurations up through an informer:
	// a dry-run create shows when it calls this one.
	for {
		probe := &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubesim-admission-probe"},
			Spec: kubevirtv1.VirtualMachineSpec{
				RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted),
				Template:    &kubevirtv1.VirtualMachineInstanceTemplateSpec{},
			},
		}
		err := s.cl.Create(ctx, probe, client.DryRunAll)
		if err == nil && probe.Spec.Template.Spec.Domain.Firmware != nil && probe.Spec.Template.Spec.Domain.Firmware.UUID != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubesim: the API server does not call the VirtualMachine mutator (last probe: %v): %w", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unregisterAdmission deletes the webhook configuration, so that the API
// server does not call a server that is gone.
func (s *Sim) unregisterAdmission(ctx context.Context) error {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: VMMutatorName}}
	if err := s.cl.Delete(ctx, cfg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("kubesim: unregistering the VirtualMachine mutator: %w", err)
	}
	return nil
}

// AdmittedFirmware returns the firmware identity the mutator gave the
// VirtualMachine namespace/name when it was created (the last create, if
// it was created more than once); ok is false if it gave none.
func (s *Sim) AdmittedFirmware(namespace, name string) (Firmware, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fw, ok := s.admitted[types.NamespacedName{Namespace: namespace, Name: name}]
	return fw, ok
}

// serveVMMutate follows KubeVirt v1.7.0's VMsMutator.Mutate
// (pkg/virt-api/webhooks/mutating-webhook/mutators/vm-mutator.go): on
// create only, setFirmwareDefaultsIfEmpty gives the VM a random firmware
// UUID and serial where its template has none; on update it leaves them
// alone ("to avoid race conditions with the VM controller"), so an update
// that drops them is not undone here (the VM controller then sets the
// legacy UUID; see syncFirmwareUUID). The real mutator also applies
// SetVirtualMachineDefaults (pkg/defaults) and instance types, which the
// sim does not; and KubeVirt's validating admitter for VirtualMachines
// (pkg/virt-api/webhooks/validating-webhook/admitters/vms-admitter.go)
// does not refuse a changed firmware UUID, so neither does the sim.
func (s *Sim) serveVMMutate(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("bad AdmissionReview: %v", errors.Join(err, errors.New("no request"))), http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	review.Request, review.Response = nil, resp
	vm := &kubevirtv1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusUnprocessableEntity, Message: err.Error()}
		writeJSON(w, http.StatusOK, review)
		return
	}
	if req.Operation != admissionv1.Create || vm.DeletionTimestamp != nil || vm.Spec.Template == nil {
		writeJSON(w, http.StatusOK, review)
		return
	}
	fw := vm.Spec.Template.Spec.Domain.Firmware
	var ops []map[string]any
	set := Firmware{}
	const path = "/spec/template/spec/domain/firmware"
	if !hasDomain(req.Object.Raw) {
		// Nothing to add the firmware to: replace /spec, as the real
		// mutator always does.
		set = Firmware{UUID: uuid.NewString(), Serial: uuid.NewString()}
		vm.Spec.Template.Spec.Domain.Firmware = &kubevirtv1.Firmware{UUID: types.UID(set.UUID), Serial: set.Serial}
		ops = append(ops, map[string]any{"op": "replace", "path": "/spec", "value": vm.Spec})
	} else if fw == nil {
		set = Firmware{UUID: uuid.NewString(), Serial: uuid.NewString()}
		ops = append(ops, map[string]any{"op": "add", "path": path, "value": map[string]string{"uuid": set.UUID, "serial": set.Serial}})
	} else {
		set = Firmware{UUID: string(fw.UUID), Serial: fw.Serial}
		if fw.UUID == "" {
			set.UUID = uuid.NewString()
			ops = append(ops, map[string]any{"op": "add", "path": path + "/uuid", "value": set.UUID})
		}
		if fw.Serial == "" {
			set.Serial = uuid.NewString()
			ops = append(ops, map[string]any{"op": "add", "path": path + "/serial", "value": set.Serial})
		}
	}
	if len(ops) > 0 {
		p, err := json.Marshal(ops)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Patch, resp.PatchType = p, ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	if req.DryRun == nil || !*req.DryRun {
		s.mu.Lock()
		s.admitted[types.NamespacedName{Namespace: req.Namespace, Name: req.Name}] = set
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, review)
}

// hasDomain reports whether the VirtualMachine in raw has
// spec.template.spec.domain.
func hasDomain(raw []byte) bool {
	var obj struct {
		Spec struct {
			Template *struct {
				Spec *struct {
					Domain json.RawMessage `json:"domain"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Spec.Template == nil || obj.Spec.Template.Spec == nil {
		return false
	}
	d := obj.Spec.Template.Spec.Domain
	return len(d) > 0 && string(d) != "null"
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
