package batch

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the kind of a column type.
type Kind uint8

// The column kinds of the spec. Timestamp values are microseconds since the
// Unix epoch in UTC; Date values are days since the Unix epoch.
const (
	KindInvalid Kind = iota
	KindString
	KindInt64
	KindFloat64
	KindBool
	KindTimestamp
	KindDate
	KindDecimal
	KindBytes
	KindArray // array(T) of a scalar T: see Type.Elem
)

var kindNames = [...]string{
	KindInvalid:   "invalid",
	KindString:    "string",
	KindInt64:     "int64",
	KindFloat64:   "float64",
	KindBool:      "bool",
	KindTimestamp: "timestamp",
	KindDate:      "date",
	KindDecimal:   "decimal",
	KindBytes:     "bytes",
	KindArray:     "array",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxDecimalPrecision is the largest precision a decimal column may declare.
const MaxDecimalPrecision = 38

// Type is a column type: a kind, and for decimals a precision and scale.
// An array's elements are of the scalar type {Elem, Precision, Scale}; they
// are never null (ClickHouse has no nullable arrays, and a null element would
// have no place in one).
type Type struct {
	Kind      Kind
	Elem      Kind // array only: the elements' kind, never KindArray
	Precision int  // decimal, or an array of decimals: 1..38
	Scale     int  // decimal, or an array of decimals: 0..Precision
}

// Types of the simple kinds, for convenience.
var (
	String    = Type{Kind: KindString}
	Int64     = Type{Kind: KindInt64}
	Float64   = Type{Kind: KindFloat64}
	Bool      = Type{Kind: KindBool}
	Timestamp = Type{Kind: KindTimestamp}
	Date      = Type{Kind: KindDate}
	Bytes     = Type{Kind: KindBytes}
)

// Decimal returns the decimal(p,s) type.
func Decimal(p, s int) Type { return Type{Kind: KindDecimal, Precision: p, Scale: s} }

// ArrayOf returns the type array(elem) of a scalar elem.
func ArrayOf(elem Type) Type {
	return Type{Kind: KindArray, Elem: elem.Kind, Precision: elem.Precision, Scale: elem.Scale}
}

// ElemType returns the type of an array's elements.
func (t Type) ElemType() Type { return Type{Kind: t.Elem, Precision: t.Precision, Scale: t.Scale} }

// Scalar returns the type of an array's elements, or t itself when it is
// not an array: the type a value within the column has.
func (t Type) Scalar() Type {
	if t.Kind == KindArray {
		return t.ElemType()
	}
	return t
}

// String returns the spec spelling of the type: "int64", "decimal(10,2)",
// "array(string)".
func (t Type) String() string {
	if t.Kind == KindArray {
		return "array(" + t.ElemType().String() + ")"
	}
	if t.Kind == KindDecimal {
		return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	}
	return t.Kind.String()
}

// ParseType parses a spec type name. Spaces inside decimal(P,S) are allowed.
func ParseType(s string) (Type, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	if inner, ok := strings.CutPrefix(name, "array("); ok && strings.HasSuffix(inner, ")") {
		elem, err := ParseType(inner[:len(inner)-1])
		if err != nil {
			return Type{}, fmt.Errorf("array element: %w", err)
		}
		if elem.Kind == KindArray {
			return Type{}, fmt.Errorf("unknown type %q: the elements of an array are a scalar type (a list of lists loads into a child table, docs/schema.md#child-tables)", s)
		}
		return ArrayOf(elem), nil
	}
	switch name {
	case "string":
		return String, nil
	case "int64":
		return Int64, nil
	case "float64":
		return Float64, nil
	case "bool":
		return Bool, nil
	case "timestamp":
		return Timestamp, nil
	case "date":
		return Date, nil
	case "bytes":
		return Bytes, nil
	}
	if strings.HasPrefix(name, "decimal(") && strings.HasSuffix(name, ")") {
		args := strings.Split(name[len("decimal("):len(name)-1], ",")
		if len(args) == 2 {
			p, err1 := strconv.Atoi(strings.TrimSpace(args[0]))
			sc, err2 := strconv.Atoi(strings.TrimSpace(args[1]))
			if err1 == nil && err2 == nil {
				if p < 1 || p > MaxDecimalPrecision {
					return Type{}, fmt.Errorf("decimal precision %d out of range 1..%d", p, MaxDecimalPrecision)
				}
				if sc < 0 || sc > p {
					return Type{}, fmt.Errorf("decimal scale %d out of range 0..%d", sc, p)
				}
				return Decimal(p, sc), nil
			}
		}
		return Type{}, fmt.Errorf("unknown type %q: write decimal(P,S) with integers P and S", s)
	}
	return Type{}, fmt.Errorf("unknown type %q: one of string, int64, float64, bool, timestamp, date, decimal(P,S), bytes, array(T)", s)
}

// Column is a named, typed column.
type Column struct {
	Name     string
	Type     Type
	Nullable bool
}

// Schema is an ordered list of columns.
type Schema struct {
	Columns []Column
}

// Index returns the position of the named column, or -1.
func (s Schema) Index(name string) int {
	for i, c := range s.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Names returns the column names in order.
func (s Schema) Names() []string {
	out := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		out[i] = c.Name
	}
	return out
}

// Equal reports whether both schemas have the same columns in the same order.
func (s Schema) Equal(o Schema) bool {
	if len(s.Columns) != len(o.Columns) {
		return false
	}
	for i := range s.Columns {
		if s.Columns[i] != o.Columns[i] {
			return false
		}
	}
	return true
}
