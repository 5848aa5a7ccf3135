package local

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

var allTypes = batch.Schema{Columns: []batch.Column{
	{Name: "s", Type: batch.String},
	{Name: "i", Type: batch.Int64},
	{Name: "f", Type: batch.Float64},
	{Name: "b", Type: batch.Bool},
	{Name: "ts", Type: batch.Timestamp},
	{Name: "d", Type: batch.Date},
	{Name: "dec9", Type: batch.Decimal(9, 4)},
	{Name: "dec12", Type: batch.Decimal(12, 2)},
	{Name: "dec38", Type: batch.Decimal(38, 2)},
	{Name: "by", Type: batch.Bytes},
	{Name: "s_n", Type: batch.String, Nullable: true},
	{Name: "ts_n", Type: batch.Timestamp, Nullable: true},
}}

// allTypesRow is how a plain Parquet reader (parquet-go's generic reader,
// reflecting on this struct, not this package's reader) decodes the files.
type allTypesRow struct {
	S      string    `parquet:"s"`
	I      int64     `parquet:"i"`
	F      float64   `parquet:"f"`
	B      bool      `parquet:"b"`
	TS     time.Time `parquet:"ts"`
	D      time.Time `parquet:"d"`
	Dec9   int64     `parquet:"dec9"`
	Dec12  int64     `parquet:"dec12"`
	Dec38  [16]byte  `parquet:"dec38"`
	By     []byte    `parquet:"by"`
	SN     *string   `parquet:"s_n,optional"`
	TSN    *int64    `parquet:"ts_n,optional"`
	LoadID string    `parquet:"_sluice_load_id"`
}

// TestFileReadableByOtherReaders writes a file through a load and reads it
// back with parquet-go's generic API: the footer must carry the logical
// types other readers (DuckDB, pandas, ClickHouse) rely on, and the values
// must decode through them.
func TestFileReadableByOtherReaders(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, testOpts(dir))
	if err := s.Ensure(ctx, []sinks.Table{{Name: "all", Schema: allTypes}}); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(1969, 7, 20, 20, 17, 40, 123456000, time.UTC)
	neg := batch.Dec128FromBig(big.NewInt(-123456789))
	b := batch.New(allTypes, 2)
	for r := range 2 {
		b.Vectors[0].AppendString("héllo")
		b.Vectors[1].AppendInt(-7)
		b.Vectors[2].AppendFloat(2.5)
		b.Vectors[3].AppendBool(true)
		b.Vectors[4].AppendInt(ts.UnixMicro())
		b.Vectors[5].AppendInt(int64(batch.DateFromTime(ts)))
		b.Vectors[6].AppendDecimal(batch.Dec128FromInt64(-99999))
		b.Vectors[7].AppendDecimal(batch.Dec128FromInt64(12345))
		b.Vectors[8].AppendDecimal(neg)
		b.Vectors[9].AppendBytes([]byte{0, 1, 2})
		if r == 0 {
			b.Vectors[10].AppendNull()
			b.Vectors[11].AppendNull()
		} else {
			b.Vectors[10].AppendString("x")
			b.Vectors[11].AppendInt(5)
		}
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "load-1", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "all", b); err != nil {
		t.Fatal(err)
	}
	if err := ld.Commit(ctx, sinks.Commit{}); err != nil {
		t.Fatal(err)
	}
	// Through the table's folder, as a reader sees it.
	files, err := filepath.Glob(filepath.Join(dir, "all", "*.parquet"))
	if err != nil || len(files) != 1 {
		t.Fatalf("table folder holds %v (%v), want one Parquet file", files, err)
	}
	pf := openParquet(t, files[0])

	type want struct {
		physical format.Type
		logical  any // the expected LogicalType.Value, nil for none
		length   int32
		optional bool
	}
	wants := []struct {
		name string
		want want
	}{
		{"s", want{physical: format.ByteArray, logical: &format.StringType{}}},
		{"i", want{physical: format.Int64, logical: &format.IntType{BitWidth: 64, IsSigned: true}}},
		{"f", want{physical: format.Double}},
		{"b", want{physical: format.Boolean}},
		{"ts", want{physical: format.Int64, logical: &format.TimestampType{IsAdjustedToUTC: true, Unit: format.TimeUnit{Value: &format.MicroSeconds{}}}}},
		{"d", want{physical: format.Int32, logical: &format.DateType{}}},
		{"dec9", want{physical: format.Int64, logical: &format.DecimalType{Scale: 4, Precision: 9}}},
		{"dec12", want{physical: format.Int64, logical: &format.DecimalType{Scale: 2, Precision: 12}}},
		{"dec38", want{physical: format.FixedLenByteArray, length: 16, logical: &format.DecimalType{Scale: 2, Precision: 38}}},
		{"by", want{physical: format.ByteArray}},
		{"s_n", want{physical: format.ByteArray, logical: &format.StringType{}, optional: true}},
		{"ts_n", want{physical: format.Int64, logical: &format.TimestampType{IsAdjustedToUTC: true, Unit: format.TimeUnit{Value: &format.MicroSeconds{}}}, optional: true}},
		{"_sluice_load_id", want{physical: format.ByteArray, logical: &format.StringType{}}},
	}
	elems := pf.Metadata().Schema[1:] // the footer's schema elements after the root
	if len(elems) != len(wants) {
		t.Fatalf("%d columns in the footer, want %d", len(elems), len(wants))
	}
	for i, w := range wants {
		t.Run(w.name, func(t *testing.T) {
			e := elems[i]
			if e.Name != w.name {
				t.Fatalf("column %d is %s, want %s (table order, load id last)", i, e.Name, w.name)
			}
			if e.Type.V != w.want.physical {
				t.Errorf("physical type %v, want %v", e.Type.V, w.want.physical)
			}
			if !reflect.DeepEqual(e.LogicalType.Value, w.want.logical) && !(w.want.logical == nil && e.LogicalType.Value == nil) {
				t.Errorf("logical type %v, want %v", e.LogicalType.Value, w.want.logical)
			}
			if w.want.length > 0 && e.TypeLength.V != w.want.length {
				t.Errorf("type length %d, want %d", e.TypeLength.V, w.want.length)
			}
			if got := e.RepetitionType.V == format.Optional; got != w.want.optional {
				t.Errorf("optional %v, want %v", got, w.want.optional)
			}
			if dec, ok := w.want.logical.(*format.DecimalType); ok && (e.Scale.V != dec.Scale || e.Precision.V != dec.Precision) {
				t.Errorf("legacy scale/precision %d/%d, want %d/%d", e.Scale.V, e.Precision.V, dec.Scale, dec.Precision)
			}
		})
	}
	for _, cc := range pf.Metadata().RowGroups[0].Columns {
		if cc.MetaData.Codec != format.Snappy {
			t.Errorf("column %v compressed with %v, want SNAPPY", cc.MetaData.PathInSchema, cc.MetaData.Codec)
		}
	}

	rows := make([]allTypesRow, 3)
	n, _ := parquet.NewGenericReader[allTypesRow](pf).Read(rows)
	if n != 2 {
		t.Fatalf("generic reader read %d rows, want 2", n)
	}
	var dec38 [16]byte
	binary.BigEndian.PutUint64(dec38[:8], uint64(neg.Hi))
	binary.BigEndian.PutUint64(dec38[8:], neg.Lo)
	x := "x"
	five := int64(5)
	for r, got := range rows[:2] {
		want := allTypesRow{S: "héllo", I: -7, F: 2.5, B: true, TS: ts, D: time.Date(1969, 7, 20, 0, 0, 0, 0, time.UTC),
			Dec9: -99999, Dec12: 12345, Dec38: dec38, By: []byte{0, 1, 2}, LoadID: "load-1"}
		if r == 1 {
			want.SN, want.TSN = &x, &five
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("row %d:\n got %+v\nwant %+v", r, got, want)
		}
	}
}

// TestFileStatistics checks the min/max statistics readers prune with: set
// and right for ordered columns, absent for 16-byte decimals (whose bytes
// would compare unsigned) and for the row ids (hashes).
func TestFileStatistics(t *testing.T) {
	dir := t.TempDir()
	schema := batch.Schema{Columns: []batch.Column{{Name: "i", Type: batch.Int64}, {Name: "dec38", Type: batch.Decimal(38, 0)},
		{Name: "s", Type: batch.String}, {Name: batch.RootIDColumn, Type: batch.String}, {Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.IDColumn, Type: batch.String, Nullable: true}}}
	fw, err := createFile(fsys.OS{}, filepath.Join(dir, "f.parquet"), schema, "l", loadCodec)
	if err != nil {
		t.Fatal(err)
	}
	b := batch.New(schema, 2)
	for _, x := range []int64{-5, 7} {
		b.Vectors[0].AppendInt(x)
		b.Vectors[1].AppendDecimal(batch.Dec128FromInt64(x))
		for c := 2; c < len(schema.Columns); c++ {
			b.Vectors[c].AppendString(fmt.Sprint("v", x))
		}
	}
	if err := fw.write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := fw.close(); err != nil {
		t.Fatal(err)
	}
	pf := openParquet(t, filepath.Join(dir, "f.parquet"))
	cols := pf.Metadata().RowGroups[0].Columns
	stats := cols[0].MetaData.Statistics
	if lo, hi := int64(binary.LittleEndian.Uint64(stats.MinValue)), int64(binary.LittleEndian.Uint64(stats.MaxValue)); lo != -5 || hi != 7 {
		t.Errorf("int64 statistics %d..%d, want -5..7", lo, hi)
	}
	if st := cols[1].MetaData.Statistics; len(st.MinValue) != 0 || len(st.MaxValue) != 0 || len(st.Min) != 0 || len(st.Max) != 0 {
		t.Errorf("16-byte decimal has statistics %x..%x", st.MinValue, st.MaxValue)
	}
	if st := cols[2].MetaData.Statistics; string(st.MinValue) != "v-5" || string(st.MaxValue) != "v7" {
		t.Errorf("string statistics %q..%q, want v-5..v7", st.MinValue, st.MaxValue)
	}
	for c := 3; c < len(schema.Columns); c++ {
		if st := cols[c].MetaData.Statistics; len(st.MinValue) != 0 || len(st.MaxValue) != 0 || len(st.Min) != 0 || len(st.Max) != 0 {
			t.Errorf("%s has statistics %q..%q", schema.Columns[c].Name, st.MinValue, st.MaxValue)
		}
	}
	for i, ci := range pf.ColumnIndexes() {
		if (i == 1 || i >= 3 && i < len(schema.Columns)) && len(ci.MinValues) > 0 && len(ci.MinValues[0]) > 0 {
			t.Errorf("%s has a column index with bounds %x", schema.Columns[i].Name, ci.MinValues)
		}
	}
	// Page bounds are in the column index, not in the page headers.
	if ci := pf.ColumnIndexes()[2]; len(ci.MinValues) != 1 || string(ci.MinValues[0]) != "v-5" || string(ci.MaxValues[0]) != "v7" {
		t.Errorf("string column index %q..%q, want one page of v-5..v7", ci.MinValues, ci.MaxValues)
	}
}

// TestWriteRejectsValuesThatDoNotFit checks that a value the file cannot
// store fails the Write before anything is written.
func TestWriteRejectsValuesThatDoNotFit(t *testing.T) {
	tests := []struct {
		name string
		col  batch.Column
		add  func(v *batch.Vector)
	}{
		{"date beyond int32 days", batch.Column{Name: "d", Type: batch.Date}, func(v *batch.Vector) { v.AppendInt(1 << 40) }},
		{"decimal beyond 18 digits", batch.Column{Name: "x", Type: batch.Decimal(18, 0)},
			func(v *batch.Vector) { v.AppendDecimal(batch.Dec128{Hi: 1}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, testOpts(t.TempDir()))
			schema := batch.Schema{Columns: []batch.Column{tc.col}}
			if err := s.Ensure(ctx, []sinks.Table{{Name: "t", Schema: schema}}); err != nil {
				t.Fatal(err)
			}
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "l", Pipeline: "p", Flow: "f"})
			if err != nil {
				t.Fatal(err)
			}
			b := batch.New(schema, 1)
			tc.add(b.Vectors[0])
			if err := ld.Write(ctx, "t", b); err == nil {
				t.Fatal("Write accepted a value that does not fit")
			}
			// The load is still usable: nothing was written.
			good := batch.New(schema, 1)
			if tc.col.Type.Kind == batch.KindDate {
				good.Vectors[0].AppendInt(1)
			} else {
				good.Vectors[0].AppendDecimal(batch.Dec128FromInt64(1))
			}
			if err := ld.Write(ctx, "t", good); err != nil {
				t.Fatal(err)
			}
			if err := ld.Commit(ctx, sinks.Commit{}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Scan(ctx, "t"); err != nil || got.Len() != 1 {
				t.Fatalf("scan: %v rows, %v; want 1", got.Len(), err)
			}
		})
	}
}

// TestRowGroups writes across row group boundaries, in one Write and over
// several, and reads every value back in order.
func TestRowGroups(t *testing.T) {
	defer func(n int) { rowGroupRows = n }(rowGroupRows)
	rowGroupRows = 1000
	schema := batch.Schema{Columns: []batch.Column{{Name: "i", Type: batch.Int64}, {Name: "s", Type: batch.String, Nullable: true}}}
	mk := func(from, to int) *batch.Batch {
		b := batch.New(schema, to-from)
		for i := from; i < to; i++ {
			b.Vectors[0].AppendInt(int64(i))
			if i%7 == 0 {
				b.Vectors[1].AppendNull()
			} else {
				b.Vectors[1].AppendString("v" + string(rune('a'+i%26)))
			}
		}
		return b
	}
	path := filepath.Join(t.TempDir(), "f.parquet")
	fw, err := createFile(fsys.OS{}, path, schema, "l", loadCodec)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 2500}, {2500, 2600}, {2600, 3000}, {3000, 3001}} {
		if err := fw.write(mk(r[0], r[1])); err != nil {
			t.Fatal(err)
		}
		if err := fw.endWrite(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fw.close(); err != nil {
		t.Fatal(err)
	}
	out := batch.New(batch.Schema{Columns: append(schema.Columns, batch.Column{Name: batch.LoadIDColumn, Type: batch.String})}, 0)
	groups := 0
	if err := readFile(fsys.OS{}, path, out, func() error { groups++; return nil }); err != nil {
		t.Fatal(err)
	}
	if groups != 4 {
		t.Errorf("%d row groups, want 4 (1000, 1000, 1000, 1)", groups)
	}
	want := mk(0, 3001)
	if out.Len() != want.Len() {
		t.Fatalf("%d rows, want %d", out.Len(), want.Len())
	}
	for i := range want.Len() {
		if out.Vectors[0].Ints[i] != int64(i) || out.Vectors[1].Value(i) != want.Vectors[1].Value(i) {
			t.Fatalf("row %d: %v, want %v", i, out.Row(i), want.Row(i))
		}
	}
}

// TestReadPageData checks the typed read path against the value-by-value
// one on every page of a file of every type, required and nullable, with
// NULLs, empty strings and several pages per column: both must append the
// same rows, and the typed path must take every kind it claims.
func TestReadPageData(t *testing.T) {
	var cols []batch.Column
	for _, c := range allTypes.Columns {
		if c.Nullable {
			continue
		}
		cols = append(cols, c, batch.Column{Name: c.Name + "_null", Type: c.Type, Nullable: true})
	}
	schema := batch.Schema{Columns: cols}
	const rows = 60_000
	b := batch.New(schema, rows)
	rng := rand.New(rand.NewPCG(1, 2))
	for r := range rows {
		for i, c := range schema.Columns {
			v := b.Vectors[i]
			if c.Nullable && rng.IntN(5) == 0 {
				v.AppendNull()
				continue
			}
			x := rng.Int64N(1 << 40)
			switch c.Type.Kind {
			case batch.KindString:
				v.AppendString(strings.Repeat("ab", r%7) + strconv.Itoa(r))
			case batch.KindBytes:
				v.AppendBytes([]byte(strings.Repeat("z", r%3)))
			case batch.KindInt64, batch.KindTimestamp:
				v.AppendInt(x - 1<<39)
			case batch.KindDate:
				v.AppendInt(x%40000 - 20000)
			case batch.KindFloat64:
				v.AppendFloat(float64(x) / 3)
			case batch.KindBool:
				v.AppendBool(x%2 == 0)
			case batch.KindDecimal:
				v.AppendDecimal(batch.Dec128FromInt64(x%99999 - 50000))
			}
		}
	}
	path := filepath.Join(t.TempDir(), "f.parquet")
	fw, err := createPlainFile(fsys.OS{}, path, schema, loadCodec)
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := fw.close(); err != nil {
		t.Fatal(err)
	}
	pf := openParquet(t, path)
	vals := make([]parquet.Value, valueChunk)
	for i, c := range schema.Columns {
		typed := c.Type.Kind != batch.KindBool && !(c.Type.Kind == batch.KindDecimal && c.Type.Precision > 18)
		fast, slow := batch.NewVector(c.Type, 0), batch.NewVector(c.Type, 0)
		pages := 0
		for _, rg := range pf.RowGroups() {
			pr := rg.ColumnChunks()[i].Pages()
			for {
				p, err := pr.ReadPage()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				pages++
				ok := readPageData(p, c, fast)
				if ok != typed {
					t.Fatalf("column %s: typed read %v, want %v", c.Name, ok, typed)
				}
				if err := readPage(p, c, slow, vals); err != nil {
					t.Fatal(err)
				}
				if !ok {
					if err := readPage(p, c, fast, vals); err != nil {
						t.Fatal(err)
					}
				}
			}
			pr.Close()
		}
		if c.Type.Kind == batch.KindString && pages < 2 {
			t.Errorf("column %s: %d page, want several", c.Name, pages)
		}
		if !reflect.DeepEqual(fast, slow) || !reflect.DeepEqual(slow, b.Vectors[i]) {
			t.Errorf("column %s: typed and value reads differ from each other or from the rows written", c.Name)
		}
	}
}

// TestReadDictionaryFile checks that a file another writer
// dictionary-encoded (which the typed path leaves alone) reads right.
func TestReadDictionaryFile(t *testing.T) {
	type row struct {
		S *string `parquet:"s,dict,optional"`
		I int64   `parquet:"i,dict"`
	}
	var rs []row
	for i := range 1000 {
		s := strconv.Itoa(i % 3)
		r := row{S: &s, I: int64(i % 5)}
		if i%4 == 0 {
			r.S = nil
		}
		rs = append(rs, r)
	}
	path := filepath.Join(t.TempDir(), "d.parquet")
	if err := parquet.WriteFile(path, rs); err != nil {
		t.Fatal(err)
	}
	schema := batch.Schema{Columns: []batch.Column{{Name: "s", Type: batch.String, Nullable: true}, {Name: "i", Type: batch.Int64}}}
	b := batch.New(schema, 0)
	if err := readFile(fsys.OS{}, path, b, nil); err != nil {
		t.Fatal(err)
	}
	if b.Len() != len(rs) {
		t.Fatalf("%d rows, want %d", b.Len(), len(rs))
	}
	for i, r := range rs {
		if got := b.Vectors[1].Ints[i]; got != r.I {
			t.Fatalf("row %d: i %d, want %d", i, got, r.I)
		}
		if null := b.Vectors[0].IsNull(i); null != (r.S == nil) || (!null && b.Vectors[0].Strs[i] != *r.S) {
			t.Fatalf("row %d: s %q (null %v), want %v", i, b.Vectors[0].Strs[i], null, r.S)
		}
	}
}
