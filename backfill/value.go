package backfill

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// HiveNull is the text Hive and Spark write for a NULL partition value; an
// empty value (`year=`) is NULL too.
const HiveNull = "__HIVE_DEFAULT_PARTITION__"

// Value is one typed value read from path text: a Hive segment or a snapshot
// version. Values of one type compare with Compare.
type Value struct {
	Type  batch.Type
	Null  bool
	Int   int64        // int64; date: days since the epoch; timestamp: µs since the epoch
	Float float64      // float64
	Bool  bool         // bool
	Str   string       // string; bytes (the raw text)
	Dec   batch.Dec128 // decimal: the unscaled value
}

// ParseValue parses text as a value of type t: int64 as a base-10 integer,
// float64 as a Go float, bool as true or false, date as YYYY-MM-DD, timestamp
// as RFC 3339 (truncated to microseconds), decimal(P,S) exactly, string and
// bytes as the text itself.
func ParseValue(text string, t batch.Type) (Value, error) {
	v := Value{Type: t}
	switch t.Kind {
	case batch.KindInt64:
		x, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return v, fmt.Errorf("%q is not an int64", text)
		}
		v.Int = x
	case batch.KindFloat64:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return v, fmt.Errorf("%q is not a float64", text)
		}
		v.Float = x
	case batch.KindBool:
		switch text {
		case "true":
			v.Bool = true
		case "false":
		default:
			return v, fmt.Errorf("%q is not a bool (true or false)", text)
		}
	case batch.KindDate:
		d, ok := parseDate(text)
		if !ok {
			return v, fmt.Errorf("%q is not a date (YYYY-MM-DD)", text)
		}
		v.Int = d
	case batch.KindTimestamp:
		ts, ok := parseTimestamp(text)
		if !ok {
			return v, fmt.Errorf("%q is not an RFC 3339 timestamp", text)
		}
		v.Int = ts
	case batch.KindDecimal:
		d, err := batch.ParseDecimal(text, t.Precision, t.Scale)
		if err != nil {
			return v, err
		}
		v.Dec = d
	case batch.KindString, batch.KindBytes:
		v.Str = text
	default:
		return v, fmt.Errorf("invalid type %v", t)
	}
	return v, nil
}

// ValueAt returns row i of vec as a Value of vec's type.
func ValueAt(vec *batch.Vector, i int) Value {
	v := Value{Type: vec.Type}
	if vec.IsNull(i) {
		v.Null = true
		return v
	}
	switch vec.Type.Kind {
	case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
		v.Int = vec.Ints[i]
	case batch.KindFloat64:
		v.Float = vec.Floats[i]
	case batch.KindBool:
		v.Bool = vec.Bools[i]
	case batch.KindDecimal:
		v.Dec = vec.Decs[i]
	case batch.KindString:
		v.Str = vec.Strs[i]
	case batch.KindBytes:
		v.Str = string(vec.Bytes[i])
	}
	return v
}

// NullValue returns the NULL of type t.
func NullValue(t batch.Type) Value { return Value{Type: t, Null: true} }

// Compare orders two values of one type: -1, 0 or +1. NULL sorts first;
// strings and bytes compare bytewise.
func (v Value) Compare(o Value) int {
	switch {
	case v.Null && o.Null:
		return 0
	case v.Null:
		return -1
	case o.Null:
		return 1
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
		return cmp3(v.Int < o.Int, v.Int > o.Int)
	case batch.KindFloat64:
		return cmp3(v.Float < o.Float, v.Float > o.Float)
	case batch.KindBool:
		return cmp3(!v.Bool && o.Bool, v.Bool && !o.Bool)
	case batch.KindDecimal:
		return v.Dec.Cmp(o.Dec)
	}
	return strings.Compare(v.Str, o.Str)
}

func cmp3(less, more bool) int {
	switch {
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}

// String renders the value as the spec spells it: dates YYYY-MM-DD,
// timestamps RFC 3339 in UTC, decimals exactly, NULL as "NULL".
func (v Value) String() string {
	if v.Null {
		return "NULL"
	}
	switch v.Type.Kind {
	case batch.KindInt64:
		return strconv.FormatInt(v.Int, 10)
	case batch.KindDate:
		return batch.DateValue(v.Int).String()
	case batch.KindTimestamp:
		return time.UnixMicro(v.Int).UTC().Format(time.RFC3339Nano)
	case batch.KindFloat64:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case batch.KindBool:
		return strconv.FormatBool(v.Bool)
	case batch.KindDecimal:
		return batch.FormatDecimal(v.Dec, v.Type.Scale)
	}
	return v.Str
}

// AppendTo appends the value n times to vec, whose type must be v.Type.
func (v Value) AppendTo(vec *batch.Vector, n int) {
	if v.Null {
		for range n {
			vec.AppendNull()
		}
		return
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
		for range n {
			vec.AppendInt(v.Int)
		}
	case batch.KindFloat64:
		for range n {
			vec.AppendFloat(v.Float)
		}
	case batch.KindBool:
		for range n {
			vec.AppendBool(v.Bool)
		}
	case batch.KindDecimal:
		for range n {
			vec.AppendDecimal(v.Dec)
		}
	case batch.KindString:
		for range n {
			vec.AppendString(v.Str)
		}
	case batch.KindBytes:
		b := []byte(v.Str)
		for range n {
			vec.AppendBytes(b)
		}
	}
}

// inferType returns the type every text parses as, trying the candidates in
// order; string when none fits all (or there are no texts).
func inferType(texts []string, candidates ...batch.Type) batch.Type {
	for _, t := range candidates {
		ok := len(texts) > 0
		for _, s := range texts {
			if !fits(s, t) {
				ok = false
				break
			}
		}
		if ok {
			return t
		}
	}
	return batch.String
}

func fits(s string, t batch.Type) bool {
	switch t.Kind {
	case batch.KindInt64:
		_, err := strconv.ParseInt(s, 10, 64)
		return err == nil
	case batch.KindDate:
		_, ok := parseDate(s)
		return ok
	case batch.KindTimestamp:
		_, ok := parseTimestamp(s)
		return ok
	}
	return true
}

// parseDate parses exactly YYYY-MM-DD into days since the epoch.
func parseDate(s string) (int64, bool) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return 0, false
	}
	for i, c := range []byte(s) {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return 0, false
		}
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, false
	}
	return int64(batch.DateFromTime(t)), true
}

// parseTimestamp parses RFC 3339 (with or without a fraction) into
// microseconds since the epoch, truncating finer digits.
func parseTimestamp(s string) (int64, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, false
	}
	return t.UnixMicro(), true
}
