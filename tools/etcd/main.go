// Command etcd is an unmodified etcd server, built from its Go module so that
// tests can run the storage a real kube-apiserver expects.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
