package esxisim

import (
	"fmt"
	"strconv"
	"strings"
)

// This file implements the mini shell of the contract: the only grammar the
// client may use, parsed strictly so that anything else is a syntax error
// (exit 2, "sh: syntax error: ..." on stderr, like BusyBox ash).

// wordPart is a piece of a shell word: literal text, or the `$?` expansion
// (only possible inside double quotes).
type wordPart struct {
	lit    string
	status bool
}

// word is a shell word made of adjacent quoted and unquoted parts.
type word []wordPart

// expand returns the word's value with `$?` replaced by status.
func (w word) expand(status int) string {
	var b strings.Builder
	for _, p := range w {
		if p.status {
			b.WriteString(strconv.Itoa(status))
		} else {
			b.WriteString(p.lit)
		}
	}
	return b.String()
}

// literal reports the word's value if it holds no expansion.
func (w word) literal() (string, bool) {
	var b strings.Builder
	for _, p := range w {
		if p.status {
			return "", false
		}
		b.WriteString(p.lit)
	}
	return b.String(), true
}

// redirKind is one of the three redirections the grammar allows.
type redirKind int

const (
	redirStdoutNull redirKind = iota // >/dev/null
	redirStderrNull                  // 2>/dev/null
	redirStderrOut                   // 2>&1
)

// simpleCmd is a command name with arguments and redirections, applied in order.
type simpleCmd struct {
	words  []word
	redirs []redirKind
}

// andOr is a chain `c0 op1 c1 op2 c2 ...` where op is "&&" or "||".
type andOr struct {
	cmds []simpleCmd
	ops  []string
}

type tokKind int

const (
	tokWord tokKind = iota
	tokAnd
	tokOr
	tokSemi
	tokNewline
	tokRedir
	tokEOF
)

type token struct {
	kind  tokKind
	word  word
	redir redirKind
}

// syntaxError is the shell's complaint about a script outside the grammar.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return "syntax error: " + e.msg }

// isBareChar reports whether c may appear unquoted in a word.
func isBareChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("_./=:,@%+-", c) >= 0
}

// lexer turns a script into tokens.
type lexer struct {
	s   string
	pos int
}

func unexpected(c byte) *syntaxError {
	return &syntaxError{msg: fmt.Sprintf("unexpected %q", string(c))}
}

func (l *lexer) next() (token, error) {
	for l.pos < len(l.s) && (l.s[l.pos] == ' ' || l.s[l.pos] == '\t') {
		l.pos++
	}
	if l.pos >= len(l.s) {
		return token{kind: tokEOF}, nil
	}
	c := l.s[l.pos]
	switch c {
	case '\n':
		l.pos++
		return token{kind: tokNewline}, nil
	case ';':
		if strings.HasPrefix(l.s[l.pos:], ";;") {
			return token{}, &syntaxError{msg: `unexpected ";;"`}
		}
		l.pos++
		return token{kind: tokSemi}, nil
	case '&':
		if strings.HasPrefix(l.s[l.pos:], "&&") {
			l.pos += 2
			return token{kind: tokAnd}, nil
		}
		return token{}, &syntaxError{msg: `unsupported "&" (background)`}
	case '|':
		if strings.HasPrefix(l.s[l.pos:], "||") {
			l.pos += 2
			return token{kind: tokOr}, nil
		}
		return token{}, &syntaxError{msg: `unsupported "|" (pipe)`}
	case '>':
		l.pos++
		return l.redirTarget(1)
	case '2':
		if strings.HasPrefix(l.s[l.pos:], "2>") {
			l.pos += 2
			return l.redirTarget(2)
		}
	}
	w, err := l.word()
	if err != nil {
		return token{}, err
	}
	return token{kind: tokWord, word: w}, nil
}

// redirTarget reads what follows `>` (fd 1) or `2>` (fd 2).
func (l *lexer) redirTarget(fd int) (token, error) {
	if fd == 2 && strings.HasPrefix(l.s[l.pos:], "&1") {
		l.pos += 2
		if l.pos < len(l.s) && !isWordEnd(l.s[l.pos]) {
			return token{}, &syntaxError{msg: "unsupported redirection"}
		}
		return token{kind: tokRedir, redir: redirStderrOut}, nil
	}
	for l.pos < len(l.s) && (l.s[l.pos] == ' ' || l.s[l.pos] == '\t') {
		l.pos++
	}
	if l.pos >= len(l.s) || isWordEnd(l.s[l.pos]) {
		return token{}, &syntaxError{msg: "unexpected redirection without target"}
	}
	w, err := l.word()
	if err != nil {
		return token{}, err
	}
	if v, ok := w.literal(); !ok || v != "/dev/null" {
		return token{}, &syntaxError{msg: "unsupported redirection"}
	}
	if fd == 2 {
		return token{kind: tokRedir, redir: redirStderrNull}, nil
	}
	return token{kind: tokRedir, redir: redirStdoutNull}, nil
}

func isWordEnd(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '>'
}

// word reads one word: adjacent bare, single-quoted, double-quoted and `\'` parts.
func (l *lexer) word() (word, error) {
	var w word
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			w = append(w, wordPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for l.pos < len(l.s) {
		c := l.s[l.pos]
		switch {
		case isWordEnd(c):
			flush()
			return w, nil
		case isBareChar(c):
			lit.WriteByte(c)
			l.pos++
		case c == '\\':
			if l.pos+1 < len(l.s) && l.s[l.pos+1] == '\'' {
				lit.WriteByte('\'')
				l.pos += 2
				continue
			}
			return nil, &syntaxError{msg: `unsupported "\" escape`}
		case c == '\'':
			end := strings.IndexByte(l.s[l.pos+1:], '\'')
			if end < 0 {
				return nil, &syntaxError{msg: "unterminated quoted string"}
			}
			lit.WriteString(l.s[l.pos+1 : l.pos+1+end])
			if end == 0 && len(w) == 0 && lit.Len() == 0 {
				// '' is an empty word; remember it exists.
				w = append(w, wordPart{})
			}
			l.pos += end + 2
		case c == '"':
			l.pos++
			closed := false
			for l.pos < len(l.s) && !closed {
				d := l.s[l.pos]
				switch d {
				case '"':
					closed = true
					l.pos++
				case '$':
					if l.pos+1 < len(l.s) && l.s[l.pos+1] == '?' {
						flush()
						w = append(w, wordPart{status: true})
						l.pos += 2
						continue
					}
					return nil, &syntaxError{msg: `unsupported "$" expansion`}
				case '\\', '`':
					return nil, &syntaxError{msg: fmt.Sprintf("unsupported %q in double quotes", string(d))}
				default:
					lit.WriteByte(d)
					l.pos++
				}
			}
			if !closed {
				return nil, &syntaxError{msg: "unterminated quoted string"}
			}
			if len(w) == 0 && lit.Len() == 0 {
				w = append(w, wordPart{})
			}
		default:
			return nil, unexpected(c)
		}
	}
	flush()
	return w, nil
}

// parseScript parses a script into lines (newline-separated groups of
// `;`-separated and-or lists). Like ash, which parses and runs one line at a
// time, it returns the lines parsed before a syntax error along with the error,
// so that the caller can run those first.
func parseScript(s string) ([][]andOr, error) {
	l := &lexer{s: s}
	var lines [][]andOr
	var cur []andOr
	var ao *andOr
	var cmd *simpleCmd
	// state: expecting a command start (after start, `;`, newline) or an
	// operator's right-hand side (after && or ||).
	afterOp := false
	endCmd := func() {
		if cmd != nil {
			ao.cmds = append(ao.cmds, *cmd)
			cmd = nil
		}
	}
	endAndOr := func() {
		endCmd()
		if ao != nil {
			cur = append(cur, *ao)
			ao = nil
		}
	}
	for {
		t, err := l.next()
		if err != nil {
			return lines, err
		}
		switch t.kind {
		case tokWord, tokRedir:
			if ao == nil {
				ao = &andOr{}
			}
			if cmd == nil {
				cmd = &simpleCmd{}
			}
			afterOp = false
			if t.kind == tokWord {
				cmd.words = append(cmd.words, t.word)
			} else {
				cmd.redirs = append(cmd.redirs, t.redir)
			}
		case tokAnd, tokOr:
			if cmd == nil || afterOp {
				return lines, &syntaxError{msg: fmt.Sprintf("unexpected %q", opString(t.kind))}
			}
			if len(cmd.words) == 0 {
				return lines, &syntaxError{msg: "redirection without command"}
			}
			endCmd()
			ao.ops = append(ao.ops, opString(t.kind))
			afterOp = true
		case tokSemi:
			if cmd == nil || afterOp {
				return lines, &syntaxError{msg: `unexpected ";"`}
			}
			if len(cmd.words) == 0 {
				return lines, &syntaxError{msg: "redirection without command"}
			}
			endAndOr()
		case tokNewline, tokEOF:
			if afterOp {
				if t.kind == tokEOF {
					return lines, &syntaxError{msg: "unexpected end of file"}
				}
				continue // a newline may follow && and ||
			}
			if cmd != nil && len(cmd.words) == 0 {
				return lines, &syntaxError{msg: "redirection without command"}
			}
			endAndOr()
			if len(cur) > 0 {
				lines = append(lines, cur)
				cur = nil
			}
			if t.kind == tokEOF {
				return lines, nil
			}
		}
	}
}

func opString(k tokKind) string {
	if k == tokAnd {
		return "&&"
	}
	return "||"
}

// shellQuote single-quotes s the way the contract's client must: used by the
// tests and the fuzz target to check that quoting round-trips.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
