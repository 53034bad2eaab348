package kubesim

import (
	"crypto/x509"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonContainerCreating is the Running condition's reason while the
// importer pod cannot start, e.g. because the ConfigMap its
// http.certConfigMap names does not exist.
const ReasonContainerCreating = "ContainerCreating"

// importerCAMounted reports whether dv's importer pod can start: the
// ConfigMap its http.certConfigMap names must exist, since the pod mounts
// it. Until it does the pod waits in ContainerCreating and the DataVolume
// stays ImportScheduled with Running=False (CDI v1.65.0
// pkg/controller/import-controller.go getCertConfigMap: "pod will not
// start until it does"; pkg/controller/util.go
// setAnnotationsFromPodWithPrefix copies a waiting container's reason).
func (s *Sim) importerCAMounted(dv *cdiv1.DataVolume) bool {
	name := dv.Spec.Source.HTTP.CertConfigMap
	if name == "" {
		return true
	}
	err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: name}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		setDVCondition(&dv.Status, cdiv1.DataVolumeRunning, corev1.ConditionFalse,
			fmt.Sprintf("MountVolume.SetUp failed for volume \"cdi-cert-vol\" : configmap %q not found", name), ReasonContainerCreating)
	}
	return err == nil
}

// importerRoots are the CAs CDI's importer verifies an https source with:
// the system's, plus every certificate in every key of the ConfigMap that
// http.certConfigMap names, read when the importer (re)starts (CDI v1.65.0
// pkg/importer/http-datasource.go createCertPool, createHTTPClient). A
// source whose certificate they do not verify fails the import, and the
// importer restarts.
func (s *Sim) importerRoots(dv *cdiv1.DataVolume) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	name := dv.Spec.Source.HTTP.CertConfigMap
	if name == "" {
		return pool
	}
	cm := &corev1.ConfigMap{}
	if err := s.cl.Get(s.ctx, client.ObjectKey{Namespace: dv.Namespace, Name: name}, cm); err != nil {
		return pool
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pool.AppendCertsFromPEM([]byte(cm.Data[k]))
	}
	return pool
}
