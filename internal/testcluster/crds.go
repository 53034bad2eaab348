package testcluster

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

//go:generate go run ./crdgen/cmd/crdgen -out crds

// crdFiles are the generated CRD manifests (see crdgen); crdgen's tests fail
// when they are stale.
//
//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the custom resource definitions the cluster installs: KubeVirt
// VirtualMachine and VirtualMachineInstance, CDI DataVolume and
// StorageProfile.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(crdFiles, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		b, err := crdFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("testcluster: %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// installCRDs creates the CRDs and waits until each is Established, has a
// structural schema, and is listed by discovery (so that REST mappers find
// it on first use).
func (c *Cluster) installCRDs(ctx context.Context) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := c.client.Create(ctx, crd); err != nil {
			return fmt.Errorf("testcluster: creating CRD %s: %w", crd.Name, err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.config)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	for _, want := range crds {
		if err := pollUntil(ctx, func() (bool, error) {
			return crdReady(ctx, c.client, dc, want)
		}); err != nil {
			return fmt.Errorf("testcluster: CRD %s not ready: %w", want.Name, err)
		}
	}
	return nil
}

func crdReady(ctx context.Context, cl client.Client, dc discovery.DiscoveryInterface, want *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(want), crd); err != nil {
		return false, nil
	}
	established := false
	for _, cond := range crd.Status.Conditions {
		switch {
		case cond.Type == apiextensionsv1.NonStructuralSchema && cond.Status == apiextensionsv1.ConditionTrue:
			return false, fmt.Errorf("schema is not structural: %s", cond.Message)
		case cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse:
			return false, fmt.Errorf("names not accepted: %s", cond.Message)
		case cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue:
			established = true
		}
	}
	if !established {
		return false, nil
	}
	gv := crd.Spec.Group + "/" + crd.Spec.Versions[0].Name
	list, err := dc.ServerResourcesForGroupVersion(gv)
	if err != nil {
		return false, nil
	}
	for _, r := range list.APIResources {
		if r.Name == crd.Spec.Names.Plural || strings.HasPrefix(r.Name, crd.Spec.Names.Plural+"/") {
			return true, nil
		}
	}
	return false, nil
}

// pollUntil calls cond every 20ms until it reports done or an error, or ctx
// ends.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
