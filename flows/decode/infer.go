package decode

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// Inferring decoders read tables whose columns come from the messages
// (docs/schema.md#tables-typed-by-their-json-messages): a field that is
// not a column yet is reported with the type its values infer, so that the
// caller adds the column and decodes the batch again; a record is never
// loaded without one of its values.

// Schema contract modes (Contract), as the spec spells them.
const (
	Evolve       = "evolve"
	Freeze       = "freeze"
	DiscardRow   = "discard_row"
	DiscardValue = "discard_value"
)

// Contract says what a decoder does with a field that is no column
// (Columns) and with a value that does not fit its column (DataType),
// docs/schema.md#schema-contracts. evolve applies to inferring decoders: a
// new field is reported by Found, and a value of another type goes to the
// variant column <name>__v_<type>. The zero Contract is a declared table's:
// fields that are no column are ignored, a value that does not fit is a
// type_mismatch.
type Contract struct {
	Columns  string
	DataType string
}

// reasonDiscarded marks a record left out under discard_row: counted
// (Discarded), not a dead letter.
const reasonDiscarded = "discarded"

// Govern sets the decoder's contract; call it before Clone.
func (d *JSON) Govern(c Contract) {
	if c.Columns == "" {
		c.Columns = DiscardValue
	}
	if c.DataType == "" {
		c.DataType = Freeze
	}
	d.plan.contract = c
}

// Reserve makes a field with a value whose column name is one of names
// an error of its record: something else fills that column (why says
// what). Call it before Clone.
func (d *JSON) Reserve(names []string, why func(name string) string) {
	d.plan.reserved = map[string]string{}
	for _, n := range names {
		d.plan.reserved[n] = why(n)
	}
}

// Reserves reports whether the decoder reserves exactly names (Reserve).
func (d *JSON) Reserves(names []string) bool {
	if len(names) != len(d.reserved) {
		return false
	}
	for _, n := range names {
		if _, ok := d.reserved[n]; !ok {
			return false
		}
	}
	return true
}

// Discarded returns the positions (batch.Record.Position) of the records
// DecodeAll left out under discard_row since the last call, in order.
func (d *JSON) Discarded() []string {
	out := d.discarded
	d.discarded = nil
	return out
}

// VariantName is the column that holds a column's values of type t that
// its own type does not take.
func VariantName(column string, t batch.Type) string { return column + "__v_" + t.String() }

// SetTypes gives an inferring decoder the column types a writer schema
// states for fields (by column name, <parent>__<child> for nested ones):
// a new field of one of them is found with that type rather than the one
// its value infers, and found even while its value is null. The map is
// read, never written; set it again for each batch.
func (d *JSON) SetTypes(types map[string]batch.Type) { d.typed = types }

// typedNull reports a new field of a stated type whose value is null.
func (d *JSON) typedNull(name string) {
	if t, ok := d.typed[name]; ok && d.contract.Columns == Evolve {
		d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: name, Type: t, Nullable: true})
	}
}

// typedTakes reports whether a column of type t takes a value of JSON
// type vt as the writer schemas write them (package wire).
func typedTakes(t batch.Type, vt fastjson.Type) bool {
	switch t.Kind {
	case batch.KindString, batch.KindTimestamp, batch.KindDate, batch.KindBytes:
		return vt == fastjson.TypeString
	case batch.KindDecimal:
		return vt == fastjson.TypeString || vt == fastjson.TypeNumber
	case batch.KindInt64, batch.KindFloat64:
		return vt == fastjson.TypeNumber
	case batch.KindBool:
		return vt == fastjson.TypeTrue || vt == fastjson.TypeFalse
	}
	return false
}

// stray applies the contract to a field that is no column and has a value.
func (d *JSON) stray(name string, val *fastjson.Value) *Error {
	switch d.contract.Columns {
	case Freeze:
		return &Error{Reason: batch.ReasonSchemaContract, Field: name, Msg: "is not a column of the table (schema_contract columns: freeze)"}
	case DiscardRow:
		return &Error{Reason: reasonDiscarded, Field: name}
	case Evolve:
		return d.unknown(name, val)
	}
	return nil
}

// misfit applies the contract to a value of column i that its type does
// not take (e, a type_mismatch). It returns retry when the value was
// moved to its variant column (decode the record's columns again), or
// the error of the record, nil when the value is left out.
func (d *JSON) misfit(i int, val *fastjson.Value, vec *batch.Vector, e *Error) (retry bool, err *Error) {
	c := &d.cols[i]
	switch d.contract.DataType {
	case Evolve:
		t, ok := inferredKind(val)
		if !ok || d.variant[i] || !c.nullable {
			// A column that is not nullable (a CDC target's key) keeps
			// every row's value: it has no variant to move one to.
			return false, e
		}
		name := VariantName(c.name, t)
		if j, ok := d.index[name]; ok {
			d.vals[j], d.vals[i] = val, nil
			if d.keys != nil {
				d.keys[j], d.text[j] = d.keys[i], d.text[i]
			}
			return true, nil
		}
		d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: name, Type: t, Nullable: true})
		vec.AppendNull()
		return false, nil
	case DiscardRow:
		return false, &Error{Reason: reasonDiscarded, Field: c.name}
	case DiscardValue:
		if c.nullable {
			vec.AppendNull()
			return false, nil
		}
	case Freeze:
		if d.infer {
			e.Reason = batch.ReasonSchemaContract
			e.Msg += " (schema_contract data_type: freeze)"
		}
	}
	return false, e
}

// appendFound adds a column to found, or widens the one of its name.
func appendFound(found []batch.Column, at *map[string]int, c batch.Column) []batch.Column {
	if *at == nil {
		*at = map[string]int{}
	}
	if i, ok := (*at)[c.Name]; ok {
		found[i].Type = widen(found[i].Type, c.Type)
		return found
	}
	(*at)[c.Name] = len(found)
	return append(found, c)
}

// NewInferring returns a decoder of the columns s inferred from earlier
// messages. names, when not nil, gives the column name of a field name
// (naming: snake_case). Its columns take what they were inferred from: a
// timestamp column only RFC 3339 strings (an integer is not read as epoch
// milliseconds, as a declared column reads it).
func NewInferring(s batch.Schema, names func(string) string) (*JSON, error) {
	d, err := NewJSON(s)
	if err != nil {
		return nil, err
	}
	d.plan.infer = true
	d.plan.names = names
	d.plan.maxNesting = DefaultMaxNesting
	d.keys = make([]string, len(s.Columns))
	d.text = make([]bool, len(s.Columns))
	d.tree = &tree{}
	d.plan.contract = Contract{Columns: Evolve, DataType: Evolve}
	d.plan.variant = make([]bool, len(s.Columns))
	for i, c := range s.Columns {
		// A column named <base>__v_<its type> beside <base> holds base's
		// values of that type: its own values have no variant.
		for _, b := range s.Columns {
			if c.Name == VariantName(b.Name, c.Type) {
				d.plan.variant[i] = true
			}
		}
	}
	return d, nil
}

// Found returns the columns, in order of first appearance, that fields of
// the records decoded since the last call need and the schema lacks, each
// nullable and typed by its values: int64 for integers, float64 for
// numbers (integers among them included), bool, timestamp for RFC 3339
// strings and string for any string (timestamps among them included). A
// value of another type than its column's is a type_mismatch of its record
// once the column exists. Records with such fields were decoded into the
// batch without them: decode the batch again with the new columns.
func (d *JSON) Found() []batch.Column {
	out := d.found
	d.found, d.foundAt = nil, nil
	for i := range d.hints {
		if d.hints[i].found > 0 {
			d.hints[i] = hint{col: -1}
		}
	}
	return out
}

// inferredKind is the type a JSON value infers, or false for null; a
// nested object or array has none (an error for the caller).
func inferredKind(val *fastjson.Value) (batch.Type, bool) {
	t, ok, _ := inferKind(val, nil)
	return t, ok
}

// inferKind is inferredKind with num as scratch for a number's text,
// returned for reuse.
func inferKind(val *fastjson.Value, num []byte) (batch.Type, bool, []byte) {
	switch val.Type() {
	case fastjson.TypeString:
		b, _ := val.StringBytes()
		if _, ok := parseTimestamp(b2s(b)); ok {
			return batch.Timestamp, true, num
		}
		return batch.String, true, num
	case fastjson.TypeNumber:
		num = val.MarshalTo(num[:0])
		if _, ok, inRange := parseInt(b2s(num)); ok && inRange {
			return batch.Int64, true, num
		}
		return batch.Float64, true, num
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return batch.Bool, true, num
	}
	return batch.Type{}, false, num
}

// widen merges the type a new column's values inferred so far with one
// more value's.
func widen(have, next batch.Type) batch.Type {
	switch {
	case have == next:
		return have
	case have == batch.Int64 && next == batch.Float64, have == batch.Float64 && next == batch.Int64:
		return batch.Float64
	case have == batch.Timestamp && next == batch.String, have == batch.String && next == batch.Timestamp:
		return batch.String
	}
	return have // the other values will be type mismatches of their records
}

// unknown handles a field with a value that is no column, under
// columns: evolve: a column to add. The batch is decoded again once its
// columns exist, and that pass checks every value; this one only needs
// the types, so a value whose type the column found so far already takes
// costs a map lookup.
func (d *JSON) unknown(name string, val *fastjson.Value) *Error {
	vt := val.Type()
	switch vt {
	case fastjson.TypeObject, fastjson.TypeArray:
		// Deeper than max_nesting: the column holds the value's JSON text.
		d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: name, Type: batch.String, Nullable: true})
		return nil
	}
	if i, ok := d.foundAt[name]; ok && (absorbs(d.found[i].Type, vt) || d.keeps(d.found[i].Type, val)) {
		return nil
	}
	if vt == fastjson.TypeNumber {
		d.num = val.MarshalTo(d.num[:0])
		if !isJSONNumber(b2s(d.num)) {
			return &Error{Reason: batch.ReasonUndecodable, Field: name, Msg: "invalid JSON: " + clip(string(d.num)) + " is not a number"}
		}
	}
	if vt == fastjson.TypeString {
		if b, _ := val.StringBytes(); !utf8.Valid(b) {
			return invalidUTF8(name, b)
		}
	}
	if t, ok := d.typed[name]; ok && typedTakes(t, vt) {
		d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: name, Type: t, Nullable: true})
		return nil
	}
	var t batch.Type
	t, _, d.num = inferKind(val, d.num)
	d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: name, Type: t, Nullable: true})
	return nil
}

// keeps reports whether a new column found as int64 or timestamp stays so
// with one more value: an integer in range, an RFC 3339 string. The value
// would find the column's type again (a type a writer schema states is
// one it takes), so unknown has nothing to do.
func (d *JSON) keeps(t batch.Type, val *fastjson.Value) bool {
	switch vt := val.Type(); {
	case t == batch.Int64 && vt == fastjson.TypeNumber:
		d.num = val.MarshalTo(d.num[:0])
		return keepsText(t, vt, b2s(d.num))
	case t == batch.Timestamp && vt == fastjson.TypeString:
		b, _ := val.StringBytes()
		return keepsText(t, vt, b2s(b))
	}
	return false
}

// keepsText is keeps of a value of JSON type vt whose text (a number's,
// a string's unescaped) is text.
func keepsText(t batch.Type, vt fastjson.Type, text string) bool {
	switch {
	case t == batch.Int64 && vt == fastjson.TypeNumber:
		_, ok, inRange := parseInt(text)
		return ok && inRange && isJSONNumber(text)
	case t == batch.Timestamp && vt == fastjson.TypeString:
		_, ok := parseTimestamp(text)
		return ok
	}
	return false
}

// absorbs reports whether a column inferred as t takes every value of
// JSON type vt without widening.
func absorbs(t batch.Type, vt fastjson.Type) bool {
	switch vt {
	case fastjson.TypeString:
		return t == batch.String
	case fastjson.TypeNumber:
		return t == batch.Float64
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return t == batch.Bool
	}
	return false
}

// normalized is a field name and the column name it maps to.
type normalized struct{ key, name string }

// columnName maps a field name of an inferring decoder to its column name,
// cached per decoder.
func (d *JSON) columnName(key []byte) normalized {
	if n, ok := d.norm[string(key)]; ok {
		return n
	}
	if d.norm == nil {
		d.norm = map[string]normalized{}
	}
	n := normalized{key: string(key), name: string(key)}
	if d.names != nil {
		n.name = d.names(n.key)
	}
	d.norm[n.key] = n
	if n.name != n.key {
		d.renamed = append(d.renamed, [2]string{n.key, n.name})
	}
	return n
}

// Renamed returns the field names, with the column name each became, that
// the decoder normalized to another name since the last call.
func (d *JSON) Renamed() [][2]string {
	out := d.renamed
	d.renamed = nil
	if d.tree != nil {
		for _, c := range d.tree.all {
			out = append(out, c.renamed...)
			c.renamed = nil
		}
	}
	return out
}

// visitInferring collects the values of a record's fields by column name
// (d.vals) and reports the fields that are no column yet.
func (d *JSON) visitInferring(obj *fastjson.Object) *Error {
	var err *Error
	clear(d.keys)
	clear(d.text)
	d.lists = d.lists[:0]
	pos := 0
	obj.Visit(func(key []byte, val *fastjson.Value) {
		if err != nil {
			return
		}
		// As visit: the column the key at this position named last time.
		if pos == len(d.hints) {
			d.hints = append(d.hints, hint{col: -1})
		}
		h := &d.hints[pos]
		pos++
		if vt := val.Type(); vt == fastjson.TypeObject || vt == fastjson.TypeArray {
			if h.nest.key == "" || h.nest.key != string(key) {
				h.nest = d.columnName(key)
			}
			err = d.nested(h.nest.name, h.nest.key, val, d.base+1)
			return
		}
		if h.key == "" || h.key != string(key) {
			n := d.columnName(key)
			i, ok := d.index[n.name]
			if !ok {
				h.key, h.col, h.found = "", -1, 0
				if why, ok := d.reserved[n.name]; ok && val.Type() != fastjson.TypeNull {
					err = &Error{Reason: batch.ReasonTypeMismatch, Field: n.key, Msg: why}
					return
				}
				if val.Type() != fastjson.TypeNull {
					err = d.stray(n.name, val)
				} else if d.typed != nil {
					d.typedNull(n.name)
				}
				if f, ok := d.foundAt[n.name]; ok && err == nil && d.contract.Columns == Evolve {
					h.key, h.found = n.key, f+1
				}
				return
			}
			h.key, h.col, h.found = n.key, i, 0
		}
		if h.found > 0 {
			// A new field, met at this position before.
			f := &d.found[h.found-1]
			if vt := val.Type(); vt != fastjson.TypeNull && !absorbs(f.Type, vt) && !d.keeps(f.Type, val) {
				err = d.unknown(f.Name, val)
			}
			return
		}
		i := h.col
		if d.vals[i] != nil && d.keys[i] != h.key {
			err = collision(d.keys[i], h.key, d.cols[i].name)
			return
		}
		d.vals[i], d.keys[i] = val, h.key
	})
	return err
}

// collision is the error of two fields of one record that name one column.
func collision(a, b, col string) *Error {
	return &Error{Reason: batch.ReasonTypeMismatch, Field: col, Msg: "fields " + strconv.Quote(a) + " and " + strconv.Quote(b) +
		" both become column " + col + " under naming: snake_case: rename one, or set naming: direct"}
}

// DefaultMaxNesting is how many levels of nested objects an inferring
// decoder flattens into columns unless told otherwise (SetMaxNesting).
const DefaultMaxNesting = 4

// SetMaxNesting sets how many levels of nested objects become columns
// <parent>__<child>: a value deeper than that (an object or a list) is
// stored as its JSON text in the column of its path. Call it before
// Clone.
func (d *JSON) SetMaxNesting(n int) { d.plan.maxNesting = n }

// nested collects the fields of a nested object or list, the value of
// the field path (column name name), depth levels down from the record.
func (d *JSON) nested(name, path string, val *fastjson.Value, depth int) *Error {
	if depth > d.maxNesting {
		return d.leaf(name, path, val, true)
	}
	if val.Type() == fastjson.TypeArray {
		return d.addList(name, path, val, depth)
	}
	var err *Error
	obj, _ := val.Object()
	obj.Visit(func(key []byte, v *fastjson.Value) {
		if err != nil {
			return
		}
		n := d.childName(name, path, key)
		if vt := v.Type(); vt == fastjson.TypeObject || vt == fastjson.TypeArray {
			err = d.nested(n.name, n.key, v, depth+1)
			return
		}
		err = d.leaf(n.name, n.key, v, false)
	})
	return err
}

// leaf collects the value of a nested field (path) for column name; text
// says the value is to be stored as its JSON text.
func (d *JSON) leaf(name, path string, val *fastjson.Value, text bool) *Error {
	i, ok := d.index[name]
	if !ok {
		if val.Type() == fastjson.TypeNull {
			if d.typed != nil && !text {
				d.typedNull(name)
			}
			return nil
		}
		if why, ok := d.reserved[name]; ok {
			return &Error{Reason: batch.ReasonTypeMismatch, Field: path, Msg: why}
		}
		e := d.stray(name, val)
		if e != nil && e.Field == name && path != "" {
			e.Field = path // a nested field: named by its path
		}
		return e
	}
	if d.vals[i] != nil && d.keys[i] != path {
		return collision(d.keys[i], path, name)
	}
	d.vals[i], d.keys[i], d.text[i] = val, path, text
	return nil
}

// childName maps the field key of a nested object, at path with column
// name parent, to its path and column name <parent>__<key>, cached.
func (d *JSON) childName(parent, path string, key []byte) normalized {
	m := d.children[path]
	if n, ok := m[string(key)]; ok {
		return n
	}
	if m == nil {
		if d.children == nil {
			d.children = map[string]map[string]normalized{}
		}
		m = map[string]normalized{}
		d.children[path] = m
	}
	k := string(key)
	n := normalized{key: path + "." + k, name: parent + "__" + k}
	if d.names != nil {
		n.name = parent + "__" + d.names(k)
	}
	m[k] = n
	if n.name != strings.ReplaceAll(n.key, ".", "__") {
		d.renamed = append(d.renamed, [2]string{n.key, n.name})
	}
	return n
}

// textField stores a value deeper than max_nesting as its JSON text in
// a string column.
func (d *JSON) textField(c *column, val *fastjson.Value, vec *batch.Vector) *Error {
	if c.typ.Kind != batch.KindString {
		return d.mismatch(c, val, "is nested deeper than max_nesting, which a "+c.typ.String()+" column does not hold")
	}
	d.num = val.MarshalTo(d.num[:0])
	if !utf8.Valid(d.num) {
		return invalidUTF8(c.name, d.num)
	}
	vec.AppendString(d.arena.string(d.num))
	return nil
}
