// Command kube-controller-manager is an unmodified Kubernetes controller
// manager, built from the k8s.io/kubernetes module so that tests can run the
// real Job controller and garbage collector without containers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
