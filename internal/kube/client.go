package kube

import (
	"context"
	"sync"

	"github.com/go-logr/logr"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1beta1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The client logs nothing through controller-runtime's global logger: the
// provider reports through Terraform's logs and the engine's events.
// Without a logger, controller-runtime prints a stack trace to stderr the
// first time a client is made.
func init() { ctrllog.SetLogger(logr.Discard()) }

// NewScheme returns the types the provider reads and writes: core/v1,
// storage/v1, coordination/v1, batch/v1, kubevirt.io/v1 and
// cdi.kubevirt.io/v1beta1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(storagev1.AddToScheme(s))
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(batchv1.AddToScheme(s))
	utilruntime.Must(kubevirtv1.AddToScheme(s))
	utilruntime.Must(cdiv1beta1.AddToScheme(s))
	return s
}

// scheme is NewScheme's, for naming the kinds of objects.
var scheme = NewScheme()

// Client talks to one cluster. It connects lazily: New reads no file and
// opens no connection, so a provider can be configured (and `terraform
// validate` run) offline or before the kubeconfig exists; the settings are
// resolved on first use, and resolved again on the next use if that failed.
// It is safe for concurrent use.
type Client struct {
	config Config

	mu  sync.Mutex
	c   client.WithWatch
	cfg *rest.Config
}

// New returns a client for the settings in cfg. It does not validate them:
// call cfg.Validate for plan-time checks.
func New(cfg Config) *Client {
	return &Client{config: cfg}
}

// NewForRESTConfig returns a client for an already resolved configuration
// (tests, or callers that build their own).
func NewForRESTConfig(cfg *rest.Config) *Client {
	return &Client{cfg: rest.CopyConfig(cfg)}
}

// raw returns the underlying controller-runtime client, connecting if
// needed. Its errors are not wrapped: the typed calls wrap them.
func (c *Client) raw() (client.WithWatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		return c.c, nil
	}
	cfg := c.cfg
	if cfg == nil {
		var err error
		if cfg, err = c.config.RESTConfig(); err != nil {
			return nil, err
		}
	}
	// client.NewWithWatch neither connects nor discovers: its REST mapper asks the
	// server lazily, on the first request for each API group (watches too).
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		return nil, &ConfigError{Attribute: AttrHost, Detail: "cannot create a Kubernetes client", Err: err}
	}
	c.c, c.cfg = cl, cfg
	return cl, nil
}

// wrap turns err from op on obj into an *Error, classifying it.
func wrap(op, kind, namespace, name string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Kind: kind, Namespace: namespace, Name: name, Class: classify(err), Err: err}
}

// get reads namespace/name into obj.
func (c *Client) get(ctx context.Context, kind, namespace, name string, obj client.Object) error {
	cl, err := c.raw()
	if err != nil {
		return wrap("get", kind, namespace, name, err)
	}
	return wrap("get", kind, namespace, name, cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj))
}

func (c *Client) write(ctx context.Context, op, kind string, obj client.Object) error {
	cl, err := c.raw()
	if err == nil {
		switch op {
		case "create":
			err = cl.Create(ctx, obj)
		case "update":
			err = cl.Update(ctx, obj)
		case "update status":
			err = cl.Status().Update(ctx, obj)
		}
	}
	return wrap(op, kind, obj.GetNamespace(), obj.GetName(), err)
}

// del deletes obj (identified by namespace and name); an object that is
// already gone is success.
func (c *Client) del(ctx context.Context, kind string, obj client.Object, opts ...client.DeleteOption) error {
	cl, err := c.raw()
	if err == nil {
		err = cl.Delete(ctx, obj, opts...)
	}
	if err != nil && IsNotFound(err) {
		return nil
	}
	return wrap("delete", kind, obj.GetNamespace(), obj.GetName(), err)
}

// GetVirtualMachine reads a VirtualMachine. A missing one gives an error
// for which IsNotFound is true.
func (c *Client) GetVirtualMachine(ctx context.Context, namespace, name string) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.get(ctx, "VirtualMachine", namespace, name, vm); err != nil {
		return nil, err
	}
	return vm, nil
}

// CreateVirtualMachine creates vm and updates it with what the server
// stored (uid, resourceVersion, defaults).
// It is written as FieldManager.
func (c *Client) CreateVirtualMachine(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	cl, err := c.raw()
	if err == nil {
		err = cl.Create(ctx, vm, client.FieldOwner(FieldManager))
	}
	return wrap("create", "VirtualMachine", vm.Namespace, vm.Name, err)
}

// UpdateVirtualMachine replaces vm's spec and metadata; the server ignores
// its status. A stale resourceVersion gives a conflict (IsConflict).
func (c *Client) UpdateVirtualMachine(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	return c.write(ctx, "update", "VirtualMachine", vm)
}

// UpdateVirtualMachineStatus replaces vm's status through the status
// subresource; the server ignores everything else.
func (c *Client) UpdateVirtualMachineStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	return c.write(ctx, "update status", "VirtualMachine", vm)
}

// DeleteVirtualMachine deletes a VirtualMachine with background
// propagation: the cluster's garbage collector then removes what it owns (its
// VMI, DataVolumes made from its dataVolumeTemplates). Deleting one that does
// not exist succeeds.
func (c *Client) DeleteVirtualMachine(ctx context.Context, namespace, name string) error {
	vm := &kubevirtv1.VirtualMachine{}
	vm.Namespace, vm.Name = namespace, name
	return c.del(ctx, "VirtualMachine", vm, client.PropagationPolicy("Background"))
}

// GetVirtualMachineInstance reads the VirtualMachineInstance of a running
// VirtualMachine (same namespace and name).
func (c *Client) GetVirtualMachineInstance(ctx context.Context, namespace, name string) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.get(ctx, "VirtualMachineInstance", namespace, name, vmi); err != nil {
		return nil, err
	}
	return vmi, nil
}

// GetDataVolume reads a DataVolume.
func (c *Client) GetDataVolume(ctx context.Context, namespace, name string) (*cdiv1beta1.DataVolume, error) {
	dv := &cdiv1beta1.DataVolume{}
	if err := c.get(ctx, "DataVolume", namespace, name, dv); err != nil {
		return nil, err
	}
	return dv, nil
}

// CreateDataVolume creates dv and updates it with what the server stored.
func (c *Client) CreateDataVolume(ctx context.Context, dv *cdiv1beta1.DataVolume) error {
	return c.write(ctx, "create", "DataVolume", dv)
}

// UpdateDataVolume replaces dv's spec and metadata.
func (c *Client) UpdateDataVolume(ctx context.Context, dv *cdiv1beta1.DataVolume) error {
	return c.write(ctx, "update", "DataVolume", dv)
}

// UpdateDataVolumeStatus replaces dv's status through the status
// subresource.
func (c *Client) UpdateDataVolumeStatus(ctx context.Context, dv *cdiv1beta1.DataVolume) error {
	return c.write(ctx, "update status", "DataVolume", dv)
}

// DeleteDataVolume deletes a DataVolume; deleting one that does not exist
// succeeds.
func (c *Client) DeleteDataVolume(ctx context.Context, namespace, name string) error {
	dv := &cdiv1beta1.DataVolume{}
	dv.Namespace, dv.Name = namespace, name
	return c.del(ctx, "DataVolume", dv, client.PropagationPolicy("Background"))
}
