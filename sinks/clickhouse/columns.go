package clickhouse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/flows/batch"
)

const (
	secondsPerDay = 86400
	// The range of ClickHouse's 1970-based types: DateTime is a UInt32 of
	// seconds, Date a UInt16 of days.
	maxDateTime = math.MaxUint32
	maxDate     = math.MaxUint16
)

// Day numbers since 1970-01-01 bounding DateTime64 and Date32: 1900-01-01 to
// 2299-12-31 since ClickHouse 22.8, 1925-01-01 to 2283-11-11 before.
var (
	wideMinDay   = int64(batch.DateFromTime(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
	wideMaxDay   = int64(batch.DateFromTime(time.Date(2299, 12, 31, 0, 0, 0, 0, time.UTC)))
	narrowMinDay = int64(batch.DateFromTime(time.Date(1925, 1, 1, 0, 0, 0, 0, time.UTC)))
	narrowMaxDay = int64(batch.DateFromTime(time.Date(2283, 11, 11, 0, 0, 0, 0, time.UTC)))
)

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// dayRange returns the days a column's storage holds (inclusive).
func (f features) dayRange(st storage) (lo, hi int64) {
	switch st {
	case storeDate:
		return 0, maxDate
	case storeDateTime:
		return 0, maxDateTime / secondsPerDay
	}
	if f.wideDates {
		return wideMinDay, wideMaxDay
	}
	return narrowMinDay, narrowMaxDay
}

// values converts a vector into the slice clickhouse-go appends to a column
// stored as col, checking that every value fits. Nullable columns get
// pointer slices (nil for NULL) pointing into the vector.
func (f features) values(table string, col column, v *batch.Vector) (any, error) {
	if col.Type.Kind == batch.KindArray {
		return f.arrays(table, col, v)
	}
	n := v.Len()
	null := func(i int) bool { return v.IsNull(i) }
	switch col.storage {
	case storeString:
		if v.Type.Kind == batch.KindBytes {
			if !col.Nullable {
				return v.Bytes, nil
			}
			out := make([]*string, n)
			for i := range n {
				if !null(i) {
					s := string(v.Bytes[i])
					out[i] = &s
				}
			}
			return out, nil
		}
		return ptrs(col.Nullable, v.Strs, null), nil
	case storeInt64, storeMicros:
		return ptrs(col.Nullable, v.Ints, null), nil
	case storeFloat64:
		return ptrs(col.Nullable, v.Floats, null), nil
	case storeUInt8:
		u := make([]uint8, n)
		for i, b := range v.Bools {
			if b {
				u[i] = 1
			}
		}
		return ptrs(col.Nullable, u, null), nil
	case storeDateTime, storeDateTime64:
		ts := make([]time.Time, n)
		lo, hi := f.dayRange(col.storage)
		for i, us := range v.Ints {
			if null(i) {
				continue
			}
			sec := floorDiv(us, 1_000_000)
			if col.storage == storeDateTime {
				// Whole seconds: a fraction is refused in a target (a table
				// created by sluice on such a server stores microseconds);
				// sluice's own tables keep the second.
				if sec < 0 || sec > maxDateTime || us%1_000_000 != 0 && !batch.IsOwnTable(table) {
					return nil, rangeErr(table, col, i, time.UnixMicro(us).UTC().Format(time.RFC3339Nano), "1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z, whole seconds (a refresh of the table's flows creates it anew with microseconds)")
				}
				ts[i] = time.Unix(sec, 0).UTC()
				continue
			}
			if day := floorDiv(sec, secondsPerDay); day < lo || day > hi {
				return nil, rangeErr(table, col, i, time.UnixMicro(us).UTC().Format(time.RFC3339Nano),
					batch.DateValue(lo).String()+" to "+batch.DateValue(hi).String())
			}
			ts[i] = time.UnixMicro(us).UTC()
		}
		return ptrs(col.Nullable, ts, null), nil
	case storeDate, storeDate32:
		ds := make([]time.Time, n)
		lo, hi := f.dayRange(col.storage)
		for i, d := range v.Ints {
			if null(i) {
				continue
			}
			if d < lo || d > hi {
				return nil, rangeErr(table, col, i, batch.DateValue(d).String(),
					batch.DateValue(lo).String()+" to "+batch.DateValue(hi).String())
			}
			ds[i] = time.Unix(d*secondsPerDay, 0).UTC()
		}
		return ptrs(col.Nullable, ds, null), nil
	case storeDecimal:
		ds := make([]decimal.Decimal, n)
		exp := -int32(col.Type.Scale)
		for i, d := range v.Decs {
			switch {
			case null(i):
				ds[i] = decimal.Zero
			case d.Hi == 0 && d.Lo <= math.MaxInt64, d.Hi == -1 && d.Lo > math.MaxInt64:
				ds[i] = decimal.New(int64(d.Lo), exp) // fits an int64: no big.Int to build first
			default:
				ds[i] = decimal.NewFromBigInt(d.Big(), exp)
			}
		}
		return ptrs(col.Nullable, ds, null), nil
	}
	return nil, fmt.Errorf("clickhouse: table %s column %s: no conversion for %s", table, col.Name, col.chType)
}

// arrays converts an array vector into the [][]T clickhouse-go appends to
// an Array column: the elements converted as values of the element type,
// cut into rows. A RangeError names the row and the element.
func (f features) arrays(table string, col column, v *batch.Vector) (any, error) {
	ec := col
	ec.Type, ec.Nullable = col.Type.ElemType(), false
	elems, err := f.values(table, ec, v.Elems)
	if err != nil {
		var re *RangeError
		if errors.As(err, &re) {
			row, _ := slices.BinarySearch(v.Ends, int32(re.Row+1))
			lo, _ := v.Array(row)
			re.Column = fmt.Sprintf("%s[%d]", col.Name, re.Row-lo)
			re.Row = row
		}
		return nil, err
	}
	ev := reflect.ValueOf(elems)
	out := reflect.MakeSlice(reflect.SliceOf(ev.Type()), v.Len(), v.Len())
	for i := range v.Len() {
		lo, hi := v.Array(i)
		out.Index(i).Set(ev.Slice(lo, hi))
	}
	return out.Interface(), nil
}

// nativeColumn is a column's values in ClickHouse's native format, as
// clickhouse-go's Decode reads them: the null map first when the column is
// nullable, then the values. stage fills the batch's column with it.
type nativeColumn []byte

// nativeDecimals encodes a decimal vector for a column stored as col (a
// Decimal of the same precision and scale): each unscaled value as a
// little-endian two's complement integer of the column's width (4, 8 or 16
// bytes by precision), 0 for NULL. This is what clickhouse-go's Append of
// decimal.Decimal ends with, without the big.Int arithmetic it takes per
// value. A value wider than the column's width is a RangeError.
func nativeDecimals(table string, col column, v *batch.Vector) (nativeColumn, error) {
	n := v.Len()
	width := 16
	switch p := col.Type.Precision; {
	case p <= 9:
		width = 4
	case p <= 18:
		width = 8
	}
	out := make([]byte, 0, n+n*width)
	if col.Nullable {
		for i := range n {
			out = append(out, boolByte(v.IsNull(i)))
		}
	}
	for i, d := range v.Decs {
		if v.IsNull(i) {
			d = batch.Dec128{}
		}
		var fits bool
		switch width {
		case 4:
			fits = (d.Hi == 0 && d.Lo <= math.MaxInt32) || (d.Hi == -1 && d.Lo >= 1<<64-1<<31)
			out = binary.LittleEndian.AppendUint32(out, uint32(d.Lo))
		case 8:
			fits = (d.Hi == 0 && d.Lo <= math.MaxInt64) || (d.Hi == -1 && d.Lo > math.MaxInt64)
			out = binary.LittleEndian.AppendUint64(out, d.Lo)
		default:
			fits = true
			out = binary.LittleEndian.AppendUint64(out, d.Lo)
			out = binary.LittleEndian.AppendUint64(out, uint64(d.Hi))
		}
		if !fits {
			return nil, rangeErr(table, col, i, batch.FormatDecimal(d, col.Type.Scale), fmt.Sprintf("%d-byte unscaled values", width))
		}
	}
	return out, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func rangeErr(table string, col column, row int, value, rng string) error {
	return &RangeError{Table: table, Column: col.Name, Row: row, Value: value, Type: col.chType, Range: rng}
}

// ptrs returns vals itself for a column that is not nullable, else a slice
// of pointers into vals with nil for NULL rows.
func ptrs[T any](nullable bool, vals []T, null func(int) bool) any {
	if !nullable {
		return vals
	}
	out := make([]*T, len(vals))
	for i := range vals {
		if !null(i) {
			out[i] = &vals[i]
		}
	}
	return out
}

// reader scans one column of a result row and appends it to a vector.
type reader struct {
	dest any
	push func(v *batch.Vector)
}

func scalar[T any](nullable bool, push func(v *batch.Vector, x T)) reader {
	if nullable {
		p := new(*T)
		return reader{dest: p, push: func(v *batch.Vector) {
			if *p == nil {
				v.AppendNull()
				return
			}
			push(v, **p)
		}}
	}
	x := new(T)
	return reader{dest: x, push: func(v *batch.Vector) { push(v, *x) }}
}

// typed returns the reader of a column of T, or of Array(T) when col is
// an array (its elements go through push).
func typed[T any](col column, push func(v *batch.Vector, x T)) reader {
	if col.Type.Kind == batch.KindArray {
		xs := new([]T)
		return reader{dest: xs, push: func(v *batch.Vector) {
			for _, x := range *xs {
				push(v.Elems, x)
			}
			v.EndArray()
		}}
	}
	return scalar(col.Nullable, push)
}

// newReader returns the reader of a column stored as col.
func newReader(col column) reader {
	switch col.storage {
	case storeString:
		if col.Type.Scalar().Kind == batch.KindBytes {
			return typed(col, func(v *batch.Vector, s string) { v.AppendBytes([]byte(s)) })
		}
		return typed(col, func(v *batch.Vector, s string) { v.AppendString(s) })
	case storeInt64, storeMicros:
		return typed(col, func(v *batch.Vector, x int64) { v.AppendInt(x) })
	case storeFloat64:
		return typed(col, func(v *batch.Vector, x float64) { v.AppendFloat(x) })
	case storeUInt8:
		return typed(col, func(v *batch.Vector, x uint8) { v.AppendBool(x != 0) })
	case storeDateTime, storeDateTime64:
		return typed(col, func(v *batch.Vector, t time.Time) { v.AppendInt(t.UnixMicro()) })
	case storeDate, storeDate32:
		return typed(col, func(v *batch.Vector, t time.Time) { v.AppendInt(floorDiv(t.Unix(), secondsPerDay)) })
	case storeDecimal:
		scale := col.Type.Scale
		return typed(col, func(v *batch.Vector, d decimal.Decimal) { v.AppendDecimal(unscaled(d, scale)) })
	}
	panic(fmt.Sprintf("clickhouse: no reader for storage %d of column %s", col.storage, col.Name))
}

// unscaled returns d as the unscaled value of a decimal of the scale.
func unscaled(d decimal.Decimal, scale int) batch.Dec128 {
	coef := d.Coefficient()
	shift := int64(d.Exponent()) + int64(scale)
	pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(abs(shift)), nil)
	if shift >= 0 {
		coef.Mul(coef, pow)
	} else {
		coef.Quo(coef, pow)
	}
	return batch.Dec128FromBig(coef)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
