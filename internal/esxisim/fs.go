package esxisim

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The host namespace served by the simulator:
//
//	/vmfs/volumes/<ds>/...             -> Options.Root/<ds>/... (via os.Root: no escape, symlinks included)
//	/etc/vmware/hostd/vmInventory.xml  -> generated from the registry
//	/var/run/crx/infra/<vm>/<vm>.vmx   -> system VMs' .vmx, in memory
//	/, /etc, /etc/vmware, /etc/vmware/hostd, /vmfs -> directories
//	anything else                      -> No such file or directory
const (
	volumesDir   = "/vmfs/volumes"
	inventoryXML = "/etc/vmware/hostd/vmInventory.xml"
)

var virtualDirs = map[string][]string{
	"/":                 {"etc", "vmfs"},
	"/etc":              {"vmware"},
	"/etc/vmware":       {"hostd"},
	"/etc/vmware/hostd": {"vmInventory.xml"},
	"/vmfs":             {"volumes"},
}

// errBusy is the error of opening a file locked by a running VM.
var errBusy = syscall.EBUSY

// cleanHostPath makes p absolute (the shell's cwd is /) and lexically clean,
// so that `..` can never climb above / and out of /vmfs/volumes.
func cleanHostPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p)
}

// rootRel returns the path of host path p relative to Options.Root, if p is
// under /vmfs/volumes.
func rootRel(p string) (string, bool) {
	p = cleanHostPath(p)
	if p == volumesDir {
		return ".", true
	}
	if rest, ok := strings.CutPrefix(p, volumesDir+"/"); ok {
		return rest, true
	}
	return "", false
}

// errText renders err like BusyBox does (strerror text).
func errText(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, errBusy):
		return "Device or resource busy"
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, syscall.EISDIR):
		return "Is a directory"
	case errors.Is(err, syscall.ENOTDIR):
		return "Not a directory"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	case errors.As(err, &errno):
		s := errno.Error()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	// os.Root refuses escapes ("path escapes from parent"): on the host the
	// target does not exist inside /vmfs/volumes.
	return "No such file or directory"
}

// hostFile is an open host file: a real file or generated content.
type hostFile interface {
	io.Reader
	io.ReaderAt
	io.Closer
	Stat() (fs.FileInfo, error)
}

// memInfo describes generated files and virtual directories.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (m memInfo) Name() string { return m.name }
func (m memInfo) Size() int64  { return m.size }
func (m memInfo) Mode() fs.FileMode {
	if m.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (m memInfo) ModTime() time.Time { return time.Time{} }
func (m memInfo) IsDir() bool        { return m.dir }
func (m memInfo) Sys() any           { return nil }

type memFile struct {
	*bytes.Reader
	info memInfo
}

func (m memFile) Close() error               { return nil }
func (m memFile) Stat() (fs.FileInfo, error) { return m.info, nil }

// statPath stats a host path (no lock check: stat works on locked files).
func (s *Server) statPath(p string) (fs.FileInfo, error) {
	p = cleanHostPath(p)
	if p == inventoryXML {
		return memInfo{name: "vmInventory.xml", size: int64(len(s.InventoryXML()))}, nil
	}
	if _, ok := virtualDirs[p]; ok {
		return memInfo{name: path.Base(p), dir: true}, nil
	}
	rel, ok := rootRel(p)
	if !ok {
		if f, ok := s.openSys(p); ok {
			return f.Stat()
		}
		return nil, fs.ErrNotExist
	}
	return s.root.Stat(rel)
}

// openPath opens a host path for reading, refusing files locked by a
// powered-on VM with "Device or resource busy".
func (s *Server) openPath(p string) (hostFile, error) {
	p = cleanHostPath(p)
	if p == inventoryXML {
		b := []byte(s.InventoryXML())
		return memFile{Reader: bytes.NewReader(b), info: memInfo{name: "vmInventory.xml", size: int64(len(b))}}, nil
	}
	if _, ok := virtualDirs[p]; ok {
		return memFile{Reader: bytes.NewReader(nil), info: memInfo{name: path.Base(p), dir: true}}, nil
	}
	rel, ok := rootRel(p)
	if !ok {
		if f, ok := s.openSys(p); ok {
			return f, nil
		}
		return nil, fs.ErrNotExist
	}
	f, err := s.root.Open(rel)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.IsDir() && s.isLocked(fi) {
		f.Close()
		return nil, errBusy
	}
	return f, nil
}

// readDir lists a host directory, sorted by name.
func (s *Server) readDir(p string) ([]string, error) {
	p = cleanHostPath(p)
	if names, ok := virtualDirs[p]; ok {
		names = append([]string(nil), names...)
		if extra, ok := s.sysDir(p); ok {
			for _, n := range extra {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			sort.Strings(names)
		}
		return names, nil
	}
	rel, ok := rootRel(p)
	if !ok {
		if names, ok := s.sysDir(p); ok {
			return names, nil
		}
		return nil, fs.ErrNotExist
	}
	f, err := s.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// readHostFile reads a whole small host file (no lock check; used for .vmx,
// descriptors and .vmsd, which hostd reads while the VM runs).
func (s *Server) readHostFile(p string) ([]byte, error) {
	rel, ok := rootRel(p)
	if !ok {
		if b, ok := s.sysFile(cleanHostPath(p)); ok {
			return append([]byte(nil), b...), nil
		}
		return nil, fs.ErrNotExist
	}
	return s.root.ReadFile(rel)
}

// statRel stats a path relative to Root, following symlinks inside it.
func (s *Server) statRel(rel string) (os.FileInfo, error) {
	return s.root.Stat(rel)
}
