package backfill

import (
	"fmt"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/sluicehq/sluice/flows/batch"
)

// conv is how a Parquet column's physical values become sluice values.
type conv uint8

const (
	convBool      conv = iota + 1
	convInt32          // INT32, INT(8|16|32, signed)
	convUint32         // INT(8|16|32, unsigned)
	convInt64          // INT64, INT(64, signed)
	convUint64         // INT(64, unsigned): decimal(20,0)
	convDate           // DATE: days
	convTsMillis       // TIMESTAMP(MILLIS)
	convTsMicros       // TIMESTAMP(MICROS)
	convTsNanos        // TIMESTAMP(NANOS)
	convInt96          // INT96 (legacy Impala/Spark timestamps)
	convFloat          // FLOAT
	convDouble         // DOUBLE
	convByteArray      // BYTE_ARRAY: string (UTF8, ENUM, JSON) or bytes
	convFixed          // FIXED_LEN_BYTE_ARRAY: bytes
	convUUID           // UUID: string in the 8-4-4-4-12 form
	convDecInt32       // DECIMAL over INT32
	convDecInt64       // DECIMAL over INT64
	convDecBytes       // DECIMAL over BYTE_ARRAY or FIXED_LEN_BYTE_ARRAY
)

// pqType is the sluice type a Parquet column reads as.
type pqType struct {
	typ  batch.Type
	conv conv
	desc string // the Parquet type, for messages
	err  string // set when the column has no sluice type: why
}

// columnType maps a Parquet column to its sluice type (see doc.go).
func columnType(pc *parquet.Column) pqType {
	if !pc.Leaf() {
		return pqType{desc: "group", err: "a nested group has no sluice type"}
	}
	if pc.Repeated() {
		return pqType{desc: "repeated", err: "a repeated column has no sluice type"}
	}
	t := pc.Type()
	kind := t.Kind()
	var lv format.LogicalTypeValue
	if lt := t.LogicalType(); lt != nil {
		lv = lt.Value
	}
	desc := kind.String()
	if lv != nil {
		desc += " " + lv.String()
	}
	p := pqType{desc: desc}
	unsupported := func() pqType {
		p.err = fmt.Sprintf("Parquet type %s has no sluice type", desc)
		return p
	}
	if d, ok := lv.(*format.DecimalType); ok {
		if d.Precision < 1 || d.Precision > batch.MaxDecimalPrecision || d.Scale < 0 || d.Scale > d.Precision {
			p.err = fmt.Sprintf("Parquet type %s is out of the range of decimal(P,S): P 1..%d, S 0..P", desc, batch.MaxDecimalPrecision)
			return p
		}
		p.typ = batch.Decimal(int(d.Precision), int(d.Scale))
		switch kind {
		case parquet.Int32:
			p.conv = convDecInt32
		case parquet.Int64:
			p.conv = convDecInt64
		case parquet.ByteArray, parquet.FixedLenByteArray:
			p.conv = convDecBytes
		default:
			return unsupported()
		}
		return p
	}
	switch kind {
	case parquet.Boolean:
		if lv != nil {
			return unsupported()
		}
		p.typ, p.conv = batch.Bool, convBool
	case parquet.Int32:
		switch x := lv.(type) {
		case nil:
			p.typ, p.conv = batch.Int64, convInt32
		case *format.IntType:
			p.typ, p.conv = batch.Int64, convInt32
			if !x.IsSigned {
				p.conv = convUint32
			}
		case *format.DateType:
			p.typ, p.conv = batch.Date, convDate
		default:
			return unsupported()
		}
	case parquet.Int64:
		switch x := lv.(type) {
		case nil:
			p.typ, p.conv = batch.Int64, convInt64
		case *format.IntType:
			p.typ, p.conv = batch.Int64, convInt64
			if !x.IsSigned {
				p.typ, p.conv = batch.Decimal(20, 0), convUint64
			}
		case *format.TimestampType:
			p.typ = batch.Timestamp
			switch x.Unit.Value.(type) {
			case *format.MilliSeconds:
				p.conv = convTsMillis
			case *format.MicroSeconds:
				p.conv = convTsMicros
			case *format.NanoSeconds:
				p.conv = convTsNanos
			default:
				return unsupported()
			}
		default:
			return unsupported()
		}
	case parquet.Int96:
		if lv != nil {
			return unsupported()
		}
		p.typ, p.conv = batch.Timestamp, convInt96
	case parquet.Float:
		if lv != nil {
			return unsupported()
		}
		p.typ, p.conv = batch.Float64, convFloat
	case parquet.Double:
		if lv != nil {
			return unsupported()
		}
		p.typ, p.conv = batch.Float64, convDouble
	case parquet.ByteArray:
		switch lv.(type) {
		case nil, *format.BsonType:
			p.typ, p.conv = batch.Bytes, convByteArray
		case *format.StringType, *format.EnumType, *format.JsonType:
			p.typ, p.conv = batch.String, convByteArray
		default:
			return unsupported()
		}
	case parquet.FixedLenByteArray:
		switch lv.(type) {
		case nil:
			p.typ, p.conv = batch.Bytes, convFixed
		case *format.UUIDType:
			if t.Length() != 16 {
				return unsupported()
			}
			p.typ, p.conv = batch.String, convUUID
		default:
			return unsupported()
		}
	default:
		return unsupported()
	}
	return p
}

// convertible reports whether values of the file's type ft load exactly
// into a column of type wt.
func convertible(ft, wt batch.Type) bool {
	if ft == wt {
		return true
	}
	switch {
	case ft.Kind == batch.KindDecimal && wt.Kind == batch.KindDecimal:
		return wt.Scale >= ft.Scale && wt.Precision-wt.Scale >= ft.Precision-ft.Scale
	case ft.Kind == batch.KindInt64 && wt.Kind == batch.KindDecimal:
		return wt.Precision-wt.Scale >= 19
	case ft.Kind == batch.KindDate && wt.Kind == batch.KindTimestamp:
		return true
	case ft.Kind == batch.KindBytes && wt.Kind == batch.KindString,
		ft.Kind == batch.KindString && wt.Kind == batch.KindBytes:
		return true
	}
	return false
}

// ParquetSchema returns the columns of a Parquet file as sluice columns, in
// the file's order; an optional column is nullable. The fields of a plain
// group (a struct) are columns named by their path, <group>__<field>
// (ParquetColumns). A column with no sluice type (a list, a map, repeated,
// TIME, FLOAT16, ...) is an error naming it: declare the source's columns
// to leave it out.
func ParquetSchema(path string) (batch.Schema, error) {
	s, _, err := ParquetColumns(path, nil)
	return s, err
}

// ParquetColumns is ParquetSchema with each name of a column's path given
// by names (nil: as it is) before they are joined; raw holds, per column,
// its path in the file (a.b).
func ParquetColumns(path string, names func(string) string) (s batch.Schema, raw []string, err error) {
	f := File{Name: path, Path: path}
	pf, closeFile, err := openParquetFile(f)
	if err != nil {
		return batch.Schema{}, nil, err
	}
	defer closeFile()
	for _, l := range parquetLeaves(pf.Root(), names) {
		t := columnType(l.col)
		if t.err != "" {
			return batch.Schema{}, nil, &FileError{File: path, Column: l.path, Err: fmt.Errorf("%s; declare the source's columns to leave it out", t.err)}
		}
		s.Columns = append(s.Columns, batch.Column{Name: l.name, Type: t.typ, Nullable: l.col.MaxDefinitionLevel() > 0})
		raw = append(raw, l.path)
	}
	return s, raw, nil
}

// ParquetTables is ParquetColumns for a table typed by its files, which
// takes lists: a list of scalars, of structs or of lists is the child
// table <table>__<column> (docs/schema.md#child-tables), and a list inside
// its elements the child table of that one (<table>__<column>__value for a
// list of lists, <table>__<column>__<field> for a list field of a struct),
// each returned by the part of its name after <table>__ with its columns
// (value, or the struct's fields by path), all nullable, without the link
// columns. A map, or a repeated field outside a LIST, is an error naming it.
func ParquetTables(path string, names func(string) string) (s batch.Schema, raw []string, kids map[string]ChildTable, err error) {
	f := File{Name: path, Path: path}
	pf, closeFile, err := openParquetFile(f)
	if err != nil {
		return batch.Schema{}, nil, nil, err
	}
	defer closeFile()
	for _, l := range parquetLeaves(pf.Root(), names) {
		if l.list != nil {
			nodes, err := listNodes(l, names)
			if err != nil {
				return batch.Schema{}, nil, nil, &FileError{File: path, Column: l.path, Err: err}
			}
			if kids == nil {
				kids = map[string]ChildTable{}
			}
			for _, n := range nodes {
				if _, dup := kids[n.suffix]; dup {
					return batch.Schema{}, nil, nil, &FileError{File: path, Column: l.path, Err: fmt.Errorf("another list of the file becomes the child table %s too: rename one", n.suffix)}
				}
				kids[n.suffix] = ChildTable{Parent: n.parent, Schema: batch.Schema{Columns: n.columns()}}
			}
			continue
		}
		t := columnType(l.col)
		if t.err != "" {
			return batch.Schema{}, nil, nil, &FileError{File: path, Column: l.path, Err: fmt.Errorf("%s; declare the source's columns to leave it out", t.err)}
		}
		s.Columns = append(s.Columns, batch.Column{Name: l.name, Type: t.typ, Nullable: l.col.MaxDefinitionLevel() > 0})
		raw = append(raw, l.path)
	}
	return s, raw, kids, nil
}

// pqLeaf is a column of a Parquet file as sluice reads it.
type pqLeaf struct {
	name string // the column's name: the names of its path joined by "__"
	path string // its path in the file, joined by "."
	col  *parquet.Column
	// list is the element of a list (col a LIST group of the standard
	// three levels), nil for any other column.
	list *parquet.Column
}

// listElement returns the element of a LIST group of the standard three
// levels (group (LIST) { repeated group list { element } }), nil for any
// other column.
func listElement(pc *parquet.Column) *parquet.Column {
	if pc.Leaf() || pc.Repeated() {
		return nil
	}
	lt := pc.Type().LogicalType()
	ct := pc.Type().ConvertedType()
	if !(lt != nil && isListType(lt)) && !(ct != nil && *ct == deprecated.List) {
		return nil
	}
	cols := pc.Columns()
	if len(cols) != 1 || !cols[0].Repeated() || cols[0].Leaf() || len(cols[0].Columns()) != 1 {
		return nil
	}
	return cols[0].Columns()[0]
}

func isListType(lt *format.LogicalType) bool {
	_, ok := lt.Value.(*format.ListType)
	return ok
}

// parquetLeaves lists the columns of a Parquet file as sluice reads them:
// each top-level leaf, and each field of a plain group (a struct, however
// deep) named by its path, each name through names when set. A list, a
// map or a repeated group is one entry, which has no sluice type.
func parquetLeaves(root *parquet.Column, names func(string) string) []pqLeaf {
	var out []pqLeaf
	var walk func(pc *parquet.Column, name, path string)
	walk = func(pc *parquet.Column, name, path string) {
		for _, c := range pc.Columns() {
			n := c.Name()
			if names != nil {
				n = names(n)
			}
			cname, cpath := n, c.Name()
			if name != "" {
				cname, cpath = name+"__"+n, path+"."+c.Name()
			}
			if isStruct(c) {
				walk(c, cname, cpath)
				continue
			}
			out = append(out, pqLeaf{name: cname, path: cpath, col: c, list: listElement(c)})
		}
	}
	walk(root, "", "")
	return out
}

// isStruct reports whether a Parquet column is a plain group: neither a
// leaf, nor repeated, nor a list or a map.
func isStruct(pc *parquet.Column) bool {
	if pc.Leaf() || pc.Repeated() {
		return false
	}
	if lt := pc.Type().LogicalType(); lt != nil {
		switch lt.Value.(type) {
		case *format.ListType, *format.MapType:
			return false
		}
	}
	if ct := pc.Type().ConvertedType(); ct != nil {
		switch *ct {
		case deprecated.List, deprecated.Map, deprecated.MapKeyValue:
			return false
		}
	}
	return true
}
