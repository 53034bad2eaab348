package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/modroot"
)

// Versions of the binaries the test cluster runs, as built by
// tools/build-testcluster.sh (keep in step with it).
const (
	KubeAPIServerVersion = "v1.37.2"
	EtcdVersion          = "v3.6.16"
	// CDIUploadServerVersion is the CDI release whose cmd/cdi-uploadserver
	// the simulated upload proxy hands uploads to.
	CDIUploadServerVersion = "v1.65.0"
	// KubeVirtAdmissionVersion is the KubeVirt release whose admission
	// webhooks (pkg/virt-api/webhooks) tools/kubevirt-admission serves,
	// and after "+" the revision of the server around them (2: one server
	// for many sims, registered over /sims/{id}).
	KubeVirtAdmissionVersion = "v1.7.0+2"
)

// EnvTestBin names the environment variable that, when set, is the folder
// holding the kube-apiserver and etcd binaries. It defaults to .testbin in
// the repository root.
const EnvTestBin = "VMMIGRATION_TESTBIN"

// buildHint says how to get the binaries.
const buildHint = `build them with "make testbin" (which runs tools/build-testcluster.sh; the first build takes several minutes), ` +
	`or set ` + EnvTestBin + ` to a folder holding kube-apiserver ` + KubeAPIServerVersion + ` and etcd ` + EtcdVersion

// binaries are the absolute paths of the programs a cluster runs.
type binaries struct {
	etcd, apiServer string
	// With Options.Controllers only.
	controllerManager, scheduler string
}

// findBinaries locates etcd and kube-apiserver (and, with controllers,
// kube-controller-manager and kube-scheduler) in dir, or, when dir is empty,
// in $VMMIGRATION_TESTBIN or <repository root>/.testbin. A binary whose
// "<name>.version" stamp (written by the build script) names another
// version is refused; a binary without a stamp is trusted.
func findBinaries(dir string, controllers bool) (binaries, error) {
	where := "Options.BinDir"
	if dir == "" {
		where = "$" + EnvTestBin
		dir = os.Getenv(EnvTestBin)
	}
	if dir == "" {
		root, err := modroot.Find()
		if err != nil {
			return binaries{}, fmt.Errorf("testcluster: %s is not set and the repository root cannot be found (%v); %s", EnvTestBin, err, buildHint)
		}
		where = "the repository's .testbin folder"
		dir = filepath.Join(root, ".testbin")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return binaries{}, err
	}
	var problems []string
	check := func(name, version string) string {
		p := filepath.Join(abs, name)
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s is missing (no %s)", name, p))
			return ""
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			return ""
		case st.IsDir() || st.Mode()&0o111 == 0:
			problems = append(problems, fmt.Sprintf("%s is not an executable file", p))
			return ""
		}
		if b, err := os.ReadFile(p + ".version"); err == nil {
			if got := strings.TrimSpace(string(b)); got != version {
				problems = append(problems, fmt.Sprintf("%s is %s, want %s (stamp %s.version)", p, got, version, p))
				return ""
			}
		}
		return p
	}
	b := binaries{
		etcd:      check("etcd", EtcdVersion),
		apiServer: check("kube-apiserver", KubeAPIServerVersion),
	}
	if controllers {
		// Built from the same Kubernetes release as the API server.
		b.controllerManager = check("kube-controller-manager", KubeAPIServerVersion)
		b.scheduler = check("kube-scheduler", KubeAPIServerVersion)
	}
	if len(problems) > 0 {
		return binaries{}, fmt.Errorf("testcluster: cannot run a test cluster from %s (%s): %s; %s",
			abs, where, strings.Join(problems, "; "), buildHint)
	}
	return b, nil
}

// ToolBinary returns the path of the program name, at version, among the
// test binaries (in $VMMIGRATION_TESTBIN or <repository root>/.testbin),
// refusing one whose stamp names another version.
func ToolBinary(name, version string) (string, error) {
	dir := os.Getenv(EnvTestBin)
	if dir == "" {
		root, err := modroot.Find()
		if err != nil {
			return "", fmt.Errorf("%s is not set and the repository root cannot be found (%v)", EnvTestBin, err)
		}
		dir = filepath.Join(root, ".testbin")
	}
	p := filepath.Join(dir, name)
	hint := fmt.Sprintf(`build it with "make testbin" (tools/build-testcluster.sh builds %s %s once)`, name, version)
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s %s is missing (%v); %s", name, version, err, hint)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return "", fmt.Errorf("%s is not an executable file; %s", p, hint)
	}
	if b, err := os.ReadFile(p + ".version"); err == nil {
		if got := strings.TrimSpace(string(b)); got != version {
			return "", fmt.Errorf("%s is %s, want %s (stamp %s.version); %s", p, got, version, p, hint)
		}
	}
	return filepath.Abs(p)
}

var worker struct {
	once sync.Once
	path string
	err  error
}

// WorkerBinary builds this repository's cmd/vmmigration-worker, the
// program of cluster execution's copy Jobs, once per test binary and
// returns its path, for a simulated node (package podrun) to run as the
// worker image. The folder it is built in is shared by the binary's tests
// and left for the machine's temporary files to be cleaned.
func WorkerBinary() (string, error) {
	worker.once.Do(func() {
		dir, err := os.MkdirTemp("", "vmmigration-worker-")
		if err != nil {
			worker.err = err
			return
		}
		p := filepath.Join(dir, "vmmigration-worker")
		if out, err := exec.Command("go", "build", "-o", p, "github.com/vmmigration/terraform-provider-vmmigration/cmd/vmmigration-worker").CombinedOutput(); err != nil {
			worker.err = fmt.Errorf("testcluster: go build the worker: %v: %s", err, out)
			return
		}
		worker.path = p
	})
	return worker.path, worker.err
}
