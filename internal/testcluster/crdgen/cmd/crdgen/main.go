// Command crdgen writes the test cluster's CRD manifests, generated from the
// KubeVirt and CDI Go API types, into a folder (by default the current one).
// It removes generated files that are no longer produced.
//
//	go run ./crdgen/cmd/crdgen -out crds
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/testcluster/crdgen"
)

func main() {
	out := flag.String("out", ".", "folder to write the YAML files to")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	files, err := crdgen.Render(crdgen.Definitions())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(out, "*.yaml"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, keep := files[filepath.Base(p)]; keep {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(b, []byte(crdgen.Header)) {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		if strings.ContainsRune(name, filepath.Separator) {
			return fmt.Errorf("bad file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
