package provider_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster"
)

// cluster is one real kube-apiserver + etcd shared by the package's tests;
// it starts on first use.
var cluster testcluster.Shared

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

// kubeconfig writes a kubeconfig for the shared cluster and returns a
// kubernetes block that uses it.
func kubeconfig(t *testing.T) (*testcluster.Cluster, string) {
	t.Helper()
	c := cluster.Get(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return c, `
  kubernetes {
    config_path    = "` + path + `"
    config_context = "` + testcluster.ContextName + `"
  }
`
}
