// Package modroot finds this repository's root from a test's working
// directory (its package folder), for the test tooling that needs files
// outside the package: the test cluster's binaries, the guest builder, the
// examples.
package modroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// modulePath is this repository's module, as go.mod declares it.
const modulePath = "github.com/vmmigration/terraform-provider-vmmigration"

// Find walks up from the working directory to the folder whose go.mod
// declares this module (the tools/ modules have go.mod files of their own).
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the root of " + modulePath + " (its go.mod) is not in the working directory or above")
		}
		dir = parent
	}
}
