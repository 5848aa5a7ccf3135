package decode

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// The formats of a message key a tombstone names its key by.
const (
	// KeyJSON is a JSON object with a field per key column (bare or
	// wrapped in schema/payload, as Kafka Connect's JsonConverter writes
	// Debezium's keys), or a JSON scalar when the flow has one key column.
	KeyJSON = "json"
	// KeyString is the text of the flow's one key column, parsed as a JSON
	// value of the column's type would be (a string column takes the text
	// as it is).
	KeyString = "string"
)

// DecodeTombstone appends the row of a tombstone, a record without a value
// whose message key names the key it deletes, to out, whose schema must be
// d.Schema(): keys (columns of the schema) from the message key read in
// format (KeyJSON or KeyString), the Kafka metadata fields from the record,
// every other column NULL, or its type's zero value when it is not
// nullable (a tombstone is read for its key only). A key column that is a
// metadata field (_kafka_key, _kafka_partition, ...) is read from the
// record, as for any message; one with a path is read from a message key
// object by its path, else by its name. It returns a *Error and leaves out
// as it was when the key does not decode.
func (d *JSON) DecodeTombstone(rec *batch.Record, out *batch.Batch, keys []string, format string) *Error {
	d.check(out)
	if rec.Key == nil {
		return &Error{Reason: batch.ReasonMissingField, Msg: "the message is a tombstone (null value) without a message key to name the key it deletes"}
	}
	cols := make([]int, len(keys)) // per key, its column
	single, fromMsg := -1, 0       // the key columns read from the message key
	for j, k := range keys {
		i := d.schema.Index(k)
		if i < 0 {
			return &Error{Reason: batch.ReasonMissingField, Field: k, Msg: "a key column the source does not have"}
		}
		cols[j] = i
		if d.cols[i].origin == fromJSON {
			single, fromMsg = j, fromMsg+1
		}
	}
	if fromMsg != 1 {
		single = -1
	}
	vals := make([]*fastjson.Value, len(keys)) // per key read from the message key, its value
	byPath := make([]bool, len(keys))          // whether vals found it by its column's path
	var ar fastjson.Arena
	switch {
	case fromMsg == 0:
		// Every key column is filled from the record: the message key is
		// not parsed.
	case format == KeyString:
		if single < 0 {
			return undecodable("the message key is text (key_format string), which names one key column, and the flow has several")
		}
		c := &d.cols[cols[single]]
		if c.typ.Kind != batch.KindBytes && !utf8.Valid(rec.Key) {
			return invalidUTF8("the message key", rec.Key)
		}
		switch c.typ.Kind {
		case batch.KindString, batch.KindBytes:
			vals[single] = ar.NewStringBytes(rec.Key)
		default:
			v, err := d.parser.ParseBytes(rec.Key)
			if err != nil || v.Type() == fastjson.TypeObject || v.Type() == fastjson.TypeArray {
				v = ar.NewStringBytes(rec.Key)
			}
			vals[single] = v
		}
	default:
		v, err := d.parser.ParseBytes(rec.Key)
		if err != nil {
			return undecodable("message key: invalid JSON: " + strings.TrimPrefix(err.Error(), "cannot parse JSON: ") + " (a key that is plain text needs key_format: string)")
		}
		if obj, err := v.Object(); err == nil && obj.Len() == 2 {
			if s, p := obj.Get("schema"), obj.Get("payload"); s != nil && p != nil {
				v = p
			}
		}
		switch t := v.Type(); t {
		case fastjson.TypeObject:
			for j, i := range cols {
				if d.cols[i].origin != fromJSON {
					continue
				}
				if d.segments != nil && d.segments[i] != nil {
					if vals[j] = v.Get(d.segments[i]...); vals[j] != nil {
						byPath[j] = true
						continue
					}
				}
				if vals[j] = v.Get(keys[j]); vals[j] == nil && d.segments != nil && d.segments[i] != nil {
					byPath[j] = true // missing: named by its path
				}
			}
		case fastjson.TypeNull:
			return &Error{Reason: batch.ReasonMissingField, Msg: "the message is a tombstone (null value) and its message key is null"}
		default:
			if single < 0 {
				return undecodable("the message key is a JSON " + t.String() + ", not an object with the flow's key columns")
			}
			vals[single] = v
		}
	}
	n := out.Len()
	for i := range d.cols {
		c := &d.cols[i]
		vec := out.Vectors[i]
		var e *Error
		key := slices.Index(cols, i)
		switch {
		case key >= 0 && c.origin == fromJSON && format == KeyString && c.typ.Kind == batch.KindBytes:
			vec.AppendBytes(d.arena.bytes(rec.Key))
		case key >= 0 && c.origin == fromJSON:
			if e = d.field(c, vals[key], vec); e != nil {
				if e.Field == c.name && byPath[key] {
					e.Field = d.paths[i]
				}
				e = &Error{Reason: e.Reason, Msg: "in the message key, " + e.Error()}
			}
		case c.origin == fromJSON, c.origin >= fromID:
			appendZero(c, vec)
		default:
			e = d.meta(c, rec, vec)
		}
		if e != nil {
			out.Truncate(n)
			return e
		}
	}
	return nil
}
