// Package homedir expands a leading "~" in paths users write in Terraform
// configuration, as a shell would: "~" and "~/..." only, never "~user".
package homedir

import (
	"os"
	"path/filepath"
	"strings"
)

// Expand returns p with a leading "~" or "~/" replaced by the user's home
// directory; any other path is returned as it is.
func Expand(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}
