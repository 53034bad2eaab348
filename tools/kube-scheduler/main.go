// Command kube-scheduler is an unmodified Kubernetes scheduler, built from the
// k8s.io/kubernetes module so that tests can have real scheduling decisions
// bind pods to a simulated node without containers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
