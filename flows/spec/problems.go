package spec

import (
	"sort"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a spec.
type Problem struct {
	File   string // the spec file; "" when parsed from memory without a name
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Path   string // the key concerned, e.g. flows[2].source.kafka.topic
	Msg    string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if p.Line > 0 {
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteByte(':')
		if p.Column > 0 {
			b.WriteString(strconv.Itoa(p.Column))
			b.WriteByte(':')
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems are every problem of an invalid spec, sorted by line. It is the
// error Parse, Load and Validate return for an invalid spec; match it with
// errors.As.
type Problems []Problem

// Error renders one problem per line: FILE:LINE:COL: PATH: MSG.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (ps Problems) sort() {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Column < ps[j].Column
	})
}
