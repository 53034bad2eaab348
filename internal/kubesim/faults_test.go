package kubesim

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

func isConflict(err error) bool { return apierrors.IsConflict(err) }

func TestTransientDataVolumeFailure(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	s.FailNextDataVolumes(1, "", "")
	blankDV(t, cl, ns, "d")
	dv := waitDVPhase(t, cl, ns, "d", cdiv1.Failed)
	if r := dvCondition(dv, cdiv1.DataVolumeRunning); r.Reason != ReasonEvicted || r.Message != DefaultTransientMessage {
		t.Errorf("Running condition %+v, want %s", r, ReasonEvicted)
	}
	// Recreated, it goes through.
	if err := cl.Delete(t.Context(), dv); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "DataVolume gone", func() string {
		if getDV(t, cl, ns, "d").Name != "" {
			return "still there"
		}
		return ""
	})
	blankDV(t, cl, ns, "d")
	waitDVPhase(t, cl, ns, "d", cdiv1.Succeeded)

	// A custom reason, for a network failure.
	s.FailNextDataVolumes(1, ReasonError, "Unable to connect to http data source: connection reset by peer")
	blankDV(t, cl, ns, "e")
	dv = waitDVPhase(t, cl, ns, "e", cdiv1.Failed)
	if r := dvCondition(dv, cdiv1.DataVolumeRunning); !strings.Contains(r.Message, "connection reset") {
		t.Errorf("Running condition %+v, want the custom message", r)
	}
}

func TestSchedulingFailures(t *testing.T) {
	for _, tc := range []struct {
		f    SchedulingFailure
		want string
	}{{InsufficientMemory, "Insufficient memory"}, {MissingKVM, "devices.kubevirt.io/kvm"}} {
		t.Run(tc.want, func(t *testing.T) {
			c := cluster.Get(t)
			cl := c.AdminClient()
			ns := namespace(t, cl)
			s := startSim(t, fast(c, ns))
			blankDV(t, cl, ns, "root")
			s.SetSchedulingFailure(tc.f)
			if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyAlways)); err != nil {
				t.Fatal(err)
			}
			vm := waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusUnschedulable)
			vmi, _ := getVMI(cl, ns, "vm")
			cond := vmiCond(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
			if vmi.Status.Phase != kubevirtv1.Scheduling || cond.Status != corev1.ConditionFalse || cond.Reason != ReasonUnschedulable || !strings.Contains(cond.Message, tc.want) {
				t.Errorf("VMI phase %q PodScheduled %+v, want Scheduling, False, Unschedulable, %q", vmi.Status.Phase, cond, tc.want)
			}
			found := false
			for _, c := range vm.Status.Conditions {
				found = found || (string(c.Type) == string(corev1.PodScheduled) && strings.Contains(c.Message, tc.want))
			}
			if !found {
				t.Errorf("VM conditions %+v lack PodScheduled=False", vm.Status.Conditions)
			}
			s.ClearSchedulingFailure()
			waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusRunning)
		})
	}
}

func TestGuestNeverReady(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	blankDV(t, cl, ns, "root")
	s.GuestNeverReady(ns, "vm")
	vm := virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyAlways)
	vm.Spec.Template.Spec.ReadinessProbe = &kubevirtv1.Probe{Handler: kubevirtv1.Handler{GuestAgentPing: &kubevirtv1.GuestAgentPing{}}}
	if err := cl.Create(t.Context(), vm); err != nil {
		t.Fatal(err)
	}
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusRunning)
	time.Sleep(5 * s.opts.AgentDelay)
	vmi, _ := getVMI(cl, ns, "vm")
	if c := vmiCond(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected); c.Status == corev1.ConditionTrue {
		t.Errorf("AgentConnected %+v, want never True", c)
	}
	if c := vmiCond(vmi, kubevirtv1.VirtualMachineInstanceReady); c.Status == corev1.ConditionTrue {
		t.Errorf("Ready %+v, want not True with a guest-agent readiness probe", c)
	}
	if got := getVM(cl, ns, "vm"); got.Status.Ready {
		t.Error("VM status.ready is true")
	}

	// The annotation does the same, without a readiness probe: Ready, but no agent.
	vm2 := virtualMachine(ns, "vm2", "root", kubevirtv1.RunStrategyAlways)
	vm2.Spec.Template.ObjectMeta.Annotations = map[string]string{AnnotationNoGuestAgent: "true"}
	if err := cl.Create(t.Context(), vm2); err != nil {
		t.Fatal(err)
	}
	waitPrintable(t, cl, ns, "vm2", kubevirtv1.VirtualMachineStatusRunning)
	time.Sleep(5 * s.opts.AgentDelay)
	vmi, _ = getVMI(cl, ns, "vm2")
	if c := vmiCond(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected); c.Status == corev1.ConditionTrue {
		t.Errorf("AgentConnected %+v, want never True", c)
	}
}

func TestSurvivesAPIServerRestart(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s := startSim(t, fast(c, ns))
	kc := kube.NewForRESTConfig(c.RESTConfig())
	if err := kc.CreateDataVolume(t.Context(), dataVolume(ns, "disk", "1Gi", cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}})); err != nil {
		t.Fatal(err)
	}
	blankDV(t, cl, ns, "root")
	if err := cl.Create(t.Context(), virtualMachine(ns, "vm", "root", kubevirtv1.RunStrategyAlways)); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "disk", cdiv1.UploadReady)
	waitPrintable(t, cl, ns, "vm", kubevirtv1.VirtualMachineStatusRunning)
	eventually(t, 15*time.Second, "APIService Available again", func() string {
		ok, why, err := s.APIServiceAvailable(t.Context())
		if ok {
			return ""
		}
		return fmt.Sprint(why, err)
	})
	var token string
	eventually(t, 15*time.Second, "token after restart", func() string {
		var err error
		token, err = kc.RequestUploadToken(t.Context(), ns, "disk")
		if err != nil {
			return err.Error()
		}
		return ""
	})
	path, sum := image(t, "qcow2", "64M")
	f, err := openFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := kube.Upload(t.Context(), kube.UploadOptions{ProxyURL: s.UploadProxyURL(), ServerName: s.UploadProxyServerName(), CACertPEM: s.UploadProxyCACertPEM(), Token: token, Body: f}); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "disk", cdiv1.Succeeded)
	// As CDI does, the claim holds the qcow2's content as raw: an empty
	// 64 MiB disk.
	zeros := diskdigest.Bytes(make([]byte, 64<<20))
	if got, _ := s.ReceivedSHA256(ns, "disk"); got != zeros {
		t.Errorf("ReceivedSHA256 %q, want %s (64 MiB of zeros)", got, zeros)
	}
	if rec, _ := s.ReceivedImage(ns, "disk"); rec.SentSHA256 != sum || rec.SentFormat != "qcow2" {
		t.Errorf("received %+v, want the qcow2 with sha256 %s as sent", rec, sum)
	}
	if err := s.LastError(); err != nil {
		t.Logf("last reconcile error (retried): %v", err)
	}
}

func TestStopLeavesNothingBehind(t *testing.T) {
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	s, err := Start(t.Context(), fast(c, ns))
	if err != nil {
		t.Fatal(err)
	}
	// Something in flight: a slow import.
	path, _ := image(t, "raw", "8M")
	base := slowFileServer(t, path, 200*time.Millisecond)
	if err := cl.Create(t.Context(), dataVolume(ns, "slow", "1Gi", cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: base + "/disk.img"}})); err != nil {
		t.Fatal(err)
	}
	waitDVPhase(t, cl, ns, "slow", cdiv1.ImportInProgress)
	ports := []int{s.proxy.port, s.tokenAPI.port}
	dir := s.Dir()
	admission := s.admission
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, p := range ports {
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
			conn.Close()
			t.Errorf("port %d still open after Stop", p)
		}
	}
	if _, err := openFile(dir); err == nil {
		t.Errorf("Dir %s still exists", dir)
	}
	as := &unstructured.Unstructured{}
	as.SetGroupVersionKind(apiServiceGVK)
	if err := cl.Get(t.Context(), client.ObjectKey{Name: APIServiceName}, as); !apierrors.IsNotFound(err) {
		t.Errorf("APIService after Stop: %v, want not found", err)
	}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: vmMutatorConfig + "-" + admission.id}, &admissionregistrationv1.MutatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
		t.Errorf("MutatingWebhookConfiguration after Stop: %v, want not found", err)
	}
	if err := cl.Get(t.Context(), client.ObjectKey{Name: vmValidatorConfig + "-" + admission.id}, &admissionregistrationv1.ValidatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingWebhookConfiguration after Stop: %v, want not found", err)
	}
	// The admission server is the process's, shared with other sims: the
	// sim's registration is gone from it.
	if admitsFor(t, admission.srv, admission.id) {
		t.Errorf("the admission server still serves the stopped sim %s", admission.id)
	}
	eventually(t, 5*time.Second, "no sim goroutines", func() string {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "internal/kubesim.") && !strings.Contains(g, "_test.go") {
				left = append(left, g)
			}
		}
		return strings.Join(left, "\n\n")
	})
}
