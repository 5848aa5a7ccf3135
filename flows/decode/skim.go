package decode

import (
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// Skimming: the first pass over a batch of a table with no columns yet
// only finds columns (Found, FoundChildren). A record whose fields all
// repeat what earlier records gave (each key at the position the hints
// have for it, each value of a type its found column already takes, each
// list into a child table already found) finds nothing new, and decoding
// it changes no state. skim checks that on the message's bytes, without
// parsing it: a record it cannot vouch for (anything else, including
// invalid JSON and escaped keys) is decoded as usual, which gives it its
// columns or its error.
//
// Every check follows the path the same record takes through
// visitInferring, nested, leaf and decodeLists, and every token is read as
// fastjson reads it, so that a skimmed record is one that decoding would
// have left without effect.

// skimming is whether first passes skim; tests turn it off to compare.
var skimming = true

// maxSkimDepth bounds how deep skim follows nested values, well within
// fastjson.MaxDepth.
const maxSkimDepth = 64

// skims reports whether the decoder, in its first pass, may take msg as
// decoded without parsing it.
func (d *JSON) skims(msg []byte) bool {
	if !d.infer || len(d.cols) > 0 || d.typed != nil || d.contract.Columns != Evolve || len(d.found) == 0 {
		return false
	}
	sc := skimmer{s: b2s(msg)}
	sc.ws()
	if !sc.eat('{') || !d.skimRecord(&sc) {
		return false
	}
	sc.ws()
	return sc.i == len(sc.s)
}

// skimmer reads JSON text as fastjson's parser does, for the tokens skim
// accepts.
type skimmer struct {
	s string
	i int
}

// ws skips the whitespace fastjson skips.
func (sc *skimmer) ws() {
	if sc.i < len(sc.s) && sc.s[sc.i] > ' ' {
		return
	}
	for sc.i < len(sc.s) {
		switch sc.s[sc.i] {
		case ' ', '\n', '\t', '\r':
			sc.i++
		default:
			return
		}
	}
}

// eat skips c, and reports whether it was next.
func (sc *skimmer) eat(c byte) bool {
	if sc.i < len(sc.s) && sc.s[sc.i] == c {
		sc.i++
		return true
	}
	return false
}

// key reads an object key and the colon after it: its text, false when it
// is escaped (fastjson unescapes it) or not there.
func (sc *skimmer) key() (string, bool) {
	sc.ws()
	if !sc.eat('"') {
		return "", false
	}
	rest := sc.s[sc.i:]
	n, escaped := quote(rest)
	if n < 0 || escaped {
		return "", false
	}
	sc.i += n + 1
	sc.ws()
	if !sc.eat(':') {
		return "", false
	}
	sc.ws()
	return rest[:n], true
}

// str reads a string value after its opening quote, as fastjson's
// parseRawString finds its end: its raw text and whether that holds an
// escape (the raw text is then not the value).
func (sc *skimmer) str() (raw string, escaped, ok bool) {
	rest := sc.s[sc.i:]
	n, escaped := quote(rest)
	if n < 0 {
		return "", false, false
	}
	if !escaped {
		sc.i += n + 1
		return rest[:n], false, true
	}
	// A quote preceded by an odd number of backslashes is escaped.
	end := 0
	for {
		j := end + n
		k := j
		for k > end && rest[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			sc.i += j + 1
			return rest[:j], true, true
		}
		end = j + 1
		n = strings.IndexByte(rest[end:], '"')
		if n < 0 {
			return "", false, false
		}
	}
}

// scalar reads a value that is no object or list: its JSON type and, for
// a string or a number, its raw text. ok is false for anything else,
// including fastjson's inf and nan and the end of the text.
func (sc *skimmer) scalar() (vt fastjson.Type, raw string, escaped, ok bool) {
	if sc.i >= len(sc.s) {
		return 0, "", false, false
	}
	switch c := sc.s[sc.i]; c {
	case '"':
		sc.i++
		raw, escaped, ok = sc.str()
		return fastjson.TypeString, raw, escaped, ok
	case 't':
		return fastjson.TypeTrue, "", false, sc.word("true")
	case 'f':
		return fastjson.TypeFalse, "", false, sc.word("false")
	case 'n':
		return fastjson.TypeNull, "", false, sc.word("null")
	}
	// fastjson's parseRawNumber: the longest run of these bytes.
	start := sc.i
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		if c >= '0' && c <= '9' || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+' {
			sc.i++
			continue
		}
		break
	}
	raw = sc.s[start:sc.i]
	if raw == "" || raw == "-" || raw == "+" || sc.i == len(sc.s) {
		return 0, "", false, false
	}
	return fastjson.TypeNumber, raw, false, true
}

// quote returns the index of the first quote in s (-1 for none) and
// whether a backslash comes before it. Keys and most values are short: a
// loop over their bytes beats two searches.
func quote(s string) (n int, escaped bool) {
	const short = 32
	for i := 0; i < len(s) && i < short; i++ {
		switch s[i] {
		case '"':
			return i, escaped
		case '\\':
			escaped = true
		}
	}
	if len(s) <= short {
		return -1, escaped
	}
	n = strings.IndexByte(s, '"')
	if n < 0 {
		return -1, escaped
	}
	return n, escaped || strings.IndexByte(s[short:n], '\\') >= 0
}

// word reads the literal w.
func (sc *skimmer) word(w string) bool {
	if strings.HasPrefix(sc.s[sc.i:], w) {
		sc.i += len(w)
		return true
	}
	return false
}

// next reads what follows a member of an object or a list: the comma
// before the next one (more), or the closing byte.
func (sc *skimmer) next(closing byte) (more, ok bool) {
	sc.ws()
	switch {
	case sc.eat(','):
		return true, true
	case sc.eat(closing):
		return false, true
	}
	return false, false
}

// takes reports whether a field found as column f takes a value of JSON
// type vt and raw text raw without a change: as visitInferring checks a
// new field met before, and unknown a value of a found column.
func takes(f batch.Type, vt fastjson.Type, raw string, escaped bool) bool {
	if vt == fastjson.TypeNull || absorbs(f, vt) {
		return true
	}
	return !escaped && keepsText(f, vt, raw)
}

// skimRecord skims the fields of an object decoded by visitInferring (a
// record or a list's element), after its opening brace.
func (d *JSON) skimRecord(sc *skimmer) bool {
	sc.ws()
	if sc.eat('}') {
		return true
	}
	for pos := 0; ; pos++ {
		key, ok := sc.key()
		if !ok || pos >= len(d.hints) {
			return false
		}
		h := &d.hints[pos]
		if sc.i < len(sc.s) && (sc.s[sc.i] == '{' || sc.s[sc.i] == '[') {
			if h.nest.key == "" || h.nest.key != key || !d.skimNested(sc, h.nest.name, h.nest.key, d.base+1) {
				return false
			}
		} else {
			vt, raw, escaped, ok := sc.scalar()
			if !ok {
				return false
			}
			switch {
			case h.key != "" && h.key == key:
				if h.found == 0 || !takes(d.found[h.found-1].Type, vt, raw, escaped) {
					return false
				}
			case h.key == "" && vt == fastjson.TypeNull:
				// A field that has been null so far: no column, and none
				// found, or the hint would name it.
				n, ok := d.norm[key]
				if !ok {
					return false
				}
				if _, found := d.foundAt[n.name]; found {
					return false
				}
			default:
				return false
			}
		}
		more, ok := sc.next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// skimNested skims a nested object or list, the value of field path
// (column name name), depth levels down from the record, as nested
// decodes it.
func (d *JSON) skimNested(sc *skimmer, name, path string, depth int) bool {
	if depth > d.maxNesting || depth > maxSkimDepth {
		return false // its JSON text is a column value
	}
	if sc.eat('[') {
		return d.skimList(sc, name, depth)
	}
	if !sc.eat('{') {
		return false
	}
	sc.ws()
	if sc.eat('}') {
		return true
	}
	for {
		key, ok := sc.key()
		if !ok {
			return false
		}
		n, ok := d.children[path][key]
		if !ok {
			return false
		}
		if sc.i < len(sc.s) && (sc.s[sc.i] == '{' || sc.s[sc.i] == '[') {
			if !d.skimNested(sc, n.name, n.key, depth+1) {
				return false
			}
		} else {
			vt, raw, escaped, ok := sc.scalar()
			if !ok {
				return false
			}
			// As leaf: a null is no value; another one is a stray field
			// of a column found already.
			if vt != fastjson.TypeNull {
				if _, reserved := d.reserved[n.name]; reserved {
					return false
				}
				i, found := d.foundAt[n.name]
				if !found || !takes(d.found[i].Type, vt, raw, escaped) {
					return false
				}
			}
		}
		more, ok := sc.next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// skimElement skims an element of a list of c's table, as element
// decodes it: an object's fields, or another value into ValueColumn.
func (c *JSON) skimElement(sc *skimmer) bool {
	if sc.eat('{') {
		return c.skimRecord(sc)
	}
	if sc.i < len(sc.s) && sc.s[sc.i] == '[' {
		return false // a list of its own: the rows of another table
	}
	vt, raw, escaped, ok := sc.scalar()
	if !ok {
		return false
	}
	if vt == fastjson.TypeNull {
		return true
	}
	i, found := c.foundAt[ValueColumn]
	return found && takes(c.found[i].Type, vt, raw, escaped)
}

// skimList skims a list (after its opening bracket) of the column name,
// depth levels down: as decodeLists, the rows of a child table that
// exists.
func (d *JSON) skimList(sc *skimmer, name string, depth int) bool {
	sc.ws()
	if sc.eat(']') {
		return true // an empty list has no rows
	}
	suffix := name
	if d.suffix != "" {
		suffix = d.suffix + "__" + name
	}
	var c *JSON
	for _, k := range d.tree.all {
		if k.suffix == suffix {
			c = k
			break
		}
	}
	if c == nil || c.parent != d.suffix || len(c.cols) > 0 || c.contract.Columns != Evolve || c.base != depth {
		return false
	}
	if d.suffix == "" {
		// The table of rows with lists has row ids: found already.
		if i, ok := d.foundAt[batch.IDColumn]; !ok || d.found[i].Type != batch.String {
			return false
		}
	}
	for {
		sc.ws()
		if !c.skimElement(sc) {
			return false
		}
		more, ok := sc.next(']')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}
