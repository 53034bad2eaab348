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
	p := &dumpParser{lines: strings.Split(s, "\n")}
	for ; p.i < len(p.lines); p.i++ {
		p.line()
	}
	if len(p.stack) > 0 {
		outer := p.stack[0]
		p.probs = append(p.probs, Problem{Line: outer.line, Message: fmt.Sprintf("(%s) opened here is never closed (%d blocks left open): the output is truncated", outer.typ, len(p.stack))})
	}
	return p.d, p.probs
}

// dumpParser reads a dump line by line; stack holds the open objects and
// arrays, innermost last.
type dumpParser struct {
	d     dump
	probs []Problem
	stack []*dumpValue
	lines []string
	i     int // index of the line being read
}

func (p *dumpParser) problem(ln int, format string, args ...any) {
	p.probs = append(p.probs, Problem{Line: ln, Message: fmt.Sprintf(format, args...)})
}

// line reads line p.i (and the continuation lines of a string it opens).
func (p *dumpParser) line() {
	ln := p.i + 1
	t := strings.TrimSpace(p.lines[p.i])
	if t == "" {
		return
	}
	body := strings.TrimSuffix(t, ",")
	if body == "}" || body == "]" {
		p.close(body, ln)
		return
	}
	key, val := "", body
	if m := dumpKeyRE.FindStringSubmatch(body); m != nil {
		key, val = m[1], m[2]
	}
	if len(p.stack) == 0 && (key != "" || !dumpTypedRE.MatchString(val)) {
		// Text outside any object, and a key = value line there, are
		// not a dump.
		p.d.preamble = append(p.d.preamble, t)
		return
	}
	v := p.value(val, ln)
	p.add(key, v, ln)
	if v.kind == dumpObject || v.kind == dumpArray {
		p.stack = append(p.stack, v)
	}
}

// close ends the innermost open block with body ("}" or "]").
func (p *dumpParser) close(body string, ln int) {
	if len(p.stack) == 0 {
		p.problem(ln, "closing %s without an open block", body)
		return
	}
	top := p.stack[len(p.stack)-1]
	if (body == "}") != (top.kind == dumpObject) {
		p.problem(ln, "closing %s does not match open (%s) from line %d", body, top.typ, top.line)
	}
	p.stack = p.stack[:len(p.stack)-1]
}

// value reads the value val of line ln.
func (p *dumpParser) value(val string, ln int) *dumpValue {
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
		v.text = p.stringValue(ln)
	case strings.HasPrefix(val, "'") && len(val) >= 2 && strings.HasSuffix(val, "'"):
		v.kind = dumpRef
		v.text = val[1 : len(val)-1]
	default:
		v.kind = dumpScalar
		v.text = val
	}
	return v
}

// stringValue reads the quoted string that starts on line p.i. A string
// that does not end on this line continues on the next ones (vim-cmd
// prints embedded newlines raw); p.i is left on its last line.
func (p *dumpParser) stringValue(ln int) string {
	trim := func(s string) string { return strings.TrimSuffix(strings.TrimRight(s, " \t\r"), ",") }
	raw := trim(p.lines[p.i])
	raw = raw[strings.Index(raw, `"`):]
	for !(len(raw) >= 2 && strings.HasSuffix(raw, `"`)) && p.i+1 < len(p.lines) {
		p.i++
		raw += "\n" + trim(p.lines[p.i])
	}
	if len(raw) >= 2 && strings.HasSuffix(raw, `"`) {
		return raw[1 : len(raw)-1]
	}
	p.problem(ln, "string value is never closed")
	return raw[1:]
}

// add puts v (named key, "" for none) into the innermost open block, or
// among the roots when none is open.
func (p *dumpParser) add(key string, v *dumpValue, ln int) {
	if len(p.stack) == 0 {
		p.d.roots = append(p.d.roots, v)
		return
	}
	top := p.stack[len(p.stack)-1]
	if top.kind == dumpArray {
		if key != "" {
			p.problem(ln, "field %q inside array (%s)", key, top.typ)
		}
		top.items = append(top.items, v)
		return
	}
	if key == "" {
		p.problem(ln, "value without a field name inside (%s)", top.typ)
		return
	}
	top.fields = append(top.fields, dumpField{key: key, value: v})
}
