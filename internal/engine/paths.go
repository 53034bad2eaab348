package engine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/coord"
	"github.com/vmmigration/terraform-provider-vmmigration/internal/engine/record"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Local paths are never read from the cluster.
//
// The record lives in a ConfigMap that anyone allowed to edit ConfigMaps
// in the destination namespace can change. Were the provider to open,
// upload or delete the files the record names, such a person could make it
// read or delete any file the provider's user can reach. So every local
// path is derived from the configuration (work_dir, http_staging_dir) and
// the migration's identity (namespace, name, disk index): Spec.stagedPath
// and Spec.artifactPath while migrating, stagingFolders when forgetting.
// The record still carries stagedPath and artifactPath, for people
// reading it; a Run refuses a record whose paths are not the derived ones
// (checkRecordPaths), because that means the record was edited or
// work_dir changed since the copy started, and either needs a human.

// validPathIdentity checks that a namespace and a name are DNS labels, so
// that joining them under a root cannot leave it ("..", "/").
func validPathIdentity(namespace, name string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q is not a DNS label: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("name %q is not a DNS label: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// migrationFolder is <root>/<namespace>/<name>, or "" when root is not an
// absolute path or namespace/name are not DNS labels.
func migrationFolder(root, namespace, name string) string {
	if root == "" || !filepath.IsAbs(root) || validPathIdentity(namespace, name) != nil {
		return ""
	}
	return filepath.Join(filepath.Clean(root), namespace, name)
}

// checkRecordPaths compares the local paths a record names with those the
// spec derives. Empty fields are fine (they are filled in as the disks
// progress); any other difference is refused with a message that names the
// field, what it holds, and what it should hold.
func checkRecordPaths(spec Spec, rec *record.Record) error {
	var bad []string
	token := rec.StagingToken
	if token != "" && !validStagingToken(token) {
		bad = append(bad, fmt.Sprintf("stagingToken is %q, which is not 32 lower-case hex digits", token))
		token = ""
	}
	for i, d := range rec.Disks {
		if d.Index != i {
			bad = append(bad, fmt.Sprintf("disks[%d].index is %d, not %d", i, d.Index, i))
		}
		if d.StagedPath != "" && d.StagedPath != spec.stagedPath(i) {
			bad = append(bad, fmt.Sprintf("disks[%d].stagedPath is %q, but this migration stages disk %d at %q", i, d.StagedPath, i, spec.stagedPath(i)))
		}
		if d.ArtifactPath != "" && d.ArtifactPath != spec.artifactPath(i, token) && d.ArtifactPath != spec.imagePath(i, token) {
			bad = append(bad, fmt.Sprintf("disks[%d].artifactPath is %q, but this migration writes the image of disk %d at %q", i, d.ArtifactPath, i, spec.imagePath(i, token)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return needsHuman("RecordPathMismatch",
		fmt.Sprintf("the migration record %s/%s names local files other than the ones this migration uses (%s); local paths are derived only from work_dir, "+
			"transport.http_staging_dir and the destination namespace/name, never read from the cluster, so these files were neither read nor deleted",
			spec.Namespace, coord.RecordName(spec.Name), strings.Join(bad, "; ")),
		"if work_dir or transport.http_staging_dir changed since the copy started, restore the previous value; if the record was edited, "+
			"find out who changed it, then set those fields back to the paths shown (or remove them) in ConfigMap "+spec.Namespace+"/"+coord.RecordName(spec.Name)+
			", and run apply again", nil)
}

// stagingFolders are the folders Forget may remove: <root>/<namespace>/<name>
// under the given roots, and nothing else.
func stagingFolders(namespace, name string, roots ...string) []string {
	var out []string
	for _, root := range roots {
		if d := migrationFolder(root, namespace, name); d != "" && !containsString(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// removeFolder removes a migration folder and its namespace folder when
// that is left empty. A missing folder is fine.
func removeFolder(d string) (bool, error) {
	fi, err := os.Lstat(d)
	if err != nil {
		return false, nil
	}
	if fi.IsDir() {
		// The http transport's folder is not readable, even by its owner.
		_ = os.Chmod(d, 0o700)
	}
	if err := os.RemoveAll(d); err != nil {
		return false, err
	}
	_ = os.Remove(filepath.Dir(d))
	return true, nil
}

// localPathsUsable refuses to derive local paths from a destination
// namespace or name that is not a DNS label (the pre-flight checks stop
// such a migration before; this keeps the paths safe on their own).
func (r *run) localPathsUsable() error {
	if err := validPathIdentity(r.spec.Namespace, r.spec.Name); err != nil {
		return onField(FieldName, permanent("InvalidDestination", "cannot derive the staging folder: "+err.Error(),
			"use lower-case letters, digits and '-' in destination.namespace and destination.name", nil))
	}
	return nil
}

// validStagingToken reports whether t has the form newStagingToken makes,
// so that it is safe as one path component.
func validStagingToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	for _, c := range t {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newStagingToken returns 128 random bits in hex.
func newStagingToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// makeHTTPFolder creates the folders of the http transport's images:
// <StagingDir>/<namespace> (0711), <namespace>/<name> (0311: write and
// search but no read, so that nobody but root can list the token folders
// in it, not even an HTTP server running as the provider's user) and
// <name>/<token> (0700), token being the record's StagingToken. The images
// in it are 0600: the HTTP server must run as the provider's user to read
// them.
func (s Spec) makeHTTPFolder(token string) error {
	nsDir := filepath.Join(s.Transport.StagingDir, s.Namespace)
	nameDir := filepath.Join(nsDir, s.Name)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{nsDir, 0o711}, {nameDir, 0o311}, {s.httpFolder(token), 0o700}} {
		if d.path == nameDir && token == "" {
			// A migration started before tokens: its images live here.
			d.mode = 0o700
		}
		if err := os.Mkdir(d.path, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	return nil
}
