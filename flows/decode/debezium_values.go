package decode

import (
	"encoding/base64"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

// unit is how a Debezium field encodes a time, by its logical name.
type unit uint8

const (
	unitNone      unit = iota // no logical name: integers are epoch milliseconds
	unitMillis                // io.debezium.time.Timestamp, Connect's Timestamp
	unitMicros                // io.debezium.time.MicroTimestamp
	unitNanos                 // io.debezium.time.NanoTimestamp
	unitZoned                 // io.debezium.time.ZonedTimestamp: an RFC 3339 string
	unitDays                  // io.debezium.time.Date, Connect's Date
	unitTimeOfDay             // Time, MicroTime, NanoTime, ZonedTime: no date
)

var units = map[string]unit{
	"io.debezium.time.Timestamp":              unitMillis,
	"org.apache.kafka.connect.data.Timestamp": unitMillis,
	"io.debezium.time.MicroTimestamp":         unitMicros,
	"io.debezium.time.NanoTimestamp":          unitNanos,
	"io.debezium.time.ZonedTimestamp":         unitZoned,
	"io.debezium.time.IsoTimestamp":           unitZoned,
	"io.debezium.time.Date":                   unitDays,
	"org.apache.kafka.connect.data.Date":      unitDays,
	"io.debezium.time.Time":                   unitTimeOfDay,
	"io.debezium.time.MicroTime":              unitTimeOfDay,
	"io.debezium.time.NanoTime":               unitTimeOfDay,
	"io.debezium.time.ZonedTime":              unitTimeOfDay,
	"io.debezium.time.IsoTime":                unitTimeOfDay,
	"org.apache.kafka.connect.data.Time":      unitTimeOfDay,
}

// noInfo describes a field the schema part does not.
var noInfo fieldInfo

// fieldInfo is what the converter's schema part says of one field; the
// zero value is a field it does not describe.
type fieldInfo struct {
	set      bool // the schema part describes the field
	unit     unit
	bytes    bool // its type is bytes: a decimal in precise mode
	hasScale bool // parameters.scale is given
	badScale bool // parameters.scale is not a usable integer
	scale    int
}

// readSchema reads the schema part of an envelope: the fields of before,
// after and source.
func (d *Debezium) readSchema(schema *fastjson.Value) {
	for _, f := range schema.GetArray("fields") {
		switch b2s(f.GetStringBytes("field")) {
		case "before", "after":
			readStruct(f, d.dataIdx, d.dataInfo)
		case "source":
			readStruct(f, d.srcIdx, d.srcInfo)
		}
	}
}

// readStruct records in info what a struct schema says of the fields n
// names.
func readStruct(schema *fastjson.Value, n *names, info []fieldInfo) {
	for _, f := range schema.GetArray("fields") {
		if i, ok := n.index[b2s(f.GetStringBytes("field"))]; ok {
			info[i] = readField(f)
		}
	}
}

// readField reads one field schema: {"type": ..., "name": ...,
// "parameters": {"scale": "2"}}.
func readField(f *fastjson.Value) fieldInfo {
	fi := fieldInfo{set: true, bytes: b2s(f.GetStringBytes("type")) == "bytes"}
	fi.unit = units[b2s(f.GetStringBytes("name"))]
	if sc := f.Get("parameters", "scale"); sc != nil {
		fi.hasScale = true
		var text string
		switch sc.Type() {
		case fastjson.TypeString:
			b, _ := sc.StringBytes()
			text = b2s(b)
		case fastjson.TypeNumber:
			text = sc.String()
		}
		x, err := strconv.Atoi(text)
		if err != nil || x < -maxDecimalExponent || x > maxDecimalExponent {
			fi.badScale = true
		}
		fi.scale = x
	}
	return fi
}

// value decodes one field (nil when absent) into vec by the JSON rules and
// Debezium's encodings of times and decimals.
func (d *Debezium) value(c *column, val *fastjson.Value, fi *fieldInfo, vec *batch.Vector) *Error {
	if val == nil {
		return d.js.null(c, vec, "missing")
	}
	if val.Type() == fastjson.TypeNull {
		return d.js.null(c, vec, "null")
	}
	switch c.typ.Kind {
	case batch.KindTimestamp:
		return d.timestamp(c, val, fi, vec)
	case batch.KindDate:
		return d.date(c, val, fi, vec)
	case batch.KindDecimal:
		return d.decimal(c, val, fi, vec)
	}
	return d.js.field(c, val, vec)
}

// integer returns the exact int64 of a JSON number; what says what else
// the column would take.
func (d *Debezium) integer(c *column, val *fastjson.Value, what string) (int64, *Error) {
	text, e := d.js.number(c, val, what)
	if e != nil {
		return 0, e
	}
	x, ok, inRange := parseInt(text)
	if !ok {
		return 0, d.js.mismatch(c, val, "is not an integer")
	}
	if !inRange {
		return 0, d.js.mismatch(c, val, "is out of range for int64")
	}
	return x, nil
}

const (
	usPerDay = 86_400_000_000
	maxDays  = math.MaxInt64 / usPerDay
)

// The dates YYYY-MM-DD spans, in days since the epoch.
var minDate, maxDate = daysFromCivil(0, 1, 1), daysFromCivil(9999, 12, 31)

func (d *Debezium) timestamp(c *column, val *fastjson.Value, fi *fieldInfo, vec *batch.Vector) *Error {
	if val.Type() == fastjson.TypeString {
		b, _ := val.StringBytes()
		us, ok := parseTimestamp(b2s(b))
		if !ok {
			return d.js.mismatch(c, val, "is not an RFC 3339 timestamp")
		}
		vec.AppendInt(us)
		return nil
	}
	x, e := d.integer(c, val, "is not a timestamp (an RFC 3339 string or an epoch integer)")
	if e != nil {
		return e
	}
	var us int64
	var why string
	switch fi.unit {
	case unitMicros:
		us = x
	case unitNanos:
		us, why = micros(x, 1_000_000_000)
	case unitDays:
		if x > maxDays || x < -maxDays {
			return d.js.mismatch(c, val, "is out of range for a timestamp")
		}
		us = x * usPerDay
	case unitTimeOfDay:
		return d.js.mismatch(c, val, "is a time of day, not a timestamp")
	case unitMillis:
		us, why = micros(x, 1000)
	default: // no logical name (a schemaless envelope): the column's unit
		us, why = micros(x, c.unit)
	}
	if why != "" {
		return d.js.mismatch(c, val, why)
	}
	vec.AppendInt(us)
	return nil
}

func (d *Debezium) date(c *column, val *fastjson.Value, fi *fieldInfo, vec *batch.Vector) *Error {
	if val.Type() == fastjson.TypeString {
		b, _ := val.StringBytes()
		days, ok := parseDate(b2s(b))
		if !ok {
			return d.js.mismatch(c, val, "is not a date (YYYY-MM-DD)")
		}
		vec.AppendInt(days)
		return nil
	}
	x, e := d.integer(c, val, "is not a date (YYYY-MM-DD or integer days since the epoch)")
	if e != nil {
		return e
	}
	var per int64
	switch fi.unit {
	case unitMillis:
		per = usPerDay / 1000
	case unitMicros:
		per = usPerDay
	case unitNanos:
		per = usPerDay * 1000
	case unitTimeOfDay:
		return d.js.mismatch(c, val, "is a time of day, not a date")
	}
	if per > 0 {
		if x%per != 0 {
			return d.js.mismatch(c, val, "is a timestamp that is not a midnight, not a date")
		}
		x /= per
	}
	if x < minDate || x > maxDate {
		return d.js.mismatch(c, val, "is out of range for a date")
	}
	vec.AppendInt(x)
	return nil
}

func (d *Debezium) decimal(c *column, val *fastjson.Value, fi *fieldInfo, vec *batch.Vector) *Error {
	var x batch.Dec128
	switch val.Type() {
	case fastjson.TypeObject: // io.debezium.data.VariableScaleDecimal
		sv, bv := val.Get("scale"), val.Get("value")
		if sv == nil || bv == nil || bv.Type() != fastjson.TypeString || sv.Type() != fastjson.TypeNumber {
			return d.js.mismatch(c, val, "is not a "+c.typ.String()+" (an object needs a scale and a base64 value)")
		}
		scale, ok, inRange := parseInt(sv.String())
		if !ok || !inRange || scale < -maxDecimalExponent || scale > maxDecimalExponent {
			return d.js.mismatch(c, val, "has a scale that is not an integer in ±"+strconv.Itoa(maxDecimalExponent))
		}
		b, _ := bv.StringBytes()
		var e *Error
		if x, e = d.precise(c, val, b, int(scale)); e != nil {
			return e
		}
	case fastjson.TypeString:
		b, _ := val.StringBytes()
		text := trimSpace(b2s(b))
		if fi.bytes || (!fi.set && !isDecimalText(text)) {
			scale := c.typ.Scale
			if fi.hasScale {
				if fi.badScale {
					return d.js.mismatch(c, val, "has a schema scale that is not an integer in ±"+strconv.Itoa(maxDecimalExponent))
				}
				scale = fi.scale
			}
			var e *Error
			if x, e = d.precise(c, val, b, scale); e != nil {
				return e
			}
			break
		}
		if !isDecimalText(text) {
			return d.js.mismatch(c, val, "is not a "+c.typ.String())
		}
		var err error
		if x, err = parseDecimal(text, c.typ.Precision, c.typ.Scale); err != nil {
			return &Error{Reason: batch.ReasonTypeMismatch, Field: c.name, Msg: err.Error()}
		}
	default:
		text, e := d.js.number(c, val, "is not a "+c.typ.String())
		if e != nil {
			return e
		}
		var err error
		if x, err = parseDecimal(text, c.typ.Precision, c.typ.Scale); err != nil {
			return &Error{Reason: batch.ReasonTypeMismatch, Field: c.name, Msg: err.Error()}
		}
	}
	vec.AppendDecimal(x)
	return nil
}

// maxPreciseBytes bounds the unscaled bytes of a precise decimal: enough
// for any decimal(38) at any scale the schema may state.
const maxPreciseBytes = 256

// precise decodes a base64 unscaled value at scale from into the column's
// decimal type, exactly.
func (d *Debezium) precise(c *column, val *fastjson.Value, b64 []byte, from int) (batch.Dec128, *Error) {
	if len(b64) > 2*maxPreciseBytes {
		return batch.Dec128{}, d.js.mismatch(c, val, "has more than "+strconv.Itoa(maxPreciseBytes)+" unscaled bytes")
	}
	raw, ok := decodeBase64(d.scratch[:0], b64)
	if !ok {
		return batch.Dec128{}, d.js.mismatch(c, val, "is neither decimal text nor base64 unscaled bytes")
	}
	d.scratch = raw
	if len(raw) == 0 {
		return batch.Dec128{}, d.js.mismatch(c, val, "is empty, not an unscaled decimal")
	}
	p, s := c.typ.Precision, c.typ.Scale
	if len(raw) <= 8 && from == s {
		v := int64(int8(raw[0]))
		for _, b := range raw[1:] {
			v = v<<8 | int64(b)
		}
		if p < len(pow10) && (v >= pow10[p] || v <= -pow10[p]) {
			return batch.Dec128{}, d.js.mismatch(c, val, "is "+formatScaled(big.NewInt(v), from)+", which does not fit "+c.typ.String())
		}
		return batch.Dec128FromInt64(v), nil
	}
	if len(raw) > maxPreciseBytes {
		return batch.Dec128{}, d.js.mismatch(c, val, "has more than "+strconv.Itoa(maxPreciseBytes)+" unscaled bytes")
	}
	v := new(big.Int).SetBytes(raw)
	if raw[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	orig := v
	switch diff := s - from; {
	case diff > 0:
		v = new(big.Int).Mul(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(diff)), nil))
	case diff < 0:
		var r big.Int
		v, _ = new(big.Int).QuoRem(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-diff)), nil), &r)
		if r.Sign() != 0 {
			return batch.Dec128{}, d.js.mismatch(c, val, "is "+formatScaled(orig, from)+", which has more fractional digits than "+c.typ.String()+" takes")
		}
	}
	if new(big.Int).Abs(v).Cmp(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil)) >= 0 {
		return batch.Dec128{}, d.js.mismatch(c, val, "is "+formatScaled(orig, from)+", which does not fit "+c.typ.String())
	}
	return batch.Dec128FromBig(v), nil
}

// formatScaled renders the unscaled value v at scale s as decimal text,
// shortened for a message.
func formatScaled(v *big.Int, s int) string {
	digits := new(big.Int).Abs(v).String()
	switch {
	case s < 0:
		digits += strings.Repeat("0", -s)
	case s > 0:
		if len(digits) <= s {
			digits = strings.Repeat("0", s-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-s] + "." + digits[len(digits)-s:]
	}
	if v.Sign() < 0 {
		digits = "-" + digits
	}
	return clip(digits)
}

// decodeBase64 appends the bytes of b, base64 in the standard or URL
// alphabet, padded or not, to dst; ok is false when b is not base64.
func decodeBase64(dst, b []byte) ([]byte, bool) {
	enc := base64.StdEncoding
	for _, c := range b {
		if c == '-' || c == '_' {
			enc = base64.URLEncoding
			break
		}
	}
	if len(b)%4 != 0 {
		if enc == base64.URLEncoding {
			enc = base64.RawURLEncoding
		} else {
			enc = base64.RawStdEncoding
		}
	}
	n := enc.DecodedLen(len(b))
	if cap(dst) < n {
		dst = make([]byte, 0, n)
	}
	dst = dst[:n]
	m, err := enc.Decode(dst, b)
	if err != nil {
		return nil, false
	}
	return dst[:m], true
}

// floorDiv divides rounding toward negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
