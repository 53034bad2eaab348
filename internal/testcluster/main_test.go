package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// cluster is shared by the tests that only read or add objects.
var cluster Shared

// envChild makes the test binary act as a child that starts a cluster,
// prints a childReport line and waits to be killed (see lifecycle_test.go).
const envChild = "VMMIGRATION_TESTCLUSTER_CHILD"

// childReport is what the child prints once its cluster is ready.
type childReport struct {
	EtcdPID, APIServerPID int
	Ports                 []int
	Dir                   string
}

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		runChild()
		return
	}
	os.Exit(cluster.Main(m))
}

func runChild() {
	c, err := Start(context.Background(), Options{NoCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	etcdClient, etcdPeer := c.EtcdPorts()
	b, _ := json.Marshal(childReport{
		EtcdPID:      c.etcd.pid,
		APIServerPID: c.api.pid,
		Ports:        []int{etcdClient, etcdPeer, c.APIServerPort()},
		Dir:          c.Dir(),
	})
	fmt.Println(string(b))
	select {}
}
