package esxi

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// Datastores and their free space: `vim-cmd hostsvc/datastore/listsummary`
// prints one vim.Datastore.Summary per datastore the host mounts (sample
// vcl-datastore-listsummary-comment.txt):
//
//	(vim.Datastore.Summary) [
//	   (vim.Datastore.Summary) {
//	      datastore = 'vim.Datastore:4bcf0efe-c426acc4-c7e1-001a644d1cc0',
//	      name = "local-datastore",
//	      url = "/vmfs/volumes/4bcf0efe-c426acc4-c7e1-001a644d1cc0",
//	      capacity = 31138512896,
//	      freeSpace = 26277314560,
//	      accessible = true,
//	      type = "VMFS",
//	   },
//	]
//
// The command takes no argument; nothing variable reaches the shell.

// OpDatastoreList is `vim-cmd hostsvc/datastore/listsummary`.
const OpDatastoreList OpKind = "datastore.listsummary"

// DatastoreListSummary is `vim-cmd hostsvc/datastore/listsummary`.
func DatastoreListSummary() Command { return Command{kind: OpDatastoreList} }

// Bounds of the listsummary parser: ESXi mounts at most 1024 volumes per
// host, and an answer larger than a few hundred bytes per datastore is not
// one.
const (
	MaxDatastores          = 1024
	maxDatastoreListOutput = MaxDatastores * 2048
)

// DatastoreSummary is one datastore as listsummary reports it.
type DatastoreSummary struct {
	Name string
	// URL is the datastore's mount, /vmfs/volumes/<uuid>.
	URL        string
	Capacity   int64
	FreeSpace  int64
	Accessible bool
	Type       string
}

// ParseDatastoreSummaries parses listsummary output. A truncated dump
// yields the datastores before the cut plus a Problem; a datastore without
// a name or free space is a Problem, not a datastore.
func ParseDatastoreSummaries(out string) ([]DatastoreSummary, []Problem) {
	const src = "datastore/listsummary"
	if len(out) > maxDatastoreListOutput {
		return nil, withSource([]Problem{{Message: fmt.Sprintf("%d bytes of output, more than %d datastores could print", len(out), MaxDatastores)}}, src)
	}
	d, probs := parseDump(out)
	var arr *dumpValue
	for _, r := range d.roots {
		if r.kind == dumpArray && r.typ == "vim.Datastore.Summary" {
			arr = r
			break
		}
	}
	if arr == nil {
		return nil, withSource(append(probs, Problem{Message: "no (vim.Datastore.Summary) array in output"}), src)
	}
	if len(arr.items) > MaxDatastores {
		return nil, withSource(append(probs, Problem{Message: fmt.Sprintf("%d datastores, more than ESXi's %d", len(arr.items), MaxDatastores)}), src)
	}
	var out2 []DatastoreSummary
	for i, it := range arr.items {
		if it.kind != dumpObject || it.typ != "vim.Datastore.Summary" {
			probs = append(probs, Problem{Line: it.line, Message: fmt.Sprintf("item %d is not a (vim.Datastore.Summary) object", i)})
			continue
		}
		before := len(probs)
		ds := DatastoreSummary{
			Name:       dumpStr(it, "name"),
			URL:        dumpStr(it, "url"),
			Capacity:   dumpCount(it, &probs, math.MaxInt64, "capacity"),
			FreeSpace:  dumpCount(it, &probs, math.MaxInt64, "freeSpace"),
			Accessible: dumpStr(it, "accessible") == "true",
			Type:       dumpStr(it, "type"),
		}
		if _, ok := it.field("freeSpace").str(); !ok {
			probs = append(probs, Problem{Line: it.line, Message: fmt.Sprintf("datastore %q has no freeSpace", ds.Name)})
		}
		if ds.Name == "" {
			probs = append(probs, Problem{Line: it.line, Message: fmt.Sprintf("item %d has no name", i)})
		}
		if len(probs) == before {
			out2 = append(out2, ds)
		}
	}
	return out2, withSource(probs, src)
}

// Datastores lists the host's datastores with their free space.
func (c *Client) Datastores(ctx context.Context) ([]DatastoreSummary, error) {
	const op = "datastore/listsummary"
	rs, _, err := c.runMany(ctx, op, []string{"ds"}, []Command{DatastoreListSummary()})
	if err != nil {
		return nil, err
	}
	r := rs["ds"]
	if e := c.vimErr(op, 0, r); e != nil {
		return nil, e
	}
	ds, probs := ParseDatastoreSummaries(r.Output)
	if len(probs) > 0 {
		return nil, &Error{Class: Permanent, Kind: ErrUnexpectedOutput, Host: c.cfg.Name, Op: op,
			Msg: fmt.Sprintf("cannot read the datastores' free space (%s)", problemsText(probs))}
	}
	return ds, nil
}

// DatastoreOf returns the datastore that holds the host path p
// (/vmfs/volumes/<name or uuid>/...), or nil.
func DatastoreOf(p string, ds []DatastoreSummary) *DatastoreSummary {
	rest, ok := strings.CutPrefix(p, VolumesRoot+"/")
	if !ok {
		return nil
	}
	vol, _, _ := strings.Cut(rest, "/")
	if vol == "" {
		return nil
	}
	for i := range ds {
		if ds[i].Name == vol || (ds[i].URL != "" && ds[i].URL == VolumesRoot+"/"+vol) {
			return &ds[i]
		}
	}
	return nil
}
