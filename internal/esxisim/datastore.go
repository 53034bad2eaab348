package esxisim

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// Datastores as `vim-cmd hostsvc/datastore/listsummary` prints them (layout
// of vcl-datastore-listsummary-comment.txt): one vim.Datastore.Summary per
// folder under Root, with its capacity and its free space. The free space
// is derived: the datastore's capacity (DefaultDatastoreCapacity unless
// SetDatastoreCapacity set another) less the bytes its files hold on this
// machine's disk, so a thin disk counts what it stores and a delta that
// grows takes free space.

// DefaultDatastoreCapacity is a datastore's capacity unless set.
const DefaultDatastoreCapacity = 1 << 40

var datastoreCapacities sync.Map // *Server -> map[string]int64 (copy on write)

var capacityMu sync.Mutex

// SetDatastoreCapacity sets the capacity of the named datastore; 0
// restores DefaultDatastoreCapacity.
func (s *Server) SetDatastoreCapacity(name string, bytes int64) {
	capacityMu.Lock()
	defer capacityMu.Unlock()
	m := map[string]int64{}
	if v, ok := datastoreCapacities.Load(s); ok {
		for k, c := range v.(map[string]int64) {
			m[k] = c
		}
	}
	if bytes <= 0 {
		delete(m, name)
	} else {
		m[name] = bytes
	}
	datastoreCapacities.Store(s, m)
}

func (s *Server) datastoreCapacity(name string) int64 {
	if v, ok := datastoreCapacities.Load(s); ok {
		if c, ok := v.(map[string]int64)[name]; ok {
			return c
		}
	}
	return DefaultDatastoreCapacity
}

// DatastoreFree returns the free bytes listsummary reports for the named
// datastore.
func (s *Server) DatastoreFree(name string) (int64, error) {
	used, err := usedBytes(filepath.Join(s.opts.Root, name))
	if err != nil {
		return 0, err
	}
	return max(s.datastoreCapacity(name)-used, 0), nil
}

// usedBytes sums the bytes the files under dir hold on disk (allocated
// blocks, so sparse files count what they store).
func usedBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// datastoreUUID is a stable VMFS-like uuid for a datastore's url.
func datastoreUUID(name string) string {
	h := sha256.Sum256([]byte("datastore " + name))
	return fmt.Sprintf("%x-%x-%x-%x", h[0:4], h[4:8], h[8:10], h[10:16])
}

// datastoreListSummary prints `vim-cmd hostsvc/datastore/listsummary`.
func (s *Server) datastoreListSummary(stdout, stderr io.Writer) int {
	ents, err := os.ReadDir(s.opts.Root)
	if err != nil {
		fmt.Fprintln(stderr, "Failed to list datastores:", err)
		return 1
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	arr := darr{typ: "vim.Datastore.Summary"}
	for _, name := range names {
		free, err := s.DatastoreFree(name)
		if err != nil {
			fmt.Fprintln(stderr, "Failed to read datastore", name+":", err)
			return 1
		}
		uuid := datastoreUUID(name)
		arr.items = append(arr.items, dobj{typ: "vim.Datastore.Summary", fields: []dfield{
			{"datastore", draw("'vim.Datastore:" + uuid + "'")},
			{"name", dstr(name)},
			{"url", dstr("/vmfs/volumes/" + uuid)},
			{"capacity", dnum(s.datastoreCapacity(name))},
			{"freeSpace", dnum(free)},
			{"uncommitted", dnum(0)},
			{"accessible", dbool(true)},
			{"multipleHostAccess", dunset},
			{"type", dstr("VMFS")},
			{"maintenanceMode", dstr("normal")},
		}})
	}
	fmt.Fprintln(stdout, s.render(arr))
	return 0
}
