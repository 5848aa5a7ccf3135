package decode

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// FieldFilePath is the metadata field file sources fill with the path of the
// file a record came from (batch.Record.Topic).
const FieldFilePath = "_file_path"

// Error is why one record did not decode. Reason is one of the batch.Reason*
// codes; Field names the column concerned, empty when the whole record is at
// fault (not JSON, not an object, a tombstone).
type Error struct {
	Reason string
	Field  string
	Msg    string
}

// Error returns a sentence naming the field:
// `field "amount": "abc" is not a decimal(12,2)`.
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return "field " + strconv.Quote(e.Field) + ": " + e.Msg
}

// origin says where a column's value comes from.
type origin uint8

const (
	fromJSON origin = iota
	fromTopic
	fromPartition
	fromOffset
	fromTimestamp
	fromKey
	fromID       // a row's _sluice_id (docs/schema.md#child-tables)
	fromParentID // a child row's _sluice_parent_id
	fromListIdx  // a child row's _sluice_list_idx
	fromRootID   // a child row's _sluice_root_id
)

type column struct {
	name     string
	typ      batch.Type
	nullable bool
	origin   origin
	unit     int64 // a timestamp column: how many of its integers make a second (1, 1000, 1e6, 1e9)
}

// Units names, per timestamp column, the unit its integers count since the
// epoch: s, ms (the default), us or ns (docs/spec.md, Columns).
type Units map[string]string

// perSecond returns how many of a unit make a second; false for an unknown unit.
func perSecond(unit string) (int64, bool) {
	switch unit {
	case "", "ms":
		return 1000, true
	case "s":
		return 1, true
	case "us":
		return 1_000_000, true
	case "ns":
		return 1_000_000_000, true
	}
	return 0, false
}

// micros converts x of a unit (perSecond) to microseconds; false when it
// is out of the timestamp range or, in nanoseconds, not a whole
// microsecond (a timestamp holds microseconds: the rest would be lost).
func micros(x, per int64) (int64, string) {
	switch per {
	case 1_000_000:
		return x, ""
	case 1_000_000_000:
		if x%1000 != 0 {
			return 0, "has a fraction of a microsecond, which a timestamp cannot hold"
		}
		return x / 1000, ""
	}
	m := 1_000_000 / per
	if x > math.MaxInt64/m || x < -math.MaxInt64/m {
		return 0, "is out of range for a timestamp"
	}
	return x * m, ""
}

// hint remembers which column the key at one position of the previous
// message named: producers write fields in a steady order, so a string
// comparison usually replaces a map lookup.
type hint struct {
	key   string // a column name; "" when the key was not a column
	col   int
	found int        // inferring: 1 + the index in found of the field that is no column yet, or 0
	nest  normalized // inferring: the key there last time it held an object or a list, and its column name
}

// plan is what NewJSON derives from the schema; clones share it.
type plan struct {
	schema   batch.Schema
	cols     []column
	index    map[string]int // JSON field name -> column index, JSON columns only
	infer    bool           // NewInferring: columns inferred from messages
	names    func(string) string
	contract Contract          // Govern; the zero value when not governed
	variant  []bool            // per column, whether it is a variant column (infer only)
	reserved map[string]string // Reserve: column name -> why no field may fill it
	// maxNesting is how many levels of nested objects an inferring decoder
	// flattens (SetMaxNesting).
	maxNesting int
	// SetPaths: per column, the dotted path of the nested field it takes
	// ("" for a field of the record), its segments, and the first segment
	// of every path (fields of the record that are no column, but hold one).
	paths     []string
	segments  [][]string
	pathRoots map[string]bool
	hasID     bool // the schema has _sluice_id
}

// JSON decodes one-object-per-message JSON into a batch of a fixed schema.
// Not safe for concurrent use; make one per goroutine (Clone).
//
// What each column type takes (anything else is a type_mismatch):
//
//	string     a JSON string
//	int64      a JSON integer, exactly (no fraction, no exponent, in range)
//	float64    a JSON number
//	bool       true or false
//	timestamp  an RFC 3339 string (T, t or a space; any fraction, truncated
//	           to microseconds; Z or ±hh:mm), or integer epoch milliseconds
//	date       a YYYY-MM-DD string
//	decimal    a JSON number or a string of decimal text (an exponent allowed),
//	           parsed from the text; more fractional digits than the scale
//	           (other than zeros) or more digits than the precision is an error
//	bytes      a base64 string, standard or URL alphabet, padded or not
//
// A missing field or JSON null is NULL in a nullable column and a
// missing_field error otherwise. A message that is not a JSON object (a
// tombstone included), or a declared field whose number text is not valid
// JSON, is undecodable.
//
// Fields not declared are ignored; when a declared field occurs more than
// once in an object, the last occurrence wins. Strings are unescaped best
// effort (an invalid escape is kept as written) and kept byte for byte.
//
// Strings and bytes values of the batches it fills share backing arrays of
// up to 64 KiB with the other values decoded near them: code that keeps a
// few of them long after the batch (a cache) should copy them
// (strings.Clone, bytes.Clone) so as not to pin whole arrays.
type JSON struct {
	*plan
	parser fastjson.Parser
	vals   []*fastjson.Value // per column, the field's value in the current message
	hints  []hint            // per key position, the column the key there named last time
	num    []byte            // scratch for number text
	arena  arena

	// Inferring decoders only (infer.go).
	keys     []string // per column, the field's path that gave its value
	text     []bool   // per column, whether its value is stored as JSON text
	norm     map[string]normalized
	children map[string]map[string]normalized // nested field path -> key -> its path and column name
	found    []batch.Column
	foundAt  map[string]int
	renamed  [][2]string
	typed    map[string]batch.Type // SetTypes

	// Child tables (children.go), inferring decoders only.
	tree   *tree         // shared by a root decoder and its child decoders
	suffix string        // a child decoder: its table's name after <table>__
	parent string        // a child decoder: its parent's suffix, "" for the top table
	base   int           // a child decoder: the nesting depth of its list
	lists  []pendingList // the current record's lists, decoded after its row
	link   link          // the ids of the row being decoded
	rows   *batch.Batch  // a child decoder: the rows of its table decoded so far
	filled []bool        // a child decoder: per column, whether settled filled it
	expect int           // a child decoder: the rows to make room for when the first comes
	at     struct {      // a child decoder: the element being decoded
		parent *JSON
		path   string
		idx    int
	}

	// Governed decoders (Govern).
	strayKey  string // a field of the record that is no column (declared decoders)
	strayVal  *fastjson.Value
	discarded []string
}

// NewJSON returns a decoder for the schema s: the source's columns. s may
// include the Kafka metadata fields (batch.KafkaFields) and _file_path,
// which are filled from the record instead of the message; such a field
// declared with another type than its own (_kafka_key may also be string)
// is an error, and so is a duplicate column name.
//
// units, when given, names the unit of timestamp columns decoded from
// integers (see Units); an unknown unit or one on another column is an
// error.
func NewJSON(s batch.Schema, units ...Units) (*JSON, error) {
	p := &plan{schema: s, cols: make([]column, len(s.Columns)), index: make(map[string]int, len(s.Columns))}
	seen := make(map[string]bool, len(s.Columns))
	for i, c := range s.Columns {
		if seen[c.Name] {
			return nil, fmt.Errorf("decode: column %q declared twice", c.Name)
		}
		seen[c.Name] = true
		kind := c.Type.Scalar().Kind
		if kind == batch.KindInvalid || kind > batch.KindBytes {
			return nil, fmt.Errorf("decode: column %q has invalid type %v", c.Name, c.Type)
		}
		if kind == batch.KindDecimal && (c.Type.Precision < 1 || c.Type.Precision > batch.MaxDecimalPrecision || c.Type.Scale < 0 || c.Type.Scale > c.Type.Precision) {
			return nil, fmt.Errorf("decode: column %q has invalid type %v", c.Name, c.Type)
		}
		col := column{name: c.Name, typ: c.Type, nullable: c.Nullable, unit: 1000}
		for _, u := range units {
			name, ok := u[c.Name]
			if !ok {
				continue
			}
			per, known := perSecond(name)
			switch {
			case !known:
				return nil, fmt.Errorf("decode: column %q: unknown unit %q (s, ms, us or ns)", c.Name, name)
			case kind != batch.KindTimestamp:
				return nil, fmt.Errorf("decode: column %q: a unit applies to timestamp columns, not %v", c.Name, c.Type)
			}
			col.unit = per
		}
		switch c.Name {
		case batch.FieldKafkaTopic, FieldFilePath:
			col.origin = fromTopic
		case batch.FieldKafkaPartition:
			col.origin = fromPartition
		case batch.FieldKafkaOffset:
			col.origin = fromOffset
		case batch.FieldKafkaTimestamp:
			col.origin = fromTimestamp
		case batch.FieldKafkaKey:
			col.origin = fromKey
		case batch.IDColumn, batch.ParentIDColumn, batch.RootIDColumn, batch.ListIdxColumn:
			switch c.Name {
			case batch.IDColumn:
				col.origin = fromID
				p.hasID = true
			case batch.ParentIDColumn:
				col.origin = fromParentID
			case batch.RootIDColumn:
				col.origin = fromRootID
			default:
				col.origin = fromListIdx
			}
			want := batch.String
			if col.origin == fromListIdx {
				want = batch.Int64
			}
			if c.Type != want {
				return nil, fmt.Errorf("decode: link column %s is %v, declared %v", c.Name, want, c.Type)
			}
			p.cols[i] = col
			continue
		}
		if col.origin != fromJSON {
			want, ok := batch.KafkaFields[c.Name]
			if !ok {
				want = batch.String // _file_path
			}
			if c.Type != want && !(col.origin == fromKey && c.Type == batch.String) {
				alt := ""
				if col.origin == fromKey {
					alt = " or string"
				}
				return nil, fmt.Errorf("decode: metadata field %s is %v, declared %v", c.Name, want.String()+alt, c.Type)
			}
		} else {
			p.index[c.Name] = i
		}
		p.cols[i] = col
	}
	return &JSON{plan: p, vals: make([]*fastjson.Value, len(p.cols))}, nil
}

// Paths names, per column, the nested field it takes its value from, as
// a dotted path (customer.address.zip); a number segment indexes a list.
type Paths map[string]string

// SetPaths has columns take their values from nested fields (paths); an
// unknown column, a metadata column or an empty segment is an error. Call
// it before Clone.
func (d *JSON) SetPaths(paths Paths) error {
	if len(paths) == 0 {
		return nil
	}
	d.plan.paths = make([]string, len(d.cols))
	d.plan.segments = make([][]string, len(d.cols))
	d.plan.pathRoots = map[string]bool{}
	for name, path := range paths {
		i := d.schema.Index(name)
		switch {
		case i < 0:
			return fmt.Errorf("decode: path %q of unknown column %q", path, name)
		case d.cols[i].origin != fromJSON:
			return fmt.Errorf("decode: column %s is filled from the record, not from path %q", name, path)
		}
		segs := strings.Split(path, ".")
		if slices.Contains(segs, "") {
			return fmt.Errorf("decode: column %s: path %q has an empty segment", name, path)
		}
		if d.index[name] == i {
			delete(d.index, name)
		}
		d.plan.paths[i], d.plan.segments[i] = path, segs
		d.plan.pathRoots[segs[0]] = true
	}
	return nil
}

// Clone returns a decoder of the same schema with its own buffers, for use
// on another goroutine.
func (d *JSON) Clone() *JSON {
	c := &JSON{plan: d.plan, vals: make([]*fastjson.Value, len(d.cols))}
	if d.infer {
		c.keys = make([]string, len(d.cols))
		c.text = make([]bool, len(d.cols))
		c.tree = &tree{schemas: d.tree.schemas}
	}
	return c
}

// Schema returns the schema of the batches the decoder fills.
func (d *JSON) Schema() batch.Schema { return d.schema }

// Decode appends rec's row to out, whose schema must be d.Schema(), or
// returns a *Error and leaves out as it was.
func (d *JSON) Decode(rec *batch.Record, out *batch.Batch) error {
	d.check(out)
	if err := d.decode(rec, out); err != nil {
		return err
	}
	return nil
}

// DecodeAll decodes recs into out and appends to dls a dead letter for each
// record that fails (Source, Position, Reason, Error and Payload set; the
// caller fills Pipeline, Flow, Target and At). It returns dls.
func (d *JSON) DecodeAll(recs []batch.Record, out *batch.Batch, dls []batch.DeadLetter) []batch.DeadLetter {
	d.check(out)
	for i := range recs {
		if i > 0 && i == len(recs)/presizeAt && d.tree != nil {
			d.tree.presize(i, len(recs))
		}
		rec := &recs[i]
		if err := d.decode(rec, out); err != nil {
			if err.Reason == reasonDiscarded {
				d.discarded = append(d.discarded, rec.Position())
				continue
			}
			dls = append(dls, batch.DeadLetter{
				Source:   rec.Topic,
				Position: rec.Position(),
				Reason:   err.Reason,
				Error:    err.Error(),
				Payload:  rec.Payload(),
			})
		}
	}
	return dls
}

// check panics when out does not have the decoder's column types: every
// append below relies on it.
func (d *JSON) check(out *batch.Batch) {
	if len(out.Vectors) != len(d.cols) {
		panic(fmt.Sprintf("decode: batch has %d vectors for a schema of %d columns", len(out.Vectors), len(d.cols)))
	}
	for i, v := range out.Vectors {
		if v.Type != d.cols[i].typ {
			panic(fmt.Sprintf("decode: batch column %d holds %v, the schema says %v", i, v.Type, d.cols[i].typ))
		}
	}
}

func (d *JSON) decode(rec *batch.Record, out *batch.Batch) *Error {
	if rec.Value == nil {
		return &Error{Reason: batch.ReasonUndecodable, Msg: "the message is a tombstone (null value)"}
	}
	if skimming && d.skims(rec.Value) {
		return nil // a first pass that would find nothing in it (skim.go)
	}
	v, err := d.parser.ParseBytes(rec.Value)
	if err != nil {
		return &Error{Reason: batch.ReasonUndecodable, Msg: "invalid JSON: " + strings.TrimPrefix(err.Error(), "cannot parse JSON: ")}
	}
	obj, err := v.Object()
	if err != nil {
		return &Error{Reason: batch.ReasonUndecodable, Msg: "the message is a JSON " + v.Type().String() + ", not an object"}
	}
	clear(d.vals)
	if d.infer {
		if e := d.visitInferring(obj); e != nil {
			return e
		}
	} else {
		d.visit(obj)
		for i, segs := range d.segments {
			if segs != nil {
				d.vals[i] = v.Get(segs...)
			}
		}
		if d.strayKey != "" {
			key, val := d.strayKey, d.strayVal
			d.strayKey, d.strayVal = "", nil
			if e := d.stray(key, val); e != nil {
				return e
			}
		}
	}
	n := out.Len()
	if d.tree != nil {
		d.link = link{}
		if len(d.lists) > 0 || d.hasID {
			d.link.rec = rec
		}
	}
	for moves := 0; ; moves++ {
		retry, e := d.columns(rec, out, moves < len(d.cols))
		if e != nil || retry {
			out.Truncate(n)
		}
		if retry {
			continue
		}
		if e == nil && len(d.lists) > 0 {
			marks := d.tree.marks()
			if e = d.decodeLists(rec); e != nil {
				out.Truncate(n)
				d.tree.rollback(marks)
			}
		}
		return e
	}
}

// columns appends the record's values (d.vals) to out; retry when a value
// moved to its variant column and the row must be appended again.
func (d *JSON) columns(rec *batch.Record, out *batch.Batch, mayMove bool) (retry bool, _ *Error) {
	for i := range d.cols {
		var e *Error
		if c := &d.cols[i]; c.origin == fromJSON {
			if d.text != nil && d.text[i] {
				e = d.textField(c, d.vals[i], out.Vectors[i])
			} else {
				e = d.field(c, d.vals[i], out.Vectors[i])
			}
			if e != nil && e.Reason == batch.ReasonTypeMismatch && (d.infer || d.contract.DataType == DiscardRow || d.contract.DataType == DiscardValue) {
				var moved bool
				if moved, e = d.misfit(i, d.vals[i], out.Vectors[i], e); moved {
					if !mayMove {
						return false, &Error{Reason: batch.ReasonTypeMismatch, Field: c.name, Msg: "fits neither the column nor its variant columns"}
					}
					return true, nil
				}
			}
		} else {
			e = d.meta(c, rec, out.Vectors[i])
		}
		if e != nil {
			switch {
			case e.Field != d.cols[i].name:
			case d.paths != nil && d.paths[i] != "":
				e.Field = d.paths[i] // a nested field: named by its path
			case d.keys != nil && strings.Contains(d.keys[i], "."):
				e.Field = d.keys[i]
			}
			return false, e
		}
	}
	return false, nil
}

// visit collects the values of a record's fields by column (d.vals).
func (d *JSON) visit(obj *fastjson.Object) {
	pos := 0
	obj.Visit(func(key []byte, val *fastjson.Value) {
		if pos == len(d.hints) {
			d.hints = append(d.hints, hint{col: -1})
		}
		h := &d.hints[pos]
		pos++
		if h.key == "" || h.key != string(key) {
			i, ok := d.index[string(key)]
			if !ok {
				h.key, h.col = "", -1
				if d.contract.Columns != "" && d.contract.Columns != DiscardValue && d.strayKey == "" &&
					val.Type() != fastjson.TypeNull && !isMetadata(string(key)) && !d.pathRoots[string(key)] {
					d.strayKey, d.strayVal = string(key), val
				}
				return
			}
			h.key, h.col = d.cols[i].name, i
		}
		d.vals[h.col] = val
	})
}

// isMetadata reports whether a field name is one of the record's metadata
// fields, which are no field of the message to govern.
func isMetadata(name string) bool {
	_, ok := batch.KafkaFields[name]
	return ok || name == FieldFilePath
}

// meta fills a metadata column from the record.
func (d *JSON) meta(c *column, rec *batch.Record, vec *batch.Vector) *Error {
	switch c.origin {
	case fromTopic:
		vec.AppendString(rec.Topic)
	case fromPartition:
		vec.AppendInt(int64(rec.Partition))
	case fromOffset:
		vec.AppendInt(rec.Offset)
	case fromTimestamp:
		if rec.Timestamp.IsZero() {
			return d.null(c, vec, "the record has no timestamp")
		}
		vec.AppendInt(rec.Timestamp.UnixMicro())
	case fromID, fromParentID, fromRootID:
		var v string
		switch c.origin {
		case fromID:
			v = d.linkID()
		case fromParentID:
			if d.link.up != nil {
				v = d.link.up.linkID()
			}
		case fromRootID:
			v = d.rootID()
		}
		if v == "" {
			return d.null(c, vec, "the row has no id")
		}
		vec.AppendString(v)
	case fromListIdx:
		if d.link.up == nil {
			return d.null(c, vec, "the row is in no list")
		}
		vec.AppendInt(d.link.idx)
	case fromKey:
		if rec.Key == nil {
			return d.null(c, vec, "the record has a null key")
		}
		if c.typ.Kind == batch.KindString {
			if !utf8.Valid(rec.Key) {
				return invalidUTF8(c.name, rec.Key)
			}
			vec.AppendString(d.arena.string(rec.Key))
		} else {
			vec.AppendBytes(d.arena.bytes(rec.Key))
		}
	}
	return nil
}

// null appends a null, or says why the column cannot take one.
func (d *JSON) null(c *column, vec *batch.Vector, why string) *Error {
	if c.nullable {
		vec.AppendNull()
		return nil
	}
	return &Error{Reason: batch.ReasonMissingField, Field: c.name, Msg: why + ", and the column is not nullable"}
}

// field decodes one JSON value (nil when the field is absent) into vec.
func (d *JSON) field(c *column, val *fastjson.Value, vec *batch.Vector) *Error {
	if val == nil {
		return d.null(c, vec, "missing")
	}
	t := val.Type()
	if t == fastjson.TypeNull {
		return d.null(c, vec, "null")
	}
	switch c.typ.Kind {
	case batch.KindString:
		if t != fastjson.TypeString {
			return d.mismatch(c, val, "is not a string")
		}
		b, _ := val.StringBytes()
		if !validUTF8(b) {
			return invalidUTF8(c.name, b)
		}
		vec.AppendString(d.arena.string(b))
	case batch.KindBool:
		switch t {
		case fastjson.TypeTrue:
			vec.AppendBool(true)
		case fastjson.TypeFalse:
			vec.AppendBool(false)
		default:
			return d.mismatch(c, val, "is not a bool")
		}
	case batch.KindInt64:
		text, e := d.number(c, val, "is not an int64")
		if e != nil {
			return e
		}
		x, ok, inRange := parseInt(text)
		if !ok {
			return d.mismatch(c, val, "is not an integer")
		}
		if !inRange {
			return d.mismatch(c, val, "is out of range for int64")
		}
		vec.AppendInt(x)
	case batch.KindFloat64:
		text, e := d.number(c, val, "is not a float64")
		if e != nil {
			return e
		}
		x, ok := parseFloat(text)
		if !ok {
			return d.mismatch(c, val, "is out of range for float64")
		}
		vec.AppendFloat(x)
	case batch.KindTimestamp:
		var us int64
		if t == fastjson.TypeString {
			b, _ := val.StringBytes()
			var ok bool
			if us, ok = parseTimestamp(b2s(b)); !ok {
				return d.mismatch(c, val, "is not an RFC 3339 timestamp")
			}
		} else {
			if d.infer {
				return d.mismatch(c, val, "is not an RFC 3339 timestamp (the column was inferred from strings)")
			}
			text, e := d.number(c, val, "is not a timestamp (an RFC 3339 string or epoch "+unitWord(c.unit)+")")
			if e != nil {
				return e
			}
			x, ok, inRange := parseInt(text)
			if !ok {
				return d.mismatch(c, val, "is not an integer number of epoch "+unitWord(c.unit))
			}
			if !inRange {
				return d.mismatch(c, val, "is out of range for a timestamp")
			}
			var why string
			if us, why = micros(x, c.unit); why != "" {
				return d.mismatch(c, val, why)
			}
		}
		vec.AppendInt(us)
	case batch.KindDate:
		if t != fastjson.TypeString {
			return d.mismatch(c, val, "is not a date (a YYYY-MM-DD string)")
		}
		b, _ := val.StringBytes()
		days, ok := parseDate(b2s(b))
		if !ok {
			return d.mismatch(c, val, "is not a date (YYYY-MM-DD)")
		}
		vec.AppendInt(days)
	case batch.KindDecimal:
		var text string
		if t == fastjson.TypeString {
			b, _ := val.StringBytes()
			text = trimSpace(b2s(b))
			if !isDecimalText(text) {
				return d.mismatch(c, val, "is not a "+c.typ.String())
			}
		} else {
			var e *Error
			if text, e = d.number(c, val, "is not a "+c.typ.String()); e != nil {
				return e
			}
		}
		x, err := parseDecimal(text, c.typ.Precision, c.typ.Scale)
		if err != nil {
			return &Error{Reason: batch.ReasonTypeMismatch, Field: c.name, Msg: err.Error()}
		}
		vec.AppendDecimal(x)
	case batch.KindBytes:
		if t != fastjson.TypeString {
			return d.mismatch(c, val, "is not a base64 string")
		}
		b, _ := val.StringBytes()
		x, ok := d.arena.base64(b)
		if !ok {
			return d.mismatch(c, val, "is not valid base64")
		}
		vec.AppendBytes(x)
	case batch.KindArray:
		return d.array(c, val, vec)
	}
	return nil
}

// array decodes a JSON list into an array column, checking every element
// as a value of the element type; on an error nothing of the row is kept
// and the error names the element (tags[3]).
func (d *JSON) array(c *column, val *fastjson.Value, vec *batch.Vector) *Error {
	if val.Type() != fastjson.TypeArray {
		return d.mismatch(c, val, "is not a JSON array, as "+c.typ.String()+" is")
	}
	items, _ := val.Array()
	elem := column{name: c.name, typ: c.typ.ElemType(), origin: c.origin, unit: c.unit}
	n := vec.Elems.Len()
	for j, item := range items {
		var e *Error
		if item.Type() == fastjson.TypeNull {
			e = &Error{Reason: batch.ReasonTypeMismatch, Msg: "null, and the elements of " + c.typ.String() + " are never null"}
		} else {
			e = d.field(&elem, item, vec.Elems)
		}
		if e != nil {
			vec.Elems.Truncate(n)
			e.Field = c.name + "[" + strconv.Itoa(j) + "]"
			return e
		}
	}
	vec.EndArray()
	return nil
}

// unitWord names a unit (perSecond) in messages.
func unitWord(per int64) string {
	switch per {
	case 1:
		return "seconds"
	case 1_000_000:
		return "microseconds"
	case 1_000_000_000:
		return "nanoseconds"
	}
	return "milliseconds"
}

// invalidUTF8 refuses a string value that is not UTF-8: stored as is, it
// would make the file or table unreadable to others (a bytes column keeps
// any bytes).
func invalidUTF8(field string, b []byte) *Error {
	return &Error{Reason: batch.ReasonInvalidUTF8, Field: field, Msg: fmt.Sprintf("%s is not valid UTF-8 (declare the column bytes to keep any bytes)", clip(strconv.QuoteToASCII(string(b))))}
}

// number returns the text of a JSON number value, a type mismatch (what
// says why) for any other JSON type, or undecodable for number text that is
// not valid JSON (the parser is lenient about numbers it does not use).
func (d *JSON) number(c *column, val *fastjson.Value, what string) (string, *Error) {
	if val.Type() != fastjson.TypeNumber {
		return "", d.mismatch(c, val, what)
	}
	d.num = val.MarshalTo(d.num[:0])
	text := b2s(d.num)
	if !isJSONNumber(text) {
		return "", &Error{Reason: batch.ReasonUndecodable, Field: c.name, Msg: "invalid JSON: " + clip(text) + " is not a number"}
	}
	return text, nil
}

func (d *JSON) mismatch(c *column, val *fastjson.Value, what string) *Error {
	return &Error{Reason: batch.ReasonTypeMismatch, Field: c.name, Msg: describe(val) + " " + what}
}

// describe renders a JSON value for an error message, shortened.
func describe(val *fastjson.Value) string {
	switch val.Type() {
	case fastjson.TypeString:
		b, _ := val.StringBytes()
		return strconv.Quote(clip(string(b)))
	case fastjson.TypeNumber:
		return clip(string(val.MarshalTo(nil)))
	case fastjson.TypeTrue:
		return "true"
	case fastjson.TypeFalse:
		return "false"
	case fastjson.TypeObject:
		return "a JSON object"
	case fastjson.TypeArray:
		return "a JSON array"
	}
	return "null"
}

// clip shortens s for a message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// b2s views b as a string without copying; the string must not outlive b's
// next change.
func b2s(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
