package esxisim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// SystemVMDir is where ESXi 8 keeps the .vmx of the vSphere Cluster
// Services (vCLS) VMs vCenter runs on a cluster's hosts: in host memory,
// not on a datastore. getallvms prints such a VM with the empty datastore
// "[]" and this absolute path.
const SystemVMDir = "/var/run/crx/infra"

// addSystemVM keeps a system VM's .vmx in host memory under SystemVMDir
// and registers it. The .vmx names a disk next to it that does not exist
// as a file here: a client must not read a system VM's disks.
func (s *Server) addSystemVM(spec VMSpec) (int, *VMFiles, error) {
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00\n") || spec.Name == "." || spec.Name == ".." {
		return 0, nil, fmt.Errorf("esxisim: invalid system VM name %q", spec.Name)
	}
	if spec.GuestOS == "" {
		spec.GuestOS = "other5xlinux-64"
	}
	if spec.HardwareVersion == 0 {
		spec.HardwareVersion = 19
	}
	if spec.CPUs == 0 {
		spec.CPUs = 1
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 128
	}
	var b strings.Builder
	set := func(k, v string) { fmt.Fprintf(&b, "%s = \"%s\"\n", k, vmxEscape(v)) }
	set(".encoding", "UTF-8")
	set("config.version", "8")
	set("virtualHW.version", fmt.Sprint(spec.HardwareVersion))
	set("displayName", spec.Name)
	set("guestOS", spec.GuestOS)
	set("numvcpus", fmt.Sprint(spec.CPUs))
	set("memSize", fmt.Sprint(spec.MemoryMiB))
	set("vmx.vmxType", "crx")
	if spec.Annotation != "" {
		set("annotation", spec.Annotation)
	}
	set("scsi0.present", "TRUE")
	set("scsi0.virtualDev", "pvscsi")
	set("scsi0:0.present", "TRUE")
	set("scsi0:0.deviceType", "scsi-hardDisk")
	set("scsi0:0.fileName", spec.Name+".vmdk")
	vmxPath := SystemVMDir + "/" + spec.Name + "/" + spec.Name + ".vmx"
	s.mu.Lock()
	if s.sysFiles == nil {
		s.sysFiles = map[string][]byte{}
	}
	s.sysFiles[vmxPath] = []byte(b.String())
	s.mu.Unlock()
	id := s.Register(vmxPath)
	if err := s.SetPowerState(id, spec.Power); err != nil {
		return 0, nil, err
	}
	if err := s.SetGuest(id, spec.Tools, spec.IPs...); err != nil {
		return 0, nil, err
	}
	return id, &VMFiles{VMXPath: vmxPath}, nil
}

// addInvalidVM registers a VM whose files do not exist, like a VM whose
// folder was deleted behind hostd's back: vmInventory.xml lists it,
// getallvms prints "Skipping invalid VM 'N'" on stderr, and per-VM vim-cmd
// commands answer vim.fault.NotFound.
func (s *Server) addInvalidVM(spec VMSpec) (int, *VMFiles, error) {
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/\x00\n") || spec.Name == "." || spec.Name == ".." {
		return 0, nil, fmt.Errorf("esxisim: invalid VM name %q", spec.Name)
	}
	ds := spec.Datastore
	if ds == "" {
		ds = "datastore1"
	}
	vmxPath := volumesDir + "/" + ds + "/" + spec.Name + "/" + spec.Name + ".vmx"
	if _, err := s.readHostFile(vmxPath); !errors.Is(err, fs.ErrNotExist) {
		return 0, nil, fmt.Errorf("esxisim: %s exists: an invalid VM has no .vmx", vmxPath)
	}
	return s.Register(vmxPath), &VMFiles{VMXPath: vmxPath}, nil
}

// sysFile returns the content of an in-memory host file.
func (s *Server) sysFile(p string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.sysFiles[p]
	return b, ok
}

// sysDir lists the in-memory directory p (its entries' names, sorted).
func (s *Server) sysDir(p string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := strings.TrimSuffix(p, "/") + "/"
	seen := map[string]bool{}
	for f := range s.sysFiles {
		if rest, ok := strings.CutPrefix(f, prefix); ok {
			seen[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	if len(seen) == 0 {
		return nil, false
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, true
}

// openSys opens an in-memory file or directory.
func (s *Server) openSys(p string) (hostFile, bool) {
	if b, ok := s.sysFile(p); ok {
		return memFile{Reader: bytes.NewReader(b), info: memInfo{name: path.Base(p), size: int64(len(b))}}, true
	}
	if _, ok := s.sysDir(p); ok {
		return memFile{Reader: bytes.NewReader(nil), info: memInfo{name: path.Base(p), dir: true}}, true
	}
	return nil, false
}
