package esxi

import (
	"fmt"
	"path"
	"strings"
)

// Quote returns s as one single-quoted POSIX shell word. An embedded single
// quote closes the quoted string, adds an escaped quote and reopens it:
//
//	it's  ->  'it'\''s'
//
// Quote is the only function in this package that turns data into shell
// text; every path, name and label that ends up in a command line passes
// through it.
//
// A NUL byte cannot be passed through a command line at all; callers validate
// their input with [ValidatePath] (or reject NUL themselves) first.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// maxPathLen bounds a path we are willing to put on a command line. ESXi's
// own limit (PATH_MAX) is 4096.
const maxPathLen = 4096

// ValidatePath checks that p is an absolute host path that can be quoted
// safely and names something below /vmfs/volumes or one of the few fixed
// host files this package reads. It rejects NUL bytes, newlines and carriage
// returns (which no real datastore path contains and which would corrupt the
// line-oriented output framing), relative paths and any path whose cleaned
// form differs in a way that would let ".." escape /vmfs/volumes.
func ValidatePath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if len(p) > maxPathLen {
		return fmt.Errorf("path of %d bytes is longer than %d", len(p), maxPathLen)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return fmt.Errorf("path %q contains a NUL byte or a line break", p)
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if p == InventoryXMLPath {
		return nil
	}
	if _, _, err := splitVolumePath(p); err != nil {
		return err
	}
	return nil
}

// splitVolumePath checks that p cleans to /vmfs/volumes/<datastore>/<rest>
// and returns the datastore component and the rest. Any ".." that would
// leave /vmfs/volumes/<datastore> is an error.
func splitVolumePath(p string) (datastore, rest string, err error) {
	if strings.ContainsAny(p, "\x00\n\r") {
		return "", "", fmt.Errorf("path %q contains a NUL byte or a line break", p)
	}
	const root = VolumesRoot + "/"
	if !strings.HasPrefix(p, root) {
		return "", "", fmt.Errorf("path %q is not below %s", p, VolumesRoot)
	}
	// Walk components so that ".." is checked against the datastore root
	// it would cross, not only against /vmfs/volumes after cleaning.
	var parts []string
	for _, c := range strings.Split(p[len(root):], "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(parts) <= 1 {
				return "", "", fmt.Errorf("path %q uses \"..\" to leave its datastore: refusing it", p)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	if len(parts) < 2 {
		return "", "", fmt.Errorf("path %q does not name a file inside a datastore (/vmfs/volumes/<datastore>/...)", p)
	}
	return parts[0], path.Join(parts[1:]...), nil
}

// VolumesRoot is where ESXi mounts datastores.
const VolumesRoot = "/vmfs/volumes"

// InventoryXMLPath is hostd's list of registered VMs.
const InventoryXMLPath = "/etc/vmware/hostd/vmInventory.xml"

// ResolveDiskPath resolves a .vmx disk fileName against the folder of the
// .vmx that names it. The name may be relative to that folder, name a
// subfolder, or be absolute on any datastore. The result is a clean absolute
// path below /vmfs/volumes/<datastore>/; a name that would use ".." to leave
// its datastore, or that contains NUL or a line break, is an error.
func ResolveDiskPath(vmxPath, fileName string) (string, error) {
	if fileName == "" {
		return "", fmt.Errorf("empty disk fileName in %s", vmxPath)
	}
	if strings.ContainsAny(fileName, "\x00\n\r") {
		return "", fmt.Errorf("disk fileName %q in %s contains a NUL byte or a line break", fileName, vmxPath)
	}
	var full string
	if strings.HasPrefix(fileName, "/") {
		full = fileName
	} else {
		if _, _, err := splitVolumePath(vmxPath); err != nil {
			return "", fmt.Errorf("resolving %q: .vmx path: %w", fileName, err)
		}
		full = path.Dir(vmxPath) + "/" + fileName
	}
	ds, rest, err := splitVolumePath(full)
	if err != nil {
		return "", fmt.Errorf("disk fileName %q in %s: %w", fileName, vmxPath, err)
	}
	return VolumesRoot + "/" + ds + "/" + rest, nil
}
