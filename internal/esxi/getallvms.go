package esxi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// GetAllVMsEntry is one row of `vim-cmd vmsvc/getallvms`.
//
// Only VMID is reliable: the other columns are padded with spaces whose widths
// vary by host, and names, paths and annotations can contain spaces,
// brackets and colons. The parser fills Name, Datastore, File, GuestOS and
// Version only when the row splits into columns in exactly one way;
// otherwise Ambiguous is true and they are empty. The .vmx and
// vmInventory.xml are the authoritative sources for these values.
type GetAllVMsEntry struct {
	VMID      int
	Name      string
	Datastore string // text between the brackets; "" for system VMs ("[]")
	File      string // path after "[datastore] "; absolute for system VMs
	GuestOS   string
	Version   string // "vmx-20"
	// Annotation is the first line of the annotation plus any continuation
	// lines the host printed as bare lines, joined with "\n".
	Annotation string
	Ambiguous  bool
	Line       int
}

// GetAllVMsResult is the parsed output of `vim-cmd vmsvc/getallvms`.
type GetAllVMsResult struct {
	VMs []GetAllVMsEntry
	// Skipped lists the vmids hostd reported as "Skipping invalid VM 'N'"
	// (registered but unreadable: .vmx deleted or datastore missing). hostd
	// prints these lines on stderr; the client reads them merged with
	// stdout.
	Skipped []int
}

var (
	gavRowStartRE = regexp.MustCompile(`^(\d+)\s+(.*)$`)
	gavHeaderRE   = regexp.MustCompile(`^Vmid\s+Name\s+File\s+Guest OS\s+Version(\s+Annotation)?\s*$`)
	gavSkipRE     = regexp.MustCompile(`^Skipping invalid VM '(\d+)'\s*$`)
	gavTailRE     = regexp.MustCompile(`^\s+(\S+)\s+(vmx-\d+)(?:\s+(.*))?$`)
)

// maxGetAllVMsLine bounds the rows the column splitter examines (its cost
// grows with the square of the line length); real rows are far shorter.
const maxGetAllVMsLine = 16 << 10

type gavSplit struct {
	name, ds, file, guest, version, annotation string
}

// splitGetAllVMsRow enumerates every way rest (the row after the vmid) can be
// read as `<name> [<ds>] <file>.vmx <guest> vmx-N [annotation]`.
func splitGetAllVMsRow(rest string) []gavSplit {
	var out []gavSplit
	for p := 1; p < len(rest); p++ {
		if rest[p] != '[' || (rest[p-1] != ' ' && rest[p-1] != '\t') {
			continue
		}
		name := strings.TrimSpace(rest[:p])
		if name == "" {
			continue
		}
		q := strings.IndexAny(rest[p+1:], "[]")
		if q < 0 || rest[p+1+q] != ']' {
			continue
		}
		q += p + 1
		if q+1 >= len(rest) || rest[q+1] != ' ' {
			continue
		}
		ds := rest[p+1 : q]
		after := rest[q+2:]
		for off := 0; ; {
			e := strings.Index(after[off:], ".vmx")
			if e < 0 {
				break
			}
			e += off
			file := after[:e+4]
			if m := gavTailRE.FindStringSubmatch(after[e+4:]); m != nil && strings.TrimSpace(file) != ".vmx" {
				out = append(out, gavSplit{name: name, ds: ds, file: file, guest: m[1], version: m[2], annotation: strings.TrimSpace(m[3])})
			}
			off = e + 4
		}
	}
	return out
}

// ParseGetAllVMs parses `vim-cmd vmsvc/getallvms` output. Rows that are not
// understood are reported as Problems, never guessed at.
func ParseGetAllVMs(out string) (GetAllVMsResult, []Problem) {
	var (
		res   GetAllVMsResult
		probs []Problem
		seen  = map[int]bool{}
		cur   = -1 // index of the row that continuation lines belong to
	)
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	for i, raw := range lines {
		ln := i + 1
		line := strings.TrimRight(raw, " \t\r")
		if m := gavSkipRE.FindStringSubmatch(line); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
				res.Skipped = append(res.Skipped, n)
			} else {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("skipped vmid %q is not a positive integer", truncate(m[1], 40))})
			}
			continue
		}
		if gavHeaderRE.MatchString(line) {
			cur = -1
			continue
		}
		if m := gavRowStartRE.FindStringSubmatch(line); m != nil && len(line) <= maxGetAllVMsLine {
			splits := splitGetAllVMsRow(m[2])
			if len(splits) > 0 {
				vmid, err := strconv.Atoi(m[1])
				if err != nil || vmid <= 0 {
					probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("vmid %q is not a positive integer", m[1])})
					cur = -1
					continue
				}
				if seen[vmid] {
					probs = append(probs, Problem{Line: ln, VMID: vmid, Message: fmt.Sprintf("vmid %d listed twice; keeping the first row", vmid)})
					cur = -1
					continue
				}
				seen[vmid] = true
				e := GetAllVMsEntry{VMID: vmid, Line: ln}
				if len(splits) == 1 {
					s := splits[0]
					e.Name, e.Datastore, e.File, e.GuestOS, e.Version, e.Annotation = s.name, s.ds, s.file, s.guest, s.version, s.annotation
				} else {
					e.Ambiguous = true
					probs = append(probs, Problem{Line: ln, VMID: vmid, Message: fmt.Sprintf("row for vmid %d splits into columns in %d ways; only the vmid is used", vmid, len(splits))})
				}
				res.VMs = append(res.VMs, e)
				cur = len(res.VMs) - 1
				continue
			}
		}
		if cur >= 0 {
			// A bare line after a row continues that row's annotation
			// (getallvms prints multi-line annotations this way).
			e := &res.VMs[cur]
			e.Annotation += "\n" + line
			if gavRowStartRE.MatchString(line) {
				probs = append(probs, Problem{Line: ln, VMID: e.VMID, Message: fmt.Sprintf("line starts with a number but is not a complete VM row; read as part of vmid %d's annotation", e.VMID)})
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("unrecognised line %q", truncate(line, 120))})
	}
	for i := range res.VMs {
		res.VMs[i].Annotation = strings.TrimRight(res.VMs[i].Annotation, "\n")
	}
	return res, withSource(probs, "getallvms")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
