package provider_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/acctest"
)

// cluster is one real kube-apiserver + etcd shared by the package's tests;
// it starts on first use.
var cluster acctest.SharedCluster

// jobsCluster is a second cluster, with the real controllers and
// scheduler that cluster execution's Jobs need, for the tests of that
// execution only; it starts on first use.
var jobsCluster acctest.SharedCluster

func TestMain(m *testing.M) {
	jobsCluster.RunControllers()
	code := cluster.Main(m)
	if err := jobsCluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the cluster of the Jobs' tests:", err)
		code = 1
	}
	os.Exit(code)
}

// kubeconfig returns the shared cluster and a kubernetes block of the
// provider configuration that reaches it.
func kubeconfig(t *testing.T) (*acctest.Cluster, string) {
	t.Helper()
	c := cluster.Get(t)
	return c, c.KubernetesBlock(t)
}
