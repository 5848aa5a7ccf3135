package backfill

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"

	"github.com/sluicehq/sluice/flows/batch"
)

// typed builds the columns of a file with every supported type; row r of
// each column and the value sluice must read for it.
type typedCol struct {
	name string
	node parquet.Node
	want batch.Column
	gen  func(r int) (parquet.Value, any) // nil parquet.Value (Kind() of zero) with want nil: NULL
}

func bigBytes(v *big.Int, n int) []byte {
	// two's complement, big-endian, n bytes
	m := new(big.Int).Set(v)
	if m.Sign() < 0 {
		m.Add(m, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	b := m.Bytes()
	out := make([]byte, n)
	copy(out[n-len(b):], b)
	return out
}

func minimalBytes(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	for len(b) > 1 && ((b[0] == 0 && b[1]&0x80 == 0) || (b[0] == 0xff && b[1]&0x80 != 0)) {
		b = b[1:]
	}
	return b
}

var tsBase = time.Date(2024, 3, 1, 12, 34, 56, 789123456, time.UTC)

func typedColumns() []typedCol {
	null := func(r int) bool { return r%4 == 1 }
	dec := func(x int64, s int) batch.Decimal128Value {
		return batch.Decimal128Value{Unscaled: batch.Dec128FromInt64(x), Scale: s}
	}
	big37 := new(big.Int).Exp(big.NewInt(10), big.NewInt(37), nil)
	return []typedCol{
		{"i64", parquet.Leaf(parquet.Int64Type), col("i64", batch.Int64, false), func(r int) (parquet.Value, any) {
			x := int64(r*1000) - 3000
			return parquet.Int64Value(x), x
		}},
		{"i32", parquet.Optional(parquet.Int(32)), col("i32", batch.Int64, true), func(r int) (parquet.Value, any) {
			if null(r) {
				return parquet.Value{}, nil
			}
			x := int32(-r * 7)
			return parquet.Int32Value(x), int64(x)
		}},
		{"u32", parquet.Uint(32), col("u32", batch.Int64, false), func(r int) (parquet.Value, any) {
			x := uint32(math.MaxUint32 - r)
			return parquet.Int32Value(int32(x)), int64(x)
		}},
		{"u64", parquet.Uint(64), col("u64", batch.Decimal(20, 0), false), func(r int) (parquet.Value, any) {
			x := uint64(math.MaxUint64) - uint64(r)
			return parquet.Int64Value(int64(x)), batch.Decimal128Value{Unscaled: batch.Dec128{Lo: x}}
		}},
		{"f32", parquet.Leaf(parquet.FloatType), col("f32", batch.Float64, false), func(r int) (parquet.Value, any) {
			return parquet.FloatValue(float32(r) + 0.5), float64(r) + 0.5
		}},
		{"f64", parquet.Optional(parquet.Leaf(parquet.DoubleType)), col("f64", batch.Float64, true), func(r int) (parquet.Value, any) {
			if null(r) {
				return parquet.Value{}, nil
			}
			return parquet.DoubleValue(float64(r) / 3), float64(r) / 3
		}},
		{"b", parquet.Optional(parquet.Leaf(parquet.BooleanType)), col("b", batch.Bool, true), func(r int) (parquet.Value, any) {
			if r%5 == 4 {
				return parquet.Value{}, nil
			}
			return parquet.BooleanValue(r%3 == 0), r%3 == 0
		}},
		{"s", parquet.Optional(parquet.String()), col("s", batch.String, true), func(r int) (parquet.Value, any) {
			if null(r) {
				return parquet.Value{}, nil
			}
			s := strings.Repeat("é", r) + fmt.Sprint(r)
			return parquet.ByteArrayValue([]byte(s)), s
		}},
		{"raw", parquet.Leaf(parquet.ByteArrayType), col("raw", batch.Bytes, false), func(r int) (parquet.Value, any) {
			b := []byte{byte(r), 0, 0xff}[:r%4]
			return parquet.ByteArrayValue(b), b
		}},
		{"fixed", parquet.Leaf(parquet.FixedLenByteArrayType(3)), col("fixed", batch.Bytes, false), func(r int) (parquet.Value, any) {
			b := []byte{byte(r), byte(r + 1), byte(r + 2)}
			return parquet.FixedLenByteArrayValue(b), b
		}},
		{"day", parquet.Date(), col("day", batch.Date, false), func(r int) (parquet.Value, any) {
			d := int32(19000 + r*400 - 20000) // before and after 1970
			return parquet.Int32Value(d), batch.DateValue(d)
		}},
		{"ts_ms", parquet.Timestamp(parquet.Millisecond), col("ts_ms", batch.Timestamp, false), func(r int) (parquet.Value, any) {
			t := tsBase.Add(time.Duration(r) * time.Hour)
			return parquet.Int64Value(t.UnixMilli()), time.UnixMilli(t.UnixMilli()).UTC()
		}},
		{"ts_us", parquet.Optional(parquet.Timestamp(parquet.Microsecond)), col("ts_us", batch.Timestamp, true), func(r int) (parquet.Value, any) {
			if null(r) {
				return parquet.Value{}, nil
			}
			t := tsBase.Add(-time.Duration(r) * 24 * time.Hour * 365)
			return parquet.Int64Value(t.UnixMicro()), time.UnixMicro(t.UnixMicro()).UTC()
		}},
		{"ts_ns", parquet.Timestamp(parquet.Nanosecond), col("ts_ns", batch.Timestamp, false), func(r int) (parquet.Value, any) {
			ns := int64(r) - 5 // around the epoch: -5ns floors to -1µs
			return parquet.Int64Value(ns), time.UnixMicro(floorDiv(ns, 1000)).UTC()
		}},
		{"i96", parquet.Leaf(parquet.Int96Type), col("i96", batch.Timestamp, false), func(r int) (parquet.Value, any) {
			t := tsBase.Add(time.Duration(r) * 1000 * time.Hour)
			days := floorDiv(t.Unix(), 86400)
			nanos := uint64(t.UnixNano() - days*86400*1e9)
			v := deprecated.Int96{uint32(nanos), uint32(nanos >> 32), uint32(days + julianUnixEpoch)}
			return parquet.Int96Value(v), time.UnixMicro(t.UnixMicro()).UTC()
		}},
		{"d32", parquet.Decimal(2, 9, parquet.Int32Type), col("d32", batch.Decimal(9, 2), false), func(r int) (parquet.Value, any) {
			x := int32(r*12345 - 50000)
			return parquet.Int32Value(x), dec(int64(x), 2)
		}},
		{"d64", parquet.Decimal(4, 18, parquet.Int64Type), col("d64", batch.Decimal(18, 4), false), func(r int) (parquet.Value, any) {
			x := int64(r)*123456789012345 - 999999999999999999
			return parquet.Int64Value(x), dec(x, 4)
		}},
		{"dfix", parquet.Optional(parquet.Decimal(10, 38, parquet.FixedLenByteArrayType(16))), col("dfix", batch.Decimal(38, 10), true), func(r int) (parquet.Value, any) {
			if null(r) {
				return parquet.Value{}, nil
			}
			v := new(big.Int).Add(big37, big.NewInt(int64(r)))
			if r%2 == 1 {
				v.Neg(v)
			}
			return parquet.FixedLenByteArrayValue(bigBytes(v, 16)), batch.Decimal128Value{Unscaled: batch.Dec128FromBig(v), Scale: 10}
		}},
		{"dba", parquet.Decimal(3, 20, parquet.ByteArrayType), col("dba", batch.Decimal(20, 3), false), func(r int) (parquet.Value, any) {
			x := int64(r*r*r*1001) - 300
			return parquet.ByteArrayValue(minimalBytes(x)), dec(x, 3)
		}},
		{"uuid", parquet.UUID(), col("uuid", batch.String, false), func(r int) (parquet.Value, any) {
			b := []byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, byte(r)}
			return parquet.FixedLenByteArrayValue(b), fmt.Sprintf("123e4567-e89b-12d3-a456-4266141740%02x", byte(r))
		}},
		{"js", parquet.JSON(), col("js", batch.String, false), func(r int) (parquet.Value, any) {
			s := fmt.Sprintf(`{"n":%d}`, r)
			return parquet.ByteArrayValue([]byte(s)), s
		}},
		{"en", parquet.Enum(), col("en", batch.String, false), func(r int) (parquet.Value, any) {
			s := []string{"RED", "GREEN"}[r%2]
			return parquet.ByteArrayValue([]byte(s)), s
		}},
		{"dict", parquet.Optional(parquet.Encoded(parquet.String(), &parquet.RLEDictionary)), col("dict", batch.String, true), func(r int) (parquet.Value, any) {
			if r%6 == 5 {
				return parquet.Value{}, nil
			}
			s := []string{"low", "mid", "high"}[r%3]
			return parquet.ByteArrayValue([]byte(s)), s
		}},
		{"dict_i", parquet.Encoded(parquet.Leaf(parquet.Int64Type), &parquet.RLEDictionary), col("dict_i", batch.Int64, false), func(r int) (parquet.Value, any) {
			x := int64(r % 3 * 100)
			return parquet.Int64Value(x), x
		}},
	}
}

// writeTyped writes n rows of typedColumns and returns the file and the
// expected rows.
func writeTyped(t testing.TB, path string, n, rowGroup int, opts ...parquet.WriterOption) (File, batch.Schema, [][]any) {
	t.Helper()
	tcs := typedColumns()
	var pcs []pcol
	var s batch.Schema
	want := make([][]any, n)
	for _, tc := range tcs {
		pc := pcol{name: tc.name, node: tc.node}
		for r := range n {
			v, w := tc.gen(r)
			if w == nil {
				pc.vals = append(pc.vals, nil)
			} else {
				pc.vals = append(pc.vals, v)
			}
			want[r] = append(want[r], w)
		}
		pcs = append(pcs, pc)
		s.Columns = append(s.Columns, tc.want)
	}
	writeParquet(t, path, pcs, rowGroup, opts...)
	return fileOf(t, path), s, want
}

func wantText(rows [][]any) []string {
	var out []string
	for _, r := range rows {
		parts := make([]string, len(r))
		for i, v := range r {
			switch x := v.(type) {
			case nil:
				parts[i] = "NULL"
			case time.Time:
				parts[i] = x.Format(time.RFC3339Nano)
			case []byte:
				parts[i] = fmt.Sprintf("0x%x", x)
			default:
				parts[i] = fmt.Sprint(x)
			}
		}
		out = append(out, strings.Join(parts, "|"))
	}
	return out
}

func TestParquetEveryType(t *testing.T) {
	cases := []struct {
		name    string
		rows    int
		rg      int
		maxRows int
		opts    []parquet.WriterOption
	}{
		{name: "one row group", rows: 10, maxRows: 100},
		{name: "row groups of 4, chunks of 3", rows: 10, rg: 4, maxRows: 3},
		{name: "small pages, data page v1", rows: 300, rg: 128, maxRows: 50, opts: []parquet.WriterOption{parquet.PageBufferSize(256), parquet.DataPageVersion(1)}},
		{name: "small pages, snappy", rows: 300, rg: 100, maxRows: 77, opts: []parquet.WriterOption{parquet.PageBufferSize(512), parquet.Compression(&parquet.Snappy)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "typed.parquet")
			f, want, rows := writeTyped(t, path, tc.rows, tc.rg, tc.opts...)
			got, err := ParquetSchema(path)
			if err != nil {
				t.Fatal(err)
			}
			// The file's order is by name (parquet.Group); compare as sets.
			if diff := cmp.Diff(sortedCols(want), sortedCols(got)); diff != "" {
				t.Errorf("ParquetSchema (-want +got):\n%s", diff)
			}
			chunks, err := readAll(t, f, FormatParquet, want, ReadOptions{MaxRows: tc.maxRows})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantText(rows), rowsText(chunks)); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			var bytes int64
			for i, c := range chunks {
				if c.Batch.Len() > tc.maxRows {
					t.Errorf("chunk %d has %d rows, MaxRows %d", i, c.Batch.Len(), tc.maxRows)
				}
				if c.Done != (i == len(chunks)-1) {
					t.Errorf("chunk %d: Done %v", i, c.Done)
				}
				if len(c.DeadLetters) > 0 {
					t.Errorf("chunk %d: dead letters %v", i, c.DeadLetters)
				}
				bytes += c.Bytes
			}
			if bytes != f.Size {
				t.Errorf("chunk bytes add up to %d, file has %d", bytes, f.Size)
			}
		})
	}
}

func sortedCols(s batch.Schema) map[string]batch.Column {
	m := map[string]batch.Column{}
	for _, c := range s.Columns {
		m[c.Name] = c
	}
	return m
}

func TestParquetConversionsAndMissingColumns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typed.parquet")
	f, _, rows := writeTyped(t, path, 8, 3)
	idx := map[string]int{}
	for i, tc := range typedColumns() {
		idx[tc.name] = i
	}
	s := cols(
		col("d32", batch.Decimal(12, 4), false), // wider decimal: rescaled
		col("i64", batch.Decimal(25, 2), false), // int64 into decimal
		col("day", batch.Timestamp, false),      // date into timestamp
		col("raw", batch.String, false),         // bytes as string
		col("s", batch.Bytes, true),             // string as bytes
		col("absent", batch.Float64, true),      // not in the file: NULL
		col("en", batch.String, false),
	)
	chunks, err := readAll(t, f, FormatParquet, s, ReadOptions{MaxRows: 5})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	invalid := 0
	for _, r := range rows {
		d32 := r[idx["d32"]].(batch.Decimal128Value)
		i64 := r[idx["i64"]].(int64)
		day := r[idx["day"]].(batch.DateValue)
		raw := r[idx["raw"]].([]byte)
		if !utf8.Valid(raw) {
			invalid++ // a dead letter, not a string
			continue
		}
		sv := "NULL"
		if x, ok := r[idx["s"]].(string); ok {
			sv = fmt.Sprintf("0x%x", []byte(x))
		}
		want = append(want, strings.Join([]string{
			batch.FormatDecimal(batch.Dec128FromInt64(d32.Unscaled.Big().Int64()*100), 4),
			batch.FormatDecimal(batch.Dec128FromInt64(i64*100), 2),
			day.Time().Format(time.RFC3339Nano),
			string(raw),
			sv,
			"NULL",
			r[idx["en"]].(string),
		}, "|"))
	}
	if diff := cmp.Diff(want, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	var dls []string
	for _, c := range chunks {
		for _, d := range c.DeadLetters {
			if d.Reason != batch.ReasonInvalidUTF8 || !strings.Contains(d.Error, "raw") || !strings.Contains(d.Error, "is not valid UTF-8") {
				t.Errorf("dead letter %+v, want raw as %s", d, batch.ReasonInvalidUTF8)
			}
			dls = append(dls, d.Position)
		}
	}
	if invalid == 0 || len(dls) != invalid {
		t.Errorf("dead letters at %v, want %d (the rows whose raw bytes are not UTF-8)", dls, invalid)
	}
}

func TestParquetFileErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeParquet(t, good, []pcol{
		{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: []any{parquet.Int64Value(1), parquet.Int64Value(2)}},
		{name: "name", node: parquet.String(), vals: []any{parquet.ByteArrayValue([]byte("a")), parquet.ByteArrayValue([]byte("b"))}},
		{name: "amount", node: parquet.Decimal(2, 9, parquet.Int32Type), vals: []any{parquet.Int32Value(1), parquet.Int32Value(2)}},
		{name: "at", node: parquet.Time(parquet.Millisecond), vals: []any{parquet.Int32Value(1), parquet.Int32Value(2)}},
		{name: "tags", node: parquet.Optional(parquet.Group{"x": parquet.String()}), vals: []any{nil, nil}, path: []string{"tags", "x"}},
	}, 0)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badMagic := append([]byte("NOPE"), data[4:]...)
	truncated := data[:len(data)-10]
	garbageFooter := append([]byte{}, data...)
	for i := len(data) - 8 - 40; i < len(data)-8; i++ {
		garbageFooter[i] = 0xA5
	}
	hugeFooter := append([]byte{}, data...)
	binary.LittleEndian.PutUint32(hugeFooter[len(data)-8:], math.MaxUint32)

	cases := []struct {
		name   string
		path   string
		schema batch.Schema
		column string
		want   string
	}{
		{name: "missing non-nullable column", path: good, schema: cols(col("id", batch.Int64, false), col("price", batch.Float64, false)),
			column: "price", want: "missing from the file, and the column is not nullable"},
		{name: "string into int64", path: good, schema: cols(col("name", batch.Int64, false)),
			column: "name", want: "is string in the file"},
		{name: "decimal too narrow", path: good, schema: cols(col("amount", batch.Decimal(9, 3), false)),
			column: "amount", want: "does not load into decimal(9,3)"},
		{name: "int64 into narrow decimal", path: good, schema: cols(col("id", batch.Decimal(18, 0), false)),
			column: "id", want: "does not load into decimal(18,0)"},
		{name: "unsupported TIME", path: good, schema: cols(col("at", batch.Int64, false)),
			column: "at", want: "has no sluice type"},
		{name: "nested list", path: good, schema: cols(col("tags", batch.String, true)),
			column: "tags", want: "nested group"},
		{name: "bad magic", path: variant("magic.parquet", badMagic), schema: cols(col("id", batch.Int64, false)),
			want: "not a Parquet file"},
		{name: "truncated", path: variant("trunc.parquet", truncated), schema: cols(col("id", batch.Int64, false)),
			want: "truncated"},
		{name: "garbage footer", path: variant("garbage.parquet", garbageFooter), schema: cols(col("id", batch.Int64, false)),
			want: "corrupt Parquet file"},
		{name: "footer longer than the file", path: variant("huge.parquet", hugeFooter), schema: cols(col("id", batch.Int64, false)),
			want: "corrupt Parquet file: footer of 4294967295 bytes"},
		{name: "tiny file", path: variant("tiny.parquet", []byte("PAR1")), schema: cols(col("id", batch.Int64, false)),
			want: "not a Parquet file: 4 bytes"},
		{name: "no such file", path: filepath.Join(dir, "nope.parquet"), schema: cols(col("id", batch.Int64, false)),
			want: "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := File{Name: "data/" + filepath.Base(tc.path), Path: tc.path}
			_, err := readAll(t, f, FormatParquet, tc.schema, ReadOptions{})
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FileError", err)
			}
			if fe.File != f.Name || fe.Column != tc.column {
				t.Errorf("FileError names file %q column %q, want %q %q", fe.File, fe.Column, f.Name, tc.column)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f.Name) {
				t.Errorf("error %q does not name the file and say %q", err, tc.want)
			}
		})
	}
	t.Run("ParquetSchema names the unsupported column", func(t *testing.T) {
		_, err := ParquetSchema(good)
		var fe *FileError
		if !errors.As(err, &fe) || fe.Column != "at" {
			t.Fatalf("error %v, want a *FileError on column at", err)
		}
	})
}

func TestParquetCorruptPage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.parquet")
	n := 2000
	vals := make([]any, n)
	for i := range vals {
		vals[i] = parquet.ByteArrayValue([]byte(fmt.Sprintf("value-%06d-%s", i, strings.Repeat("x", i%50))))
	}
	writeParquet(t, path, []pcol{{name: "s", node: parquet.String(), vals: vals}}, 500,
		parquet.Compression(&parquet.Snappy), parquet.PageBufferSize(4096))
	pf, closeFile, err := openParquetFile(File{Name: "c.parquet", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	// The third row group's data starts here: damage its page header.
	off := pf.Metadata().RowGroups[2].Columns[0].MetaData.DataPageOffset
	closeFile()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := off; i < off+24; i++ {
		data[i] = 0xff
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f := fileOf(t, path)
	chunks, err := readAll(t, f, FormatParquet, cols(col("s", batch.String, false)), ReadOptions{MaxRows: 500})
	var fe *FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "c.parquet") {
		t.Fatalf("error %v, want a *FileError naming the file", err)
	}
	if len(chunks) != 2 {
		t.Errorf("read %d chunks before the damaged row group, want 2", len(chunks))
	}
	for _, c := range chunks {
		if c.Done {
			t.Error("a chunk before the damage says Done")
		}
	}
}

func TestParquetDeadLetters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dl.parquet")
	writeParquet(t, path, []pcol{
		{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: []any{
			parquet.Int64Value(1), parquet.Int64Value(2), parquet.Int64Value(3), parquet.Int64Value(4), parquet.Int64Value(5)}},
		{name: "name", node: parquet.Optional(parquet.String()), vals: []any{
			parquet.ByteArrayValue([]byte("a")), nil, parquet.ByteArrayValue([]byte("c")), parquet.ByteArrayValue([]byte("d")), nil}},
		// decimal(4,2) holding values past 4 digits: a damaged writer.
		{name: "amount", node: parquet.Decimal(2, 4, parquet.Int32Type), vals: []any{
			parquet.Int32Value(1234), parquet.Int32Value(1), parquet.Int32Value(123456), parquet.Int32Value(-9999), parquet.Int32Value(7)}},
	}, 3)
	f := fileOf(t, path)
	s := cols(col("id", batch.Int64, false), col("name", batch.String, false), col("amount", batch.Decimal(4, 2), false))
	chunks, err := readAll(t, f, FormatParquet, s, ReadOptions{MaxRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Fatalf("%d chunks, want 1", len(chunks))
	}
	c := chunks[0]
	if diff := cmp.Diff([]string{"1|a|12.34", "4|d|-99.99"}, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0, 3}, c.Rows); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}
	type dl struct{ Position, Reason, Error, Payload string }
	var got []dl
	for _, d := range c.DeadLetters {
		if d.Source != "dl.parquet" {
			t.Errorf("dead letter source %q", d.Source)
		}
		got = append(got, dl{d.Position, d.Reason, d.Error, string(d.Payload)})
	}
	want := []dl{
		{"2", batch.ReasonMissingField, `field "name": null, and the column is not nullable`, `{"id":2,"name":null,"amount":"0.01"}`},
		{"3", batch.ReasonTypeMismatch, `field "amount": 1234.56 does not fit decimal(4,2)`, `{"id":3,"name":"c","amount":"0.00"}`},
		{"5", batch.ReasonMissingField, `field "name": null, and the column is not nullable`, `{"id":5,"name":null,"amount":"0.07"}`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if c.Next != 5 || !c.Done {
		t.Errorf("Next %d Done %v, want 5 true", c.Next, c.Done)
	}
}

func TestParquetResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.parquet")
	f, s, rows := writeTyped(t, path, 200, 30, parquet.PageBufferSize(300))
	all := wantText(rows)
	for _, first := range []int{7, 30, 64} {
		chunks, err := readAll(t, f, FormatParquet, s, ReadOptions{MaxRows: first})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			for _, again := range []int{5, 1000} {
				rest, err := readAll(t, f, FormatParquet, s, ReadOptions{Start: c.Next, MaxRows: again})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(all[c.Next:], rowsText(rest), cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("resume at %d with MaxRows %d (-want +got):\n%s", c.Next, again, diff)
				}
				if len(rest) == 0 || !rest[len(rest)-1].Done {
					t.Fatalf("resume at %d: no last chunk with Done", c.Next)
				}
				if rest[0].FirstRow != c.Next {
					t.Errorf("resume at %d: first chunk starts at %d", c.Next, rest[0].FirstRow)
				}
				var bytes int64 = rest[0].Skipped
				for _, r := range rest {
					bytes += r.Bytes
				}
				if bytes != f.Size {
					t.Errorf("resume at %d: skipped and read bytes add up to %d, file has %d", c.Next, bytes, f.Size)
				}
			}
		}
	}
}

func TestParquetEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.parquet")
	writeParquet(t, path, []pcol{{name: "id", node: parquet.Leaf(parquet.Int64Type)}}, 0)
	chunks, err := readAll(t, fileOf(t, path), FormatParquet, cols(col("id", batch.Int64, false)), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := fileOf(t, path)
	if len(chunks) != 1 || chunks[0].Batch.Len() != 0 || !chunks[0].Done || chunks[0].Next != 0 ||
		chunks[0].Bytes != f.Size || chunks[0].Skipped != 0 {
		t.Fatalf("chunks %+v, want one empty chunk with Done and the file's bytes", chunks)
	}
}

func TestParquetBoundedChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "many.parquet")
	const groups, per = 40, 500
	ids := make([]any, groups*per)
	names := make([]any, groups*per)
	for i := range ids {
		ids[i] = parquet.Int64Value(int64(i))
		names[i] = parquet.ByteArrayValue([]byte(fmt.Sprintf("name-%d", i)))
	}
	writeParquet(t, path, []pcol{
		{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: ids},
		{name: "name", node: parquet.String(), vals: names},
	}, per, parquet.PageBufferSize(1024))
	f := fileOf(t, path)
	r, err := Open(f, FormatParquet, cols(col("id", batch.Int64, false), col("name", batch.String, false)), ReadOptions{MaxRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := int64(0)
	chunks := 0
	for {
		c, err := r.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if n := c.Batch.Len(); n > 64 || cap(c.Batch.Vectors[0].Ints) > 64 {
			t.Fatalf("chunk of %d rows (capacity %d) with MaxRows 64", n, cap(c.Batch.Vectors[0].Ints))
		}
		for i, id := range c.Batch.Vectors[0].Ints {
			if id != next || c.Batch.Vectors[1].Strs[i] != fmt.Sprintf("name-%d", next) {
				t.Fatalf("row %d is %d %q", next, id, c.Batch.Vectors[1].Strs[i])
			}
			next++
		}
		if c.RowGroup != c.FirstRow/per {
			t.Errorf("chunk at row %d says row group %d", c.FirstRow, c.RowGroup)
		}
	}
	if next != groups*per || chunks != (groups*per+63)/64 {
		t.Errorf("read %d rows in %d chunks", next, chunks)
	}
}

func TestParquetHiveAndFilePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "year=2024", "day=2024-05-06", "part.parquet")
	writeParquet(t, path, []pcol{
		{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: []any{parquet.Int64Value(1), parquet.Int64Value(2)}},
		{name: "year", node: parquet.String(), vals: []any{parquet.ByteArrayValue([]byte("x")), parquet.ByteArrayValue([]byte("y"))}},
	}, 0)
	files, err := Plan(dir, "**/*.parquet")
	if err != nil || len(files) != 1 {
		t.Fatalf("Plan: %v %v", files, err)
	}
	hive, err := HiveTypes(files, batch.Schema{})
	if err != nil {
		t.Fatal(err)
	}
	s := cols(col(FieldFilePath, batch.String, false), col("day", batch.Date, false), col("id", batch.Int64, false),
		col("year", batch.Int64, false), col("month", batch.Int64, true))
	hive.Columns = append(hive.Columns, col("month", batch.Int64, true))
	chunks, err := readAll(t, files[0], FormatParquet, s, ReadOptions{Hive: hive})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"year=2024/day=2024-05-06/part.parquet|2024-05-06|1|2024|NULL",
		"year=2024/day=2024-05-06/part.parquet|2024-05-06|2|2024|NULL",
	}
	if diff := cmp.Diff(want, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	hive.Columns[len(hive.Columns)-1].Nullable = false
	s.Columns[len(s.Columns)-1].Nullable = false
	_, err = readAll(t, files[0], FormatParquet, s, ReadOptions{Hive: hive})
	var fe *FileError
	if !errors.As(err, &fe) || fe.Column != "month" {
		t.Errorf("a non-nullable Hive column the path lacks: error %v, want a *FileError on month", err)
	}
}

func TestOpenRejects(t *testing.T) {
	f := File{Name: "x", Path: "/nonexistent"}
	cases := []struct {
		name   string
		format string
		schema batch.Schema
		want   string
	}{
		{"kafka metadata", FormatParquet, cols(col("_kafka_offset", batch.Int64, false)), "Kafka metadata"},
		{"file path not string", FormatJSONL, cols(col(FieldFilePath, batch.Bytes, false)), "is string"},
		{"duplicate column", FormatJSONL, cols(col("a", batch.Int64, false), col("a", batch.Int64, false)), "declared twice"},
		{"unknown format", "csv", cols(col("a", batch.Int64, false)), "unknown format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(f, tc.format, tc.schema, ReadOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestScaleDec(t *testing.T) {
	cases := []struct {
		name string
		in   string
		k    int
		want string // "" for overflow
	}{
		{"zero scale", "-12", 0, "-12"},
		{"small", "123", 3, "123000"},
		{"negative", "-123", 20, "-12300000000000000000000"},
		{"to 38 digits", "9", 37, "9" + strings.Repeat("0", 37)},
		{"overflow", "99999999999999999999", 19, ""},
		{"huge overflow", "1", 39, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := new(big.Int).SetString(tc.in, 10)
			got, ok := scaleDec(batch.Dec128FromBig(v), tc.k)
			if tc.want == "" {
				if ok {
					t.Errorf("got %s, want overflow", got.Big())
				}
				return
			}
			if !ok || got.Big().String() != tc.want {
				t.Errorf("got %s %v, want %s", got.Big(), ok, tc.want)
			}
		})
	}
}

func TestDecFromBigEndian(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want string
		ok   bool
	}{
		{"empty", nil, "0", true},
		{"minus one", []byte{0xff}, "-1", true},
		{"300", []byte{0x01, 0x2c}, "300", true},
		{"sign-extended 17 bytes", append([]byte{0xff}, bigBytes(big.NewInt(-5), 16)...), "-5", true},
		{"17 bytes too wide", append([]byte{0x01}, make([]byte, 16)...), "", false},
		{"17 bytes sign flip", append([]byte{0x00}, bigBytes(big.NewInt(-5), 16)...), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decFromBigEndian(tc.in)
			if ok != tc.ok || (ok && got.Big().String() != tc.want) {
				t.Errorf("got %s %v, want %s %v", got.Big(), ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParquetValuesOutOfRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "range.parquet")
	writeParquet(t, path, []pcol{
		{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: []any{parquet.Int64Value(1), parquet.Int64Value(2), parquet.Int64Value(3)}},
		{name: "ts", node: parquet.Timestamp(parquet.Millisecond), vals: []any{
			parquet.Int64Value(0), parquet.Int64Value(math.MaxInt64 / 10), parquet.Int64Value(-1)}},
		{name: "day", node: parquet.Date(), vals: []any{
			parquet.Int32Value(math.MinInt32), parquet.Int32Value(0), parquet.Int32Value(1)}},
		// Dictionary-encoded decimal(3,1) with a value past 3 digits.
		{name: "d", node: parquet.Encoded(parquet.Decimal(1, 3, parquet.Int32Type), &parquet.RLEDictionary), vals: []any{
			parquet.Int32Value(5), parquet.Int32Value(5), parquet.Int32Value(12345)}},
	}, 0)
	s := cols(col("id", batch.Int64, false), col("ts", batch.Timestamp, false), col("day", batch.Timestamp, false), col("d", batch.Decimal(3, 1), false))
	chunks, err := readAll(t, fileOf(t, path), FormatParquet, s, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string(nil), rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	var got []string
	for _, d := range chunks[0].DeadLetters {
		got = append(got, d.Position+" "+d.Reason+" "+d.Error)
	}
	want := []string{
		`1 type_mismatch field "day": date -2147483648 days from 1970-01-01 is out of the timestamp range`,
		`2 type_mismatch field "ts": timestamp 922337203685477580 ms is out of the timestamp range`,
		`3 type_mismatch field "d": 1234.5 does not fit decimal(3,1)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
}

func TestDeadLetterPayloadIsTheRowAsJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typed.parquet")
	f, s, _ := writeTyped(t, path, 2, 0)
	for i := range s.Columns {
		if s.Columns[i].Name == "i32" {
			s.Columns[i].Nullable = false // row 1 holds a NULL there
		}
	}
	chunks, err := readAll(t, f, FormatParquet, s, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dls := chunks[0].DeadLetters
	if len(dls) != 1 || dls[0].Position != "2" {
		t.Fatalf("dead letters %+v, want row 2", dls)
	}
	var row map[string]any
	dec := json.NewDecoder(bytes.NewReader(dls[0].Payload))
	dec.UseNumber()
	if err := dec.Decode(&row); err != nil {
		t.Fatalf("payload %s: %v", dls[0].Payload, err)
	}
	want := map[string]any{
		"i64": json.Number("-2000"), "i32": nil, "u32": json.Number("4294967294"), "u64": "18446744073709551614",
		"f32": json.Number("1.5"), "f64": nil, "b": false, "s": nil, "raw": "AQ==", "fixed": "AQID",
		"day": "1968-05-11", "ts_ms": "2024-03-01T13:34:56.789Z", "ts_us": nil, "ts_ns": "1969-12-31T23:59:59.999999Z",
		"i96": "2024-04-12T04:34:56.789123Z", "d32": "-376.55", "d64": "-99987654321098.7654", "dfix": nil,
		"dba": "0.701", "uuid": "123e4567-e89b-12d3-a456-426614174001", "js": `{"n":1}`, "en": "GREEN", "dict": "mid",
		"dict_i": json.Number("100"),
	}
	if diff := cmp.Diff(want, row); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
}

// TestParquetInvalidUTF8AcrossValues checks that two values that are not
// UTF-8 on their own are refused though together they are ("caf\xc3" then
// "\xa9t\xc3\xa9").
func TestParquetInvalidUTF8AcrossValues(t *testing.T) {
	type row struct {
		S string `parquet:"s"`
	}
	path := filepath.Join(t.TempDir(), "split.parquet")
	if err := parquet.WriteFile(path, []row{{"ok"}, {"caf\xc3"}, {"\xa9t\xc3\xa9"}, {"fine"}}); err != nil {
		t.Fatal(err)
	}
	f := File{Name: "split.parquet", Path: path}
	chunks, err := readAll(t, f, FormatParquet, cols(col("s", batch.String, false)), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	bad := 0
	for _, c := range chunks {
		kept = append(kept, c.Batch.Vectors[0].Strs...)
		for _, d := range c.DeadLetters {
			if d.Reason == batch.ReasonInvalidUTF8 {
				bad++
			}
		}
	}
	if !slices.Equal(kept, []string{"ok", "fine"}) || bad != 2 {
		t.Fatalf("kept %q with %d invalid_utf8 dead letters, want ok and fine, and 2", kept, bad)
	}
}

// TestParquetStructs checks that the fields of a struct (a plain group,
// however deep) are columns named by their path, read with the nulls of
// their optional ancestors, and that a list is refused by name.
func TestParquetStructs(t *testing.T) {
	type address struct {
		Zip string `parquet:"zip"`
	}
	type customer struct {
		FirstName string   `parquet:"firstName"`
		Address   *address `parquet:"address,optional"`
	}
	type row struct {
		ID       int64     `parquet:"id"`
		Customer *customer `parquet:"customer,optional"`
	}
	path := filepath.Join(t.TempDir(), "s.parquet")
	rows := []row{{1, &customer{"ann", &address{"1000"}}}, {2, &customer{"bob", nil}}, {3, nil}}
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	s, raw, err := ParquetColumns(path, func(n string) string { return strings.ToLower(n) })
	if err != nil {
		t.Fatal(err)
	}
	want := cols(col("id", batch.Int64, false), col("customer__firstname", batch.String, true), col("customer__address__zip", batch.String, true))
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("schema (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"id", "customer.firstName", "customer.address.zip"}, raw); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	chunks, err := readAll(t, fileOf(t, path), FormatParquet, s, ReadOptions{Names: func(n string) string { return strings.ToLower(n) }})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1|ann|1000", "2|bob|NULL", "3|NULL|NULL"}, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	type listed struct {
		ID   int64    `parquet:"id"`
		Tags []string `parquet:"tags,list"`
	}
	lpath := filepath.Join(t.TempDir(), "l.parquet")
	if err := parquet.WriteFile(lpath, []listed{{1, []string{"a"}}}); err != nil {
		t.Fatal(err)
	}
	var fe *FileError
	if _, err := ParquetSchema(lpath); !errors.As(err, &fe) || fe.Column != "tags" {
		t.Errorf("schema of a file with a list: %v, want a FileError naming tags", err)
	}
}

// TestParquetLists checks that the lists of a table typed by its files
// become child rows: each element linked to its row, null and empty lists
// without any, a bad element making its row (and its elements) a dead
// letter named by its path, and a resumed read giving the same ids.
func TestParquetLists(t *testing.T) {
	type item struct {
		SKU *string `parquet:"sku,optional"`
		Qty int64   `parquet:"qty"`
	}
	type row struct {
		ID    int64    `parquet:"id"`
		Items []item   `parquet:"items,list"`
		Tags  []string `parquet:"tags,list"`
	}
	sp := func(s string) *string { return &s }
	rows := []row{
		{ID: 1, Items: []item{{sp("a"), 2}, {nil, 1}}, Tags: []string{"x"}},
		{ID: 2},
		{ID: 3, Items: []item{{sp("caf\xe9"), 1}}},
		{ID: 4, Tags: []string{"y", "z"}},
	}
	path := filepath.Join(t.TempDir(), "l.parquet")
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	root, _, kids, err := ParquetTables(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := root.Names(); !slices.Equal(got, []string{"id"}) {
		t.Fatalf("root %v", got)
	}
	if got := kids["items"].Schema.Names(); !slices.Equal(got, []string{"sku", "qty"}) {
		t.Fatalf("items %v", got)
	}
	if got := kids["tags"].Schema.Names(); !slices.Equal(got, []string{"value"}) {
		t.Fatalf("tags %v", got)
	}
	links := []batch.Column{{Name: batch.RootIDColumn, Type: batch.String}, {Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.ListIdxColumn, Type: batch.Int64}, {Name: batch.IDColumn, Type: batch.String}}
	children := map[string]batch.Schema{
		"items": {Columns: append(slices.Clone(links), kids["items"].Schema.Columns...)},
		"tags":  {Columns: append(slices.Clone(links), kids["tags"].Schema.Columns...)},
	}
	s := cols(col("id", batch.Int64, false), col(batch.IDColumn, batch.String, true))
	read := func(start int64) ([]string, map[string][]string, []string) {
		chunks, err := readAll(t, fileOf(t, path), FormatParquet, s, ReadOptions{Children: children, Start: start, MaxRows: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		var out []string
		got := map[string][]string{}
		var dls []string
		for _, c := range chunks {
			for i := range c.Batch.Len() {
				id := c.Batch.Vectors[1].Value(i).(string)
				ids[id] = fmt.Sprint(c.Batch.Vectors[0].Value(i))
				out = append(out, ids[id]+":"+id)
			}
			for _, d := range c.DeadLetters {
				dls = append(dls, d.Position+" "+d.Reason+" "+d.Error)
			}
			for suffix, b := range c.Children {
				for i := range b.Len() {
					vals := []string{ids[b.Vectors[1].Value(i).(string)], fmt.Sprint(b.Vectors[2].Value(i))}
					for _, v := range b.Vectors[4:] {
						vals = append(vals, fmt.Sprint(v.Value(i)))
					}
					got[suffix] = append(got[suffix], strings.Join(vals, ","))
				}
			}
		}
		return out, got, dls
	}
	all, got, dls := read(0)
	if want := map[string][]string{"items": {"1,0,a,2", "1,1,<nil>,1"}, "tags": {"1,0,x", "4,0,y", "4,1,z"}}; !cmp.Equal(got, want) {
		t.Fatalf("child rows %v, want %v", got, want)
	}
	if want := []string{`3 invalid_utf8 field "items[0].sku": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`}; !slices.Equal(dls, want) {
		t.Fatalf("dead letters %q, want %q", dls, want)
	}
	// A read resumed at row 3 gives row 4 and its tags the same ids.
	later, got, _ := read(3)
	if len(later) != 1 || later[0] != all[len(all)-1] || len(got["tags"]) != 2 {
		t.Fatalf("resumed read %v %v, want row 4 as before (%v)", later, got, all)
	}
}

// TestParquetListsOfLists checks that a list of lists, of scalars and of
// structs, becomes the child table of a child table: a row per inner list
// in <list>, a row per element in <list>__value, each linked to its parent
// by the ids a JSON list of lists gets (the parent's id, the child
// table and the index), empty lists without rows, a bad element deep down
// making its row a dead letter named by its path, and a resumed read
// giving the same ids.
func TestParquetListsOfLists(t *testing.T) {
	type box struct {
		SKU string `parquet:"sku"`
		Qty int64  `parquet:"qty"`
	}
	type row struct {
		ID     int64     `parquet:"id"`
		Matrix [][]int64 `parquet:"matrix,list"`
		Boxes  [][]box   `parquet:"boxes,list"`
	}
	rows := []row{
		{ID: 1, Matrix: [][]int64{{1, 2}, {}, {3}}, Boxes: [][]box{{{"a", 1}}, {{"b", 2}, {"c", 3}}}},
		{ID: 2},
		{ID: 3, Matrix: [][]int64{{4}}, Boxes: [][]box{{{"caf\xe9", 1}}}},
		{ID: 4, Matrix: [][]int64{{5, 6}}, Boxes: [][]box{{}, {{"d", 4}}}},
	}
	path := filepath.Join(t.TempDir(), "ll.parquet")
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
	_, _, kids, err := ParquetTables(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	shape := map[string]string{}
	for suffix, k := range kids {
		shape[suffix] = k.Parent + ":" + strings.Join(k.Schema.Names(), ",")
	}
	if want := map[string]string{"matrix": ":", "matrix__value": "matrix:value", "boxes": ":", "boxes__value": "boxes:sku,qty"}; !cmp.Equal(shape, want) {
		t.Fatalf("child tables %v, want %v", shape, want)
	}
	links := []batch.Column{{Name: batch.RootIDColumn, Type: batch.String}, {Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.ListIdxColumn, Type: batch.Int64}, {Name: batch.IDColumn, Type: batch.String}}
	children := map[string]batch.Schema{}
	for suffix, k := range kids {
		children[suffix] = batch.Schema{Columns: append(slices.Clone(links), k.Schema.Columns...)}
	}
	s := cols(col("id", batch.Int64, false), col(batch.IDColumn, batch.String, true))
	read := func(start int64) (map[string]string, []string, []string) {
		chunks, err := readAll(t, fileOf(t, path), FormatParquet, s, ReadOptions{Children: children, Start: start, MaxRows: 2})
		if err != nil {
			t.Fatal(err)
		}
		label := map[string]string{} // id -> row id, then [idx] per level
		var got, dls []string
		for _, c := range chunks {
			for i := range c.Batch.Len() {
				label[c.Batch.Vectors[1].Value(i).(string)] = fmt.Sprint(c.Batch.Vectors[0].Value(i))
			}
			for _, d := range c.DeadLetters {
				dls = append(dls, d.Position+" "+d.Reason+" "+d.Error)
			}
			for _, suffix := range slices.Sorted(maps.Keys(c.Children)) {
				b := c.Children[suffix]
				for i := range b.Len() {
					root, parent := b.Vectors[0].Value(i).(string), b.Vectors[1].Value(i).(string)
					idx, id := b.Vectors[2].Value(i).(int64), b.Vectors[3].Value(i).(string)
					if id != hashID(parent, suffix, strconv.FormatInt(idx, 10)) {
						t.Fatalf("%s row %d: id %s is not that of its parent, table and index", suffix, i, id)
					}
					if _, ok := label[root]; !ok || !strings.HasPrefix(label[parent], label[root]) {
						t.Fatalf("%s row %d: root %q is not its parent's (%q)", suffix, i, label[root], label[parent])
					}
					label[id] = fmt.Sprintf("%s[%d]", label[parent], idx)
					vals := []string{suffix, label[id]}
					for _, v := range b.Vectors[4:] {
						vals = append(vals, fmt.Sprint(v.Value(i)))
					}
					got = append(got, strings.Join(vals, " "))
				}
			}
		}
		return label, got, dls
	}
	_, got, dls := read(0)
	want := []string{
		"boxes 1[0]", "boxes 1[1]", "boxes__value 1[0][0] a 1", "boxes__value 1[1][0] b 2", "boxes__value 1[1][1] c 3",
		"matrix 1[0]", "matrix 1[1]", "matrix 1[2]", "matrix__value 1[0][0] 1", "matrix__value 1[0][1] 2", "matrix__value 1[2][0] 3",
		"boxes 4[0]", "boxes 4[1]", "boxes__value 4[1][0] d 4",
		"matrix 4[0]", "matrix__value 4[0][0] 5", "matrix__value 4[0][1] 6",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("child rows\n%q\nwant\n%q", got, want)
	}
	if want := []string{`3 invalid_utf8 field "boxes[0][0].sku": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`}; !slices.Equal(dls, want) {
		t.Fatalf("dead letters %q, want %q", dls, want)
	}
	all, _, _ := read(0)
	later, got, _ := read(3)
	for id, l := range later {
		if all[id] != l {
			t.Fatalf("resumed read: id %s is %q, before %q", id, l, all[id])
		}
	}
	if len(got) != 6 {
		t.Fatalf("resumed read at row 4: child rows %q", got)
	}
}
