package esxi

import (
	"fmt"
	"regexp"
	"strings"
)

// vim-cmd prints managed objects as indented dumps:
//
//	(vim.vm.GuestInfo) {
//	   toolsStatus = "toolsOk",
//	   net = (vim.vm.GuestInfo.NicInfo) [
//	      (vim.vm.GuestInfo.NicInfo) {
//	         ipAddress = (string) [
//	            "192.168.1.37"
//	         ],
//	      }
//	   ],
//	   screen = <unset>,
//	}
//
// The parser below is line oriented and does not depend on indentation width
// (2 or 3 spaces, tabs) or on trailing commas, which newer builds drop. A
// string value is everything between the first and the last double quote of
// its line, because vim-cmd does not escape embedded quotes
// (msg = "Unable to find a VM corresponding to "16"").

type dumpKind int

const (
	dumpScalar dumpKind = iota // 123, true, 4.5
	dumpString                 // "text"
	dumpRef                    // 'vim.VirtualMachine:496'
	dumpUnset                  // <unset>
	dumpNull                   // (type) null
	dumpObject                 // (type) { ... }
	dumpArray                  // (type) [ ... ]
)

type dumpValue struct {
	kind   dumpKind
	typ    string // for object, array, null: the name inside the parentheses
	text   string // for scalar, string, ref
	fields []dumpField
	items  []*dumpValue
	line   int
}

type dumpField struct {
	key   string
	value *dumpValue
}

// field returns the value of key in an object, or nil.
func (v *dumpValue) field(key string) *dumpValue {
	if v == nil || v.kind != dumpObject {
		return nil
	}
	for _, f := range v.fields {
		if f.key == key {
			return f.value
		}
	}
	return nil
}

// path follows nested object fields.
func (v *dumpValue) path(keys ...string) *dumpValue {
	for _, k := range keys {
		v = v.field(k)
	}
	return v
}

// str returns a string, ref or scalar value's text; ok is false for unset,
// null, objects, arrays and missing values.
func (v *dumpValue) str() (string, bool) {
	if v == nil {
		return "", false
	}
	switch v.kind {
	case dumpScalar, dumpString, dumpRef:
		return v.text, true
	}
	return "", false
}

type dump struct {
	preamble []string // text lines outside any object ("Guest information:")
	roots    []*dumpValue
}

var (
	dumpKeyRE   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)
	dumpTypedRE = regexp.MustCompile(`^\(([^()]*)\)\s*(\{|\[|null)$`)
)

// parseDump parses every top-level object or array in s.
func parseDump(s string) (dump, []Problem) {
	var (
		d     dump
		probs []Problem
		stack []*dumpValue
	)
	lines := strings.Split(s, "\n")
	add := func(key string, v *dumpValue, ln int) {
		if len(stack) == 0 {
			d.roots = append(d.roots, v)
			return
		}
		top := stack[len(stack)-1]
		if top.kind == dumpArray {
			if key != "" {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("field %q inside array (%s)", key, top.typ)})
			}
			top.items = append(top.items, v)
			return
		}
		if key == "" {
			probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("value without a field name inside (%s)", top.typ)})
			return
		}
		top.fields = append(top.fields, dumpField{key: key, value: v})
	}
	for i := 0; i < len(lines); i++ {
		ln := i + 1
		t := strings.TrimSpace(lines[i])
		if t == "" {
			continue
		}
		body := strings.TrimSuffix(t, ",")
		if body == "}" || body == "]" {
			if len(stack) == 0 {
				probs = append(probs, Problem{Line: ln, Message: "closing " + body + " without an open block"})
				continue
			}
			top := stack[len(stack)-1]
			if (body == "}") != (top.kind == dumpObject) {
				probs = append(probs, Problem{Line: ln, Message: fmt.Sprintf("closing %s does not match open (%s) from line %d", body, top.typ, top.line)})
			}
			stack = stack[:len(stack)-1]
			continue
		}
		key, val := "", body
		if m := dumpKeyRE.FindStringSubmatch(body); m != nil {
			key, val = m[1], m[2]
		}
		if len(stack) == 0 && key == "" && !dumpTypedRE.MatchString(val) {
			d.preamble = append(d.preamble, t)
			continue
		}
		if len(stack) == 0 && key != "" {
			// A key = value line outside any object is not a dump.
			d.preamble = append(d.preamble, t)
			continue
		}
		v := &dumpValue{line: ln}
		switch {
		case dumpTypedRE.MatchString(val):
			m := dumpTypedRE.FindStringSubmatch(val)
			v.typ = m[1]
			switch m[2] {
			case "{":
				v.kind = dumpObject
			case "[":
				v.kind = dumpArray
			default:
				v.kind = dumpNull
			}
		case val == "<unset>":
			v.kind = dumpUnset
		case strings.HasPrefix(val, `"`):
			v.kind = dumpString
			// A string that does not end on this line continues on the
			// next ones (vim-cmd prints embedded newlines raw).
			raw := strings.TrimSuffix(strings.TrimRight(lines[i], " \t\r"), ",")
			raw = raw[strings.Index(raw, `"`):]
			for !(len(raw) >= 2 && strings.HasSuffix(raw, `"`)) && i+1 < len(lines) {
				i++
				raw += "\n" + strings.TrimSuffix(strings.TrimRight(lines[i], " \t\r"), ",")
			}
			if len(raw) >= 2 && strings.HasSuffix(raw, `"`) {
				v.text = raw[1 : len(raw)-1]
			} else {
				probs = append(probs, Problem{Line: ln, Message: "string value is never closed"})
				v.text = raw[1:]
			}
		case strings.HasPrefix(val, "'") && len(val) >= 2 && strings.HasSuffix(val, "'"):
			v.kind = dumpRef
			v.text = val[1 : len(val)-1]
		default:
			v.kind = dumpScalar
			v.text = val
		}
		add(key, v, ln)
		if v.kind == dumpObject || v.kind == dumpArray {
			stack = append(stack, v)
		}
	}
	if len(stack) > 0 {
		outer := stack[0]
		probs = append(probs, Problem{Line: outer.line, Message: fmt.Sprintf("(%s) opened here is never closed (%d blocks left open): the output is truncated", outer.typ, len(stack))})
	}
	return d, probs
}
