// Command kube-apiserver is an unmodified Kubernetes API server, built from the
// k8s.io/kubernetes module so that tests can run a real one without containers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
