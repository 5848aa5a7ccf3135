package batch

import (
	"fmt"
	"time"
)

// Vector holds the values of one column of a batch. Exactly one value slice is
// in use, chosen by the type's kind:
//
//	Ints    int64, timestamp (µs since epoch, UTC), date (days since epoch)
//	Floats  float64
//	Bools   bool
//	Strs    string
//	Bytes   bytes
//	Decs    decimal (unscaled, see Dec128)
//	Ends    array: row i's elements are Elems[Ends[i-1]:Ends[i]] (from 0 for row 0)
//
// Nulls is nil when no value is null; otherwise it has one entry per row and
// a null row holds the zero value in the value slice (an array: no elements).
type Vector struct {
	Type   Type
	Nulls  []bool
	Ints   []int64
	Floats []float64
	Bools  []bool
	Strs   []string
	Bytes  [][]byte
	Decs   []Dec128
	Ends   []int32
	Elems  *Vector // array: the elements of every row, never null
}

// NewVector returns an empty vector of type t with room for capacity rows.
func NewVector(t Type, capacity int) *Vector {
	v := &Vector{Type: t}
	switch t.Kind {
	case KindInt64, KindTimestamp, KindDate:
		v.Ints = make([]int64, 0, capacity)
	case KindFloat64:
		v.Floats = make([]float64, 0, capacity)
	case KindBool:
		v.Bools = make([]bool, 0, capacity)
	case KindString:
		v.Strs = make([]string, 0, capacity)
	case KindBytes:
		v.Bytes = make([][]byte, 0, capacity)
	case KindDecimal:
		v.Decs = make([]Dec128, 0, capacity)
	case KindArray:
		v.Ends = make([]int32, 0, capacity)
		v.Elems = NewVector(t.ElemType(), capacity)
	default:
		panic(fmt.Sprintf("batch: vector of invalid type %v", t))
	}
	return v
}

// Len returns the number of rows.
func (v *Vector) Len() int {
	switch v.Type.Kind {
	case KindInt64, KindTimestamp, KindDate:
		return len(v.Ints)
	case KindFloat64:
		return len(v.Floats)
	case KindBool:
		return len(v.Bools)
	case KindString:
		return len(v.Strs)
	case KindBytes:
		return len(v.Bytes)
	case KindDecimal:
		return len(v.Decs)
	case KindArray:
		return len(v.Ends)
	}
	return 0
}

// Array returns the bounds of row i's elements in Elems.
func (v *Vector) Array(i int) (lo, hi int) {
	if i > 0 {
		lo = int(v.Ends[i-1])
	}
	return lo, int(v.Ends[i])
}

// EndArray ends a row of an array vector: its elements are those appended
// to Elems since the previous row ended.
func (v *Vector) EndArray() {
	v.markNull(false)
	v.Ends = append(v.Ends, int32(v.Elems.Len()))
}

// IsNull reports whether row i is null.
func (v *Vector) IsNull(i int) bool { return v.Nulls != nil && v.Nulls[i] }

// HasNulls reports whether any row is null.
func (v *Vector) HasNulls() bool {
	for _, n := range v.Nulls {
		if n {
			return true
		}
	}
	return false
}

func (v *Vector) markNull(null bool) {
	if v.Nulls == nil {
		if !null {
			return
		}
		v.Nulls = make([]bool, v.Len(), cap(v.Ints)+cap(v.Floats)+cap(v.Bools)+cap(v.Strs)+cap(v.Bytes)+cap(v.Decs)+cap(v.Ends)+1)
	}
	v.Nulls = append(v.Nulls, null)
}

// AppendVector appends every row of src, a vector of the same type.
func (v *Vector) AppendVector(src *Vector) {
	n, m := v.Len(), src.Len()
	switch {
	case src.Nulls != nil:
		if v.Nulls == nil {
			v.Nulls = make([]bool, n, n+m)
		}
		v.Nulls = append(v.Nulls, src.Nulls...)
	case v.Nulls != nil:
		v.Nulls = append(v.Nulls, make([]bool, m)...)
	}
	v.Ints = append(v.Ints, src.Ints...)
	v.Floats = append(v.Floats, src.Floats...)
	v.Bools = append(v.Bools, src.Bools...)
	v.Strs = append(v.Strs, src.Strs...)
	v.Bytes = append(v.Bytes, src.Bytes...)
	v.Decs = append(v.Decs, src.Decs...)
	if v.Type.Kind == KindArray {
		base := int32(v.Elems.Len())
		for _, e := range src.Ends {
			v.Ends = append(v.Ends, base+e)
		}
		v.Elems.AppendVector(src.Elems)
	}
}

// AppendNull appends a null row.
func (v *Vector) AppendNull() {
	v.markNull(true)
	switch v.Type.Kind {
	case KindInt64, KindTimestamp, KindDate:
		v.Ints = append(v.Ints, 0)
	case KindFloat64:
		v.Floats = append(v.Floats, 0)
	case KindBool:
		v.Bools = append(v.Bools, false)
	case KindString:
		v.Strs = append(v.Strs, "")
	case KindBytes:
		v.Bytes = append(v.Bytes, nil)
	case KindDecimal:
		v.Decs = append(v.Decs, Dec128{})
	case KindArray:
		v.Ends = append(v.Ends, int32(v.Elems.Len()))
	}
}

// AppendInt appends to an int64, timestamp or date vector.
func (v *Vector) AppendInt(x int64) { v.markNull(false); v.Ints = append(v.Ints, x) }

// AppendFloat appends to a float64 vector.
func (v *Vector) AppendFloat(x float64) { v.markNull(false); v.Floats = append(v.Floats, x) }

// AppendBool appends to a bool vector.
func (v *Vector) AppendBool(x bool) { v.markNull(false); v.Bools = append(v.Bools, x) }

// AppendString appends to a string vector.
func (v *Vector) AppendString(x string) { v.markNull(false); v.Strs = append(v.Strs, x) }

// AppendBytes appends to a bytes vector. The vector keeps x; copy it first if
// the caller reuses its buffer.
func (v *Vector) AppendBytes(x []byte) { v.markNull(false); v.Bytes = append(v.Bytes, x) }

// AppendDecimal appends to a decimal vector.
func (v *Vector) AppendDecimal(x Dec128) { v.markNull(false); v.Decs = append(v.Decs, x) }

// AppendFrom appends row i of src, which must have the same kind.
func (v *Vector) AppendFrom(src *Vector, i int) {
	if src.IsNull(i) {
		v.AppendNull()
		return
	}
	switch v.Type.Kind {
	case KindInt64, KindTimestamp, KindDate:
		v.AppendInt(src.Ints[i])
	case KindFloat64:
		v.AppendFloat(src.Floats[i])
	case KindBool:
		v.AppendBool(src.Bools[i])
	case KindString:
		v.AppendString(src.Strs[i])
	case KindBytes:
		v.AppendBytes(src.Bytes[i])
	case KindDecimal:
		v.AppendDecimal(src.Decs[i])
	case KindArray:
		lo, hi := src.Array(i)
		for j := lo; j < hi; j++ {
			v.Elems.AppendFrom(src.Elems, j)
		}
		v.EndArray()
	}
}

// Truncate drops rows from n on. Decoders use it to undo a partly appended row.
func (v *Vector) Truncate(n int) {
	if v.Nulls != nil {
		v.Nulls = v.Nulls[:n]
	}
	switch v.Type.Kind {
	case KindInt64, KindTimestamp, KindDate:
		v.Ints = v.Ints[:n]
	case KindFloat64:
		v.Floats = v.Floats[:n]
	case KindBool:
		v.Bools = v.Bools[:n]
	case KindString:
		v.Strs = v.Strs[:n]
	case KindBytes:
		v.Bytes = v.Bytes[:n]
	case KindDecimal:
		v.Decs = v.Decs[:n]
	case KindArray:
		v.Ends = v.Ends[:n]
		end := 0
		if n > 0 {
			end = int(v.Ends[n-1])
		}
		v.Elems.Truncate(end)
	}
}

// Value returns row i as a Go value, for display and tests (not the hot
// path): nil, int64, float64, bool, string, []byte, time.Time (timestamps, UTC),
// Date, Decimal, or []any of those for an array.
func (v *Vector) Value(i int) any {
	if v.IsNull(i) {
		return nil
	}
	switch v.Type.Kind {
	case KindInt64:
		return v.Ints[i]
	case KindTimestamp:
		return time.UnixMicro(v.Ints[i]).UTC()
	case KindDate:
		return DateValue(v.Ints[i])
	case KindFloat64:
		return v.Floats[i]
	case KindBool:
		return v.Bools[i]
	case KindString:
		return v.Strs[i]
	case KindBytes:
		return v.Bytes[i]
	case KindDecimal:
		return Decimal128Value{Unscaled: v.Decs[i], Scale: v.Type.Scale}
	case KindArray:
		lo, hi := v.Array(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			out = append(out, v.Elems.Value(j))
		}
		return out
	}
	return nil
}

// DateValue is a date as days since the Unix epoch; String gives YYYY-MM-DD.
type DateValue int64

// Time returns midnight UTC of the date.
func (d DateValue) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

func (d DateValue) String() string { return d.Time().Format(time.DateOnly) }

// DateFromTime returns the UTC day of t.
func DateFromTime(t time.Time) DateValue {
	return DateValue(floorDiv(t.Unix(), 86400))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Decimal128Value is a decimal with its scale; String gives its exact text.
type Decimal128Value struct {
	Unscaled Dec128
	Scale    int
}

func (d Decimal128Value) String() string { return FormatDecimal(d.Unscaled, d.Scale) }

// Take returns the given rows of v, in that order, as a new vector; strings
// and bytes are shared, not copied.
func (v *Vector) Take(rows []int) *Vector {
	w := &Vector{Type: v.Type}
	if v.Nulls != nil {
		w.Nulls = gather(v.Nulls, rows)
	}
	switch v.Type.Kind {
	case KindInt64, KindTimestamp, KindDate:
		w.Ints = gather(v.Ints, rows)
	case KindFloat64:
		w.Floats = gather(v.Floats, rows)
	case KindBool:
		w.Bools = gather(v.Bools, rows)
	case KindString:
		w.Strs = gather(v.Strs, rows)
	case KindBytes:
		w.Bytes = gather(v.Bytes, rows)
	case KindDecimal:
		w.Decs = gather(v.Decs, rows)
	case KindArray:
		w.Ends = make([]int32, 0, len(rows))
		w.Elems = NewVector(v.Type.ElemType(), len(rows))
		for _, r := range rows {
			lo, hi := v.Array(r)
			for j := lo; j < hi; j++ {
				w.Elems.AppendFrom(v.Elems, j)
			}
			w.Ends = append(w.Ends, int32(w.Elems.Len()))
		}
	}
	return w
}

func gather[T any](s []T, rows []int) []T {
	out := make([]T, len(rows))
	for k, i := range rows {
		out[k] = s[i]
	}
	return out
}
