package kubesim

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/diskdigest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/guestboot/testguest"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/kube"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

var cluster testcluster.Shared

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(cluster.Main(m))
}

// fast are timings that keep the tests short, for a sim that serves only
// namespaces ns (other tests' leftovers in the shared cluster are not its
// business).
func fast(c *testcluster.Cluster, ns ...string) Options {
	return Options{
		Cluster: c, Namespaces: ns, Step: 30 * time.Millisecond,
		AgentDelay: 100 * time.Millisecond, UploadReadyWait: 500 * time.Millisecond,
	}
}

func startSim(t *testing.T, opts Options) *Sim {
	t.Helper()
	s, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

var nsSeq atomic.Int64

// namespace creates a namespace of the test's own.
func namespace(t *testing.T, cl client.Client) string {
	t.Helper()
	name := fmt.Sprintf("sim-%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))
	if err := cl.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// eventually polls cond until it returns "" or the timeout passes, then
// fails with cond's last word.
// eventuallyGuest is eventually for conditions that wait on a real guest
// (QEMU under TCG, started once a machine-wide guest slot is free): it
// waits until shortly before the test binary's deadline, since how long a
// guest takes depends on how busy the machine is.
func eventuallyGuest(t *testing.T, what string, cond func() string) {
	t.Helper()
	ctx := testguest.Context(t)
	timeout := time.Duration(math.MaxInt64)
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	eventually(t, timeout, what, cond)
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %v: %s", what, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dataVolume(ns, name string, size string, src cdiv1.DataVolumeSource) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source: &src,
			Storage: &cdiv1.StorageSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse(size),
				}},
			},
		},
	}
}

func getDV(t *testing.T, cl client.Client, ns, name string) *cdiv1.DataVolume {
	t.Helper()
	dv := &cdiv1.DataVolume{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dv); err != nil {
		return &cdiv1.DataVolume{}
	}
	return dv
}

func waitDVPhase(t *testing.T, cl client.Client, ns, name string, phase cdiv1.DataVolumePhase) *cdiv1.DataVolume {
	t.Helper()
	var dv *cdiv1.DataVolume
	eventually(t, 15*time.Second, "DataVolume "+name+" "+string(phase), func() string {
		dv = getDV(t, cl, ns, name)
		if dv.Status.Phase == phase {
			return ""
		}
		return fmt.Sprintf("phase %q, conditions %+v", dv.Status.Phase, dv.Status.Conditions)
	})
	return dv
}

func dvCondition(dv *cdiv1.DataVolume, ct cdiv1.DataVolumeConditionType) cdiv1.DataVolumeCondition {
	for _, c := range dv.Status.Conditions {
		if c.Type == ct {
			return c
		}
	}
	return cdiv1.DataVolumeCondition{}
}

// image makes a disk image with qemu-img and returns its path and SHA-256.
func image(t *testing.T, format, size string) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk."+format)
	out, err := exec.Command("qemu-img", "create", "-f", format, path, size).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	if format == "raw" {
		// Some non-zero content so that the hash means something.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(strings.Repeat("kubesim", 1000))
		_ = f.Close()
	}
	return path, fileSHA(t, path)
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return diskdigest.Bytes(b)
}

func openFile(path string) (*os.File, error) { return os.Open(path) }

// uploadSim starts the simulator on a new namespace of the shared cluster
// and returns it with an admin client, the namespace and the provider's
// client, for the upload tests.
func uploadSim(t *testing.T) (*Sim, client.Client, string, *kube.Client) {
	t.Helper()
	c := cluster.Get(t)
	cl := c.AdminClient()
	ns := namespace(t, cl)
	return startSim(t, fast(c, ns)), cl, ns, kube.NewForRESTConfig(c.RESTConfig())
}

// openImage opens the image at path for an upload, closed when the test
// ends, and returns its size.
func openImage(t *testing.T, path string) (*os.File, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return f, st.Size()
}
