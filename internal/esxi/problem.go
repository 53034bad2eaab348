package esxi

import "fmt"

// Problem records a piece of host output that a parser could not interpret.
// Parsers never guess: what they cannot read unambiguously is left out of
// the result and described here instead.
type Problem struct {
	// Source names the output or file, e.g. "getallvms" or a .vmx path.
	Source string
	// Line is the 1-based line number within Source, or 0 if not applicable.
	Line int
	// Message says what was wrong.
	Message string
}

// String formats the problem as "source:line: message".
func (p Problem) String() string {
	switch {
	case p.Source != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.Source, p.Line, p.Message)
	case p.Source != "":
		return p.Source + ": " + p.Message
	default:
		return p.Message
	}
}

func withSource(ps []Problem, src string) []Problem {
	for i := range ps {
		if ps[i].Source == "" {
			ps[i].Source = src
		}
	}
	return ps
}
