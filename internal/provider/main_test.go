package provider_test

import (
	"os"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
)

// cluster is one real kube-apiserver + etcd shared by the package's tests;
// it starts on first use.
var cluster acctest.SharedCluster

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

// kubeconfig returns the shared cluster and a kubernetes block of the
// provider configuration that reaches it.
func kubeconfig(t *testing.T) (*acctest.Cluster, string) {
	t.Helper()
	c := cluster.Get(t)
	return c, c.KubernetesBlock(t)
}
