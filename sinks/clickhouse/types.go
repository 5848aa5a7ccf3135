package clickhouse

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
)

// features are what the connected server supports beyond ClickHouse 18.16.
type features struct {
	dateTime64 bool // DateTime64(6, 'UTC'): 20.1
	date32     bool // Date32: 21.9
	wideDates  bool // DateTime64 and Date32 reach 1900-01-01..2299-12-31 (before: 1925..2283): 22.8
	isDeleted  bool // ReplacingMergeTree(version, is_deleted): 23.2
}

func featuresOf(major, minor int) features {
	at := func(ma, mi int) bool { return major > ma || (major == ma && minor >= mi) }
	return features{dateTime64: at(20, 1), date32: at(21, 9), wideDates: at(22, 8), isDeleted: at(23, 2)}
}

// columnType is the ClickHouse type and comment a new column of a target
// gets: a timestamp on a server without DateTime64 is an Int64 of
// microseconds, exact, where DateTime would keep whole seconds.
func columnType(t batch.Type, nullable bool, f features) (typ, comment string) {
	if t.Kind == batch.KindArray {
		typ, comment = columnType(t.ElemType(), false, f)
		return "Array(" + typ + ")", comment
	}
	switch {
	case t.Kind == batch.KindTimestamp && !f.dateTime64:
		typ, comment = "Int64", timestampComment
		if nullable {
			typ = "Nullable(Int64)"
		}
		return typ, comment
	case t.Kind == batch.KindBytes:
		return chType(t, nullable, f), bytesComment
	}
	return chType(t, nullable, f), ""
}

// comment is the comment an existing column of a target carries.
func (c column) comment() string {
	switch {
	case c.storage == storeMicros:
		return timestampComment
	case c.Type.Scalar().Kind == batch.KindBytes:
		return bytesComment
	}
	return ""
}

// chType is the ClickHouse type a new column of type t gets in sluice's own
// tables (timestamps there are DateTime where DateTime64 is missing: whole
// seconds suffice for when a dead letter or a load was written).
func chType(t batch.Type, nullable bool, f features) string {
	var s string
	switch t.Kind {
	case batch.KindArray:
		s = "Array(" + chType(t.ElemType(), false, f) + ")"
	case batch.KindString, batch.KindBytes:
		s = "String"
	case batch.KindInt64:
		s = "Int64"
	case batch.KindFloat64:
		s = "Float64"
	case batch.KindBool:
		s = "UInt8"
	case batch.KindTimestamp:
		if f.dateTime64 {
			s = "DateTime64(6, 'UTC')"
		} else {
			s = "DateTime('UTC')"
		}
	case batch.KindDate:
		if f.date32 {
			s = "Date32"
		} else {
			s = "Date"
		}
	case batch.KindDecimal:
		s = fmt.Sprintf("Decimal(%d, %d)", t.Precision, t.Scale)
	default:
		panic(fmt.Sprintf("clickhouse: no ClickHouse type for %v", t))
	}
	if nullable {
		return "Nullable(" + s + ")"
	}
	return s
}

// storage is how a column of an existing table stores its values; writes
// check ranges against it and reads convert from it.
type storage uint8

const (
	storeString storage = iota
	storeInt64
	storeFloat64
	storeUInt8
	storeDateTime   // seconds, 1970..2106
	storeDateTime64 // DateTime64(6): microseconds, 1900..2299
	storeMicros     // Int64 of microseconds (timestampComment): servers without DateTime64
	storeDate       // days, 1970..2149
	storeDate32     // days, 1900..2299
	storeDecimal
)

// column is one column of an existing table.
type column struct {
	batch.Column
	chType  string // as system.columns shows it
	storage storage
}

// parseColumn maps a ClickHouse column back to its sluice column. comment
// tells bytes from string.
func parseColumn(name, typ, comment string) (column, error) {
	c := column{Column: batch.Column{Name: name}, chType: typ}
	t := strings.ReplaceAll(typ, " ", "")
	if inner, ok := strings.CutPrefix(t, "Nullable("); ok && strings.HasSuffix(inner, ")") {
		c.Nullable = true
		t = inner[:len(inner)-1]
	}
	unsupported := func() (column, error) {
		return column{}, fmt.Errorf("column %s has type %s, which sluice does not map (see docs/clickhouse.md)", name, typ)
	}
	if inner, ok := strings.CutPrefix(t, "Array("); ok && strings.HasSuffix(inner, ")") && !c.Nullable {
		e, err := parseColumn(name, inner[:len(inner)-1], comment)
		if err != nil || e.Nullable || e.Type.Kind == batch.KindArray {
			return unsupported()
		}
		c.Type, c.storage = batch.ArrayOf(e.Type), e.storage
		return c, nil
	}
	switch {
	case t == "String":
		c.Type, c.storage = batch.String, storeString
		if comment == bytesComment {
			c.Type = batch.Bytes
		}
	case t == "Int64" && comment == timestampComment:
		c.Type, c.storage = batch.Timestamp, storeMicros
	case t == "Int64":
		c.Type, c.storage = batch.Int64, storeInt64
	case t == "Float64":
		c.Type, c.storage = batch.Float64, storeFloat64
	case t == "UInt8":
		c.Type, c.storage = batch.Bool, storeUInt8
	case t == "DateTime" || strings.HasPrefix(t, "DateTime('"):
		c.Type, c.storage = batch.Timestamp, storeDateTime
	case strings.HasPrefix(t, "DateTime64(6"):
		c.Type, c.storage = batch.Timestamp, storeDateTime64
	case t == "Date":
		c.Type, c.storage = batch.Date, storeDate
	case t == "Date32":
		c.Type, c.storage = batch.Date, storeDate32
	case strings.HasPrefix(t, "Decimal(") && strings.HasSuffix(t, ")"):
		p, s, ok := strings.Cut(t[len("Decimal("):len(t)-1], ",")
		pi, err1 := strconv.Atoi(p)
		si, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || pi < 1 || pi > batch.MaxDecimalPrecision || si < 0 || si > pi {
			return unsupported()
		}
		c.Type, c.storage = batch.Decimal(pi, si), storeDecimal
	default:
		return unsupported()
	}
	return c, nil
}

// describe renders a column for messages: "Nullable(Int64) (int64, nullable)".
func (c column) describe() string {
	return fmt.Sprintf("%s (%s)", c.chType, spelled(c.Column))
}

func spelled(c batch.Column) string {
	if c.Nullable {
		return c.Type.String() + ", nullable"
	}
	return c.Type.String()
}
