package decode

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// The envelope fields a Debezium source may declare as columns.
const (
	FieldOp      = "_op"      // the envelope's op: c, r, u, d or t (string)
	FieldTsMs    = "_ts_ms"   // the envelope's ts_ms (int64, or timestamp from epoch milliseconds)
	SourcePrefix = "_source_" // _source_<field> reads the envelope's source.<field>, typed as declared
)

// ReasonUnsupportedOp is the dead-letter reason of a Debezium change the
// flow cannot apply: an op other than c, r, u, d, t and m, or a truncate on
// an SCD type 2 target.
const ReasonUnsupportedOp = "unsupported_op"

// dkind says where a Debezium column's value comes from.
type dkind uint8

const (
	dData   dkind = iota // before / after / the message key
	dOp                  // the envelope's op
	dTsMs                // the envelope's ts_ms
	dSource              // a field of the envelope's source
	dMeta                // a record metadata field (Kafka, _file_path)
)

type dcol struct {
	column
	kind dkind
	slot int  // dData: index in plan.data; dSource: index in plan.src
	key  bool // one of the flow's keys
}

// names is the lookup side of fields, shared by clones.
type names struct {
	index map[string]int
	names []string
}

func newNames(ns []string) *names {
	n := &names{index: make(map[string]int, len(ns)), names: ns}
	for i, s := range ns {
		n.index[s] = i
	}
	return n
}

// fields picks the values of named fields out of JSON objects. Like JSON's
// hints, it remembers the keys of the previous object by position, so that
// a string comparison usually replaces a map lookup.
type fields struct {
	*names
	hints []fieldHint
	vals  []*fastjson.Value // per name, its value in the last object picked
}

type fieldHint struct {
	key  string // the key seen last at this position; "" when none
	slot int    // its slot, or -1 when it names no field
}

func (n *names) fields() fields {
	return fields{names: n, vals: make([]*fastjson.Value, len(n.names))}
}

// maxHintKey bounds the keys fields remembers when they name no field, so
// that hostile messages cannot make it copy large keys.
const maxHintKey = 64

// pick sets vals from obj; the last of repeated keys wins.
func (f *fields) pick(obj *fastjson.Object) {
	clear(f.vals)
	pos := 0
	obj.Visit(func(key []byte, val *fastjson.Value) {
		if pos == len(f.hints) {
			f.hints = append(f.hints, fieldHint{slot: -1})
		}
		h := &f.hints[pos]
		pos++
		if h.key == "" || h.key != string(key) {
			i, ok := f.index[string(key)]
			switch {
			case ok:
				h.key, h.slot = f.names.names[i], i
			case len(key) <= maxHintKey:
				h.key, h.slot = string(key), -1
			default:
				h.key, h.slot = "", -1
			}
		}
		if h.slot >= 0 {
			f.vals[h.slot] = val
		}
	})
}

// The envelope fields read, as slots of plan.env.
const (
	envOp = iota
	envBefore
	envAfter
	envSource
	envTsMs
)

// dplan is what NewDebezium derives from the schema; clones share it.
type dplan struct {
	schema  batch.Schema
	cols    []dcol
	dataIdx *names // the data columns, by name
	srcIdx  *names // the source fields read, by name
	envIdx  *names // op, before, after, source, ts_ms
	scd2    bool
	// placeholder (SetUnavailable) marks a string or bytes value Debezium
	// did not capture; placeholder64 is its base64, as a bytes column has
	// it. Empty: none.
	placeholder, placeholder64 string
	// tombstones (SetTombstones) is what a message with a key and a null
	// value becomes.
	tombstones Tombstones
}

// Tombstones says what a message with a null value (a Kafka tombstone)
// becomes.
type Tombstones uint8

const (
	TombstoneSkip       Tombstones = iota // nothing
	TombstoneDelete                       // a row of its key, cdc.OpTombstone
	TombstoneDeadLetter                   // an undecodable record
)

// SetTombstones says what a tombstone becomes; by default it is skipped.
// Call it before Clone.
func (d *Debezium) SetTombstones(t Tombstones) { d.tombstones = t }

// Cell is a value of a decoded batch: its row and column.
type Cell struct{ Row, Column int }

// SetUnavailable makes a string or bytes value of an upsert equal to
// placeholder (Debezium's unavailable.value.placeholder: a PostgreSQL TOAST
// column an update left unchanged) a value the change does not carry: the
// row holds NULL (the zero value in a column that is not nullable) and
// Unavailable lists the cell. Call it before Clone.
func (d *Debezium) SetUnavailable(placeholder string) {
	d.placeholder, d.placeholder64 = placeholder, base64.StdEncoding.EncodeToString([]byte(placeholder))
}

// Unavailable returns the cells of the rows decoded since the last call
// that hold no value (SetUnavailable), and forgets them.
func (d *Debezium) Unavailable() []Cell {
	out := d.unavail
	d.unavail = nil
	return out
}

// Debezium decodes Debezium change events (the envelope as Kafka Connect's
// JsonConverter writes it, with or without its schema part) into a batch of
// a fixed schema and one operation per row. Not safe for concurrent use;
// make one per goroutine (Clone).
//
// The message value is {"schema": ..., "payload": {...}} or the bare
// payload {"op": ..., "before": ..., "after": ..., "source": ..., "ts_ms": ...}.
// By op:
//
//	c, r, u  an upsert of after
//	d        a delete: columns from before, or when before is null, the key
//	         columns from the message key (itself JSON, bare or wrapped in
//	         schema/payload; a bare scalar for a single key column)
//	t        a truncate on SCD type 1 (a row holding only the envelope and
//	         metadata columns); unsupported_op on SCD type 2
//	m        skipped
//
// A message whose value is null (a tombstone) is skipped, or as
// SetTombstones says: a cdc.OpTombstone row holding the key columns of
// the message key (as a delete without before has them), or a dead letter.
//
// A delete decodes key columns by the usual rules; a non-key column that is
// missing or null holds NULL when nullable and its type's zero value
// otherwise (the CDC engine reads only the keys and sequence of a delete).
// The columns _op, _ts_ms and _source_<field> read the envelope; the Kafka
// metadata fields read the record, as with JSON.
//
// Values follow the JSON decoder's rules, and Debezium's encodings besides,
// picked by the field's logical name in the schema part when there is one:
//
//	timestamp  integer epoch milliseconds (io.debezium.time.Timestamp, and
//	           without a schema), microseconds (MicroTimestamp), nanoseconds
//	           (NanoTimestamp, floored to microseconds) or days (Date); an RFC
//	           3339 string (ZonedTimestamp)
//	date       YYYY-MM-DD or integer days since the epoch; an epoch
//	           timestamp of a midnight
//	decimal    decimal text (decimal.handling.mode=string), a JSON number
//	           parsed from its text (double), or base64 big-endian two's
//	           complement unscaled bytes (precise) at the scale of the
//	           schema's parameters.scale, else the column's; rescaled
//	           exactly or a type_mismatch. Without a schema part, a string
//	           that is decimal text is read as such, any other as precise.
//	           A {"scale": s, "value": base64} object
//	           (io.debezium.data.VariableScaleDecimal) is precise at scale s.
//
// Strings and bytes share arrays as with JSON (see there).
type Debezium struct {
	*dplan
	js        *JSON // reused for its value rules, arena and metadata
	parser    fastjson.Parser
	keyParser fastjson.Parser
	env       fields
	data      fields // before / after
	keyData   fields // the message key
	src       fields
	dataInfo  []fieldInfo // per data column, what the schema part says
	srcInfo   []fieldInfo // per source field
	scratch   []byte      // decoded precise bytes
	unavail   []Cell      // SetUnavailable: the cells decoded without a value
}

// NewDebezium returns a decoder for the schema s: the source's columns,
// keys the flow's keys (columns of s) and scd2 whether the target is SCD
// type 2. s may include _op (string), _ts_ms (int64 or timestamp),
// _source_<field> columns of any type, and the metadata fields NewJSON
// takes; every other column is a column of the captured table.
func NewDebezium(s batch.Schema, keys []string, scd2 bool, units ...Units) (*Debezium, error) {
	js, err := NewJSON(s, units...)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("decode: debezium needs the flow's keys")
	}
	isKey := make(map[string]bool, len(keys))
	for _, k := range keys {
		if s.Index(k) < 0 {
			return nil, fmt.Errorf("decode: key %q is not a column", k)
		}
		if isKey[k] {
			return nil, fmt.Errorf("decode: key %q named twice", k)
		}
		isKey[k] = true
	}
	p := &dplan{schema: s, cols: make([]dcol, len(s.Columns)), scd2: scd2,
		envIdx: newNames([]string{envOp: "op", envBefore: "before", envAfter: "after", envSource: "source", envTsMs: "ts_ms"})}
	var dataNames, srcNames []string
	for i, c := range js.cols {
		dc := dcol{column: c, key: isKey[c.name]}
		switch {
		case c.origin != fromJSON:
			dc.kind = dMeta
		case c.name == FieldOp:
			if c.typ != batch.String {
				return nil, fmt.Errorf("decode: envelope field %s is string, declared %v", c.name, c.typ)
			}
			dc.kind = dOp
		case c.name == FieldTsMs:
			if c.typ != batch.Int64 && c.typ != batch.Timestamp {
				return nil, fmt.Errorf("decode: envelope field %s is int64 or timestamp, declared %v", c.name, c.typ)
			}
			dc.kind = dTsMs
		case strings.HasPrefix(c.name, SourcePrefix):
			if c.name == SourcePrefix {
				return nil, fmt.Errorf("decode: column %q names no source field", c.name)
			}
			dc.kind, dc.slot = dSource, len(srcNames)
			srcNames = append(srcNames, c.name[len(SourcePrefix):])
		default:
			dc.kind, dc.slot = dData, len(dataNames)
			dataNames = append(dataNames, c.name)
		}
		p.cols[i] = dc
	}
	p.dataIdx, p.srcIdx = newNames(dataNames), newNames(srcNames)
	return p.decoder(js), nil
}

func (p *dplan) decoder(js *JSON) *Debezium {
	return &Debezium{
		dplan:    p,
		js:       js,
		env:      p.envIdx.fields(),
		data:     p.dataIdx.fields(),
		keyData:  p.dataIdx.fields(),
		src:      p.srcIdx.fields(),
		dataInfo: make([]fieldInfo, len(p.dataIdx.names)),
		srcInfo:  make([]fieldInfo, len(p.srcIdx.names)),
	}
}

// Clone returns a decoder of the same schema with its own buffers, for use
// on another goroutine.
func (d *Debezium) Clone() *Debezium { return d.decoder(d.js.Clone()) }

// Schema returns the schema of the batches the decoder fills.
func (d *Debezium) Schema() batch.Schema { return d.schema }

// DecodeAll decodes recs into out, whose schema must be d.Schema(). For each
// row it appends, it appends the row's operation to ops and the index in
// recs of the record it came from to from. A skipped record (op m, a null
// value) appends nothing; a record that fails appends a dead letter to dls
// (Source, Position, Reason, Error and Payload set; the caller fills
// Pipeline, Flow, Target and At) with the reason undecodable,
// missing_field, type_mismatch or unsupported_op.
func (d *Debezium) DecodeAll(recs []batch.Record, out *batch.Batch, ops []cdc.Op, from []int, dls []batch.DeadLetter) ([]cdc.Op, []int, []batch.DeadLetter) {
	d.check(out)
	for i := range recs {
		rec := &recs[i]
		op, ok, err := d.decode(rec, out)
		switch {
		case err != nil:
			dls = append(dls, batch.DeadLetter{
				Source:   rec.Topic,
				Position: rec.Position(),
				Reason:   err.Reason,
				Error:    err.Error(),
				Payload:  rec.Payload(),
			})
		case ok:
			ops = append(ops, op)
			from = append(from, i)
		}
	}
	return ops, from, dls
}

// check panics when out does not have the decoder's column types.
func (d *Debezium) check(out *batch.Batch) {
	if len(out.Vectors) != len(d.cols) {
		panic(fmt.Sprintf("decode: batch has %d vectors for a schema of %d columns", len(out.Vectors), len(d.cols)))
	}
	for i, v := range out.Vectors {
		if v.Type != d.cols[i].typ {
			panic(fmt.Sprintf("decode: batch column %d holds %v, the schema says %v", i, v.Type, d.cols[i].typ))
		}
	}
}

// rowMode says where the data columns of a row come from.
type rowMode uint8

const (
	modeAfter     rowMode = iota // an upsert: every column from after
	modeBefore                   // a delete: keys from before, the rest best effort
	modeKey                      // a delete without before: keys from the message key
	modeTruncate                 // no data columns
	modeTombstone                // keys from the message key, no envelope
)

func undecodable(msg string) *Error { return &Error{Reason: batch.ReasonUndecodable, Msg: msg} }

// decode appends rec's row to out and returns its operation; ok is false
// for a record that is skipped. On error out is left as it was.
func (d *Debezium) decode(rec *batch.Record, out *batch.Batch) (op cdc.Op, ok bool, e *Error) {
	if rec.Value == nil {
		switch d.tombstones {
		case TombstoneDelete:
			if rec.Key == nil {
				return 0, false, &Error{Reason: batch.ReasonMissingField, Msg: "the message is a tombstone (null value) without a message key to name the key it deletes"}
			}
			clear(d.dataInfo)
			if e := d.pickKey(rec); e != nil {
				return 0, false, e
			}
			if e := d.fill(rec, out, modeTombstone, "d"); e != nil {
				return 0, false, e
			}
			return cdc.OpTombstone, true, nil
		case TombstoneDeadLetter:
			return 0, false, undecodable("the message is a tombstone (null value)")
		}
		return 0, false, nil
	}
	v, err := d.parser.ParseBytes(rec.Value)
	if err != nil {
		return 0, false, undecodable("invalid JSON: " + strings.TrimPrefix(err.Error(), "cannot parse JSON: "))
	}
	payload, schema, skip, e := unwrap(v, "message")
	if e != nil || skip {
		return 0, false, e
	}
	d.env.pick(payload)
	opv := d.env.vals[envOp]
	if opv == nil || opv.Type() == fastjson.TypeNull {
		return 0, false, &Error{Reason: batch.ReasonMissingField, Field: "op", Msg: "missing: the message is not a Debezium change event"}
	}
	if opv.Type() != fastjson.TypeString {
		return 0, false, &Error{Reason: batch.ReasonTypeMismatch, Field: "op", Msg: describe(opv) + " is not a string"}
	}
	opb, _ := opv.StringBytes()
	var opName string
	var mode rowMode
	switch b2s(opb) {
	case "c":
		opName, op, mode = "c", cdc.OpUpsert, modeAfter
	case "r":
		opName, op, mode = "r", cdc.OpUpsert, modeAfter
	case "u":
		opName, op, mode = "u", cdc.OpUpsert, modeAfter
	case "d":
		opName, op, mode = "d", cdc.OpDelete, modeBefore
	case "t":
		if d.scd2 {
			return 0, false, &Error{Reason: ReasonUnsupportedOp, Field: "op", Msg: `"t" (a truncate) cannot apply to an SCD type 2 target`}
		}
		opName, op, mode = "t", cdc.OpTruncate, modeTruncate
	case "m":
		return 0, false, nil
	default:
		return 0, false, &Error{Reason: ReasonUnsupportedOp, Field: "op", Msg: describe(opv) + " is not one of c, r, u, d, t, m"}
	}

	clear(d.dataInfo)
	clear(d.srcInfo)
	if schema != nil {
		d.readSchema(schema)
	}
	if e := d.pickObject(&d.src, d.env.vals[envSource], "source", len(d.srcIdx.names) > 0); e != nil {
		return 0, false, e
	}
	switch mode {
	case modeAfter:
		after := d.env.vals[envAfter]
		if after == nil || after.Type() == fastjson.TypeNull {
			return 0, false, &Error{Reason: batch.ReasonMissingField, Field: "after", Msg: "missing: op " + strconv.Quote(opName) + " needs the row after the change"}
		}
		if e := d.pickObject(&d.data, after, "after", true); e != nil {
			return 0, false, e
		}
	case modeBefore:
		before := d.env.vals[envBefore]
		if before == nil || before.Type() == fastjson.TypeNull {
			mode = modeKey
			if e := d.pickKey(rec); e != nil {
				return 0, false, e
			}
		} else if e := d.pickObject(&d.data, before, "before", true); e != nil {
			return 0, false, e
		}
	}
	if e := d.fill(rec, out, mode, opName); e != nil {
		return 0, false, e
	}
	return op, true, nil
}

// unwrap returns the payload object of a JSON value that is either the
// payload or {"schema": ..., "payload": ...}, and the schema part when
// there is one. skip is set for a null value or payload.
func unwrap(v *fastjson.Value, what string) (payload *fastjson.Object, schema *fastjson.Value, skip bool, e *Error) {
	if v.Type() == fastjson.TypeNull {
		return nil, nil, true, nil
	}
	obj, err := v.Object()
	if err != nil {
		return nil, nil, false, undecodable("the " + what + " is a JSON " + v.Type().String() + ", not an object")
	}
	if obj.Len() != 2 {
		return obj, nil, false, nil
	}
	s, p := obj.Get("schema"), obj.Get("payload")
	if s == nil || p == nil {
		return obj, nil, false, nil
	}
	if p.Type() == fastjson.TypeNull {
		return nil, nil, true, nil
	}
	if obj, err = p.Object(); err != nil {
		return nil, nil, false, undecodable("the " + what + "'s payload is a JSON " + p.Type().String() + ", not an object")
	}
	if s.Type() == fastjson.TypeNull {
		s = nil
	}
	return obj, s, false, nil
}

// pickObject picks f's fields out of v, the envelope field named what. A
// missing or null v picks nothing; any other non-object is a type_mismatch
// when needed.
func (d *Debezium) pickObject(f *fields, v *fastjson.Value, what string, needed bool) *Error {
	if v == nil || v.Type() == fastjson.TypeNull {
		clear(f.vals)
		return nil
	}
	obj, err := v.Object()
	if err != nil {
		if needed {
			return &Error{Reason: batch.ReasonTypeMismatch, Field: what, Msg: describe(v) + " is not an object"}
		}
		clear(f.vals)
		return nil
	}
	f.pick(obj)
	return nil
}

// pickKey picks the key columns of a delete without before out of the
// message key: a JSON object, bare or wrapped in schema/payload, or a
// scalar when the flow has one key column.
func (d *Debezium) pickKey(rec *batch.Record) *Error {
	if rec.Key == nil {
		return &Error{Reason: batch.ReasonMissingField, Field: "before", Msg: "null, and the message has no key to take the deleted key from"}
	}
	v, err := d.keyParser.ParseBytes(rec.Key)
	if err != nil {
		return undecodable("message key: invalid JSON: " + strings.TrimPrefix(err.Error(), "cannot parse JSON: "))
	}
	var schema *fastjson.Value
	if obj, err := v.Object(); err == nil && obj.Len() == 2 {
		if s, p := obj.Get("schema"), obj.Get("payload"); s != nil && p != nil {
			v = p
			if s.Type() != fastjson.TypeNull {
				schema = s
			}
		}
	}
	switch t := v.Type(); t {
	case fastjson.TypeNull:
		return &Error{Reason: batch.ReasonMissingField, Field: "before", Msg: "null, and the message key is null"}
	case fastjson.TypeObject:
		if schema != nil {
			readStruct(schema, d.dataIdx, d.dataInfo)
		}
		obj, _ := v.Object()
		d.keyData.pick(obj)
	default:
		slot, n := -1, 0
		for i := range d.cols {
			if c := &d.cols[i]; c.key && c.kind == dData {
				slot, n = c.slot, n+1
			}
		}
		if n != 1 {
			return undecodable("the message key is a JSON " + t.String() + ", not an object")
		}
		clear(d.keyData.vals)
		d.keyData.vals[slot] = v
		if schema != nil {
			d.dataInfo[slot] = readField(schema)
		}
	}
	return nil
}

// fill appends the row of one change to out.
func (d *Debezium) fill(rec *batch.Record, out *batch.Batch, mode rowMode, opName string) *Error {
	n := out.Len()
	for i := range d.cols {
		c := &d.cols[i]
		vec := out.Vectors[i]
		var e *Error
		switch c.kind {
		case dMeta:
			e = d.js.meta(&c.column, rec, vec)
		case dOp:
			vec.AppendString(opName)
		case dTsMs, dSource:
			if mode == modeTombstone {
				appendZero(&c.column, vec)
			} else if c.kind == dTsMs {
				e = d.value(&c.column, d.env.vals[envTsMs], &noInfo, vec)
			} else {
				e = d.value(&c.column, d.src.vals[c.slot], &d.srcInfo[c.slot], vec)
			}
		case dData:
			if mode == modeAfter && d.unavailable(c, vec) {
				d.unavail = append(d.unavail, Cell{Row: n, Column: i})
				break
			}
			e = d.dataValue(c, mode, vec)
		}
		if e != nil {
			for _, v := range out.Vectors[:i] {
				v.Truncate(n)
			}
			for len(d.unavail) > 0 && d.unavail[len(d.unavail)-1].Row == n {
				d.unavail = d.unavail[:len(d.unavail)-1]
			}
			return e
		}
	}
	return nil
}

// unavailable appends a placeholder for the value of data column c when
// the change carries the placeholder in its stead (SetUnavailable).
func (d *Debezium) unavailable(c *dcol, vec *batch.Vector) bool {
	val := d.data.vals[c.slot]
	if c.typ.Kind == batch.KindArray && val != nil && val.Type() == fastjson.TypeArray {
		// An array column's placeholder is a list of the placeholder alone
		// (of text elements; of numbers, Debezium's own number placeholder
		// is indistinguishable from data and loads as it is).
		if items, _ := val.Array(); len(items) == 1 && (c.typ.Elem == batch.KindString || c.typ.Elem == batch.KindBytes) {
			val = items[0]
		}
	}
	if d.placeholder == "" || c.typ.Scalar().Kind != batch.KindString && c.typ.Scalar().Kind != batch.KindBytes {
		return false
	}
	if val == nil || val.Type() != fastjson.TypeString {
		return false
	}
	want := d.placeholder
	if c.typ.Scalar().Kind == batch.KindBytes {
		want = d.placeholder64
	}
	if b, _ := val.StringBytes(); string(b) != want {
		return false
	}
	appendZero(&c.column, vec)
	return true
}

func (d *Debezium) dataValue(c *dcol, mode rowMode, vec *batch.Vector) *Error {
	info := &d.dataInfo[c.slot]
	switch mode {
	case modeAfter:
		return d.value(&c.column, d.data.vals[c.slot], info, vec)
	case modeBefore:
		val := d.data.vals[c.slot]
		if c.key || (val != nil && val.Type() != fastjson.TypeNull) {
			return d.value(&c.column, val, info, vec)
		}
	case modeKey, modeTombstone:
		if c.key {
			val := d.keyData.vals[c.slot]
			if val == nil || val.Type() == fastjson.TypeNull {
				return d.js.null(&c.column, vec, "missing from the message key")
			}
			return d.value(&c.column, val, info, vec)
		}
	}
	appendZero(&c.column, vec)
	return nil
}

// appendZero appends NULL to a nullable column, else the zero value of its
// type.
func appendZero(c *column, vec *batch.Vector) {
	if c.nullable {
		vec.AppendNull()
		return
	}
	switch c.typ.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		vec.AppendInt(0)
	case batch.KindFloat64:
		vec.AppendFloat(0)
	case batch.KindBool:
		vec.AppendBool(false)
	case batch.KindString:
		vec.AppendString("")
	case batch.KindBytes:
		vec.AppendBytes([]byte{})
	case batch.KindDecimal:
		vec.AppendDecimal(batch.Dec128{})
	case batch.KindArray:
		vec.EndArray()
	}
}
