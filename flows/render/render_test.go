package render

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// cell is one value of a fixture row; nil is NULL.
type cell = any

// build makes a batch from rows of Go values: string, int64, float64, bool,
// time.Time, batch.DateValue, string decimal text (for decimal columns),
// []byte, or nil.
func build(t *testing.T, s batch.Schema, rows [][]cell) *batch.Batch {
	t.Helper()
	b := batch.New(s, len(rows))
	for r, row := range rows {
		for c, x := range row {
			v := b.Vectors[c]
			if x == nil {
				v.AppendNull()
				continue
			}
			switch v.Type.Kind {
			case batch.KindString:
				v.AppendString(x.(string))
			case batch.KindInt64:
				v.AppendInt(x.(int64))
			case batch.KindFloat64:
				v.AppendFloat(x.(float64))
			case batch.KindBool:
				v.AppendBool(x.(bool))
			case batch.KindTimestamp:
				v.AppendInt(x.(time.Time).UnixMicro())
			case batch.KindDate:
				v.AppendInt(int64(x.(batch.DateValue)))
			case batch.KindDecimal:
				d, err := batch.ParseDecimal(x.(string), v.Type.Precision, v.Type.Scale)
				if err != nil {
					t.Fatalf("row %d column %d: %v", r, c, err)
				}
				v.AppendDecimal(d)
			case batch.KindBytes:
				v.AppendBytes(x.([]byte))
			}
		}
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	return b
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func day(s string) batch.DateValue {
	return batch.DateFromTime(ts(s + "T00:00:00Z"))
}

var allTypes = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "price", Type: batch.Decimal(38, 2), Nullable: true},
	{Name: "ratio", Type: batch.Float64, Nullable: true},
	{Name: "active", Type: batch.Bool, Nullable: true},
	{Name: "created_at", Type: batch.Timestamp, Nullable: true},
	{Name: "day", Type: batch.Date, Nullable: true},
	{Name: "blob", Type: batch.Bytes, Nullable: true},
}}

func allTypesBatch(t *testing.T) *batch.Batch {
	return build(t, allTypes, [][]cell{
		{int64(3), "plain", "12.50", 0.1, true, ts("2026-01-02T03:04:05.123456Z"), day("2026-01-02"), []byte("hi")},
		{int64(math.MaxInt64), nil, nil, nil, nil, nil, nil, nil},
		{int64(1), `comma, "quote"`, "-0.05", math.NaN(), false, ts("2026-01-02T03:04:05Z"), day("1969-12-31"), []byte{}},
		{int64(math.MinInt64), "line\nbreak\ttab", "12345678901234567890.12", math.Inf(1), nil, ts("1969-12-31T23:59:59.5Z"), nil, []byte{0, 0xff, 0xfe}},
		{int64(2), "naïve ☃", "0.00", math.Inf(-1), true, nil, day("2000-02-29"), nil},
		{int64(-7), "", "-99999999999999999999999999999999999.99", 1e21, false, ts("2026-01-02T03:04:05.1Z"), day("2026-01-02"), []byte("hello, world")},
		{int64(0), "bad\xffutf8", "7.00", 1e-7, true, ts("1970-01-01T00:00:00Z"), day("1970-01-01"), []byte("x")},
		{int64(5), "plain", nil, math.Copysign(0, -1), nil, ts("2026-01-02T03:04:05.123456Z"), nil, nil},
		{int64(4), nil, "1.00", 123.0, false, ts("2025-06-30T23:59:59.999999Z"), day("2025-06-30"), []byte("z")},
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		sort []int // nil: as built
	}{
		{name: "all_types"},
		{name: "sorted_by_name_then_created_at", sort: []int{1, 5}},
		{name: "sorted_by_active_then_day_then_id", sort: []int{4, 6, 0}},
	}
	for _, tc := range cases {
		for _, format := range Formats {
			t.Run(tc.name+"/"+format, func(t *testing.T) {
				b := allTypesBatch(t)
				if tc.sort != nil {
					Sort(b, tc.sort)
				}
				var out bytes.Buffer
				if err := Write(&out, b, format); err != nil {
					t.Fatal(err)
				}
				golden(t, tc.name+"."+format, out.Bytes())
			})
		}
	}
}

func TestWriteEmpty(t *testing.T) {
	cases := []struct {
		format, want string
	}{
		{"table", " id | name\n----+------\n(0 rows)\n"},
		{"jsonl", ""},
		{"csv", "id,name\n"},
	}
	s := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "name", Type: batch.String}}}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			var out bytes.Buffer
			if err := Write(&out, batch.New(s, 0), tc.format); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Fatalf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestWriteOneRowFooter(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{{Name: "n", Type: batch.Int64}}}
	b := build(t, s, [][]cell{{int64(12345)}})
	var out bytes.Buffer
	if err := Write(&out, b, "table"); err != nil {
		t.Fatal(err)
	}
	if want := "     n\n-------\n 12345\n(1 row)\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestWriteErrors(t *testing.T) {
	good := allTypesBatch(t)
	short := allTypesBatch(t)
	short.Vectors[3].Truncate(2)
	cases := []struct {
		name   string
		b      *batch.Batch
		format string
		w      *failWriter
		want   string
	}{
		{name: "unknown format", b: good, format: "xml", want: `unknown format "xml": one of table, jsonl, csv`},
		{name: "ragged batch", b: short, format: "jsonl", want: "column ratio does not match the batch"},
		{name: "writer fails table", b: good, format: "table", w: &failWriter{}, want: "render table: disk full"},
		{name: "writer fails jsonl", b: good, format: "jsonl", w: &failWriter{}, want: "render jsonl: disk full"},
		{name: "writer fails csv", b: good, format: "csv", w: &failWriter{}, want: "render csv: disk full"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var w interface{ Write([]byte) (int, error) } = &buf
			if tc.w != nil {
				w = tc.w
			}
			err := Write(w, tc.b, tc.format)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %q before failing", buf.String())
			}
		})
	}
}

type failWriter struct{}

func (*failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestJSONLParses reads every line back with encoding/json: valid JSON, keys
// in column order, exact integers, the documented encodings.
func TestJSONLParses(t *testing.T) {
	b := allTypesBatch(t)
	var out bytes.Buffer
	if err := Write(&out, b, "jsonl"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != b.Len() {
		t.Fatalf("%d lines for %d rows", len(lines), b.Len())
	}
	for i, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var row map[string]any
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		// Keys appear in column order.
		last := -1
		for _, name := range allTypes.Names() {
			at := strings.Index(line, `"`+name+`":`)
			if at <= last {
				t.Fatalf("line %d: key %s out of order in %s", i, name, line)
			}
			last = at
		}
		if got, want := string(row["id"].(json.Number)), json.Number(big.NewInt(b.Vectors[0].Ints[i]).String()); got != string(want) {
			t.Errorf("line %d id %s, want %s", i, got, want)
		}
		for c, col := range allTypes.Columns {
			if b.Vectors[c].IsNull(i) != (row[col.Name] == nil) {
				t.Errorf("line %d %s = %v, null is %v", i, col.Name, row[col.Name], b.Vectors[c].IsNull(i))
			}
		}
		if !b.Vectors[1].IsNull(i) && strings.ToValidUTF8(b.Vectors[1].Strs[i], "\ufffd") != row["name"] {
			t.Errorf("line %d name %q, want %q", i, row["name"], b.Vectors[1].Strs[i])
		}
		if !b.Vectors[7].IsNull(i) && row["blob"] != string(b64(b.Vectors[7].Bytes[i])) {
			t.Errorf("line %d blob %v", i, row["blob"])
		}
	}
}

func b64(p []byte) []byte {
	var v batch.Vector
	v.Type = batch.Bytes
	v.AppendBytes(p)
	return appendText(nil, &v, 0)
}

// TestCSVRoundTrip reads the csv back: a header and the same text per value.
func TestCSVRoundTrip(t *testing.T) {
	b := allTypesBatch(t)
	var out bytes.Buffer
	if err := Write(&out, b, "csv"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != b.Len()+1 || strings.Join(recs[0], ",") != strings.Join(allTypes.Names(), ",") {
		t.Fatalf("got %d records, header %v", len(recs), recs[0])
	}
	for i := range b.Len() {
		for c, v := range b.Vectors {
			want := ""
			if !v.IsNull(i) {
				want = string(appendText(nil, v, i))
			}
			if got := recs[i+1][c]; got != want {
				t.Errorf("row %d %s = %q, want %q", i, allTypes.Columns[c].Name, got, want)
			}
		}
	}
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.5, 123, 1e20, 1e21, 1.5e21, 1e-6, 1e-7, 9.99e-7, -2.5e-10, math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, 123456789.125} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("appendFloat(%v) = %s, encoding/json writes %s", f, got, want)
		}
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x1f\x7f", "nl\n cr\r tab\t", "naïve ☃ 𝄞", "bad \xff\xfe utf8", "sep \u2028 \u2029", "<html> & co"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want.String())
		}
	}
}

func TestAppendDecimalMatchesFormatDecimal(t *testing.T) {
	values := []string{"0", "1", "-1", "5", "-5", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "123456789012345678901234567890", "-100000000000000000000"}
	for _, text := range values {
		v, _ := new(big.Int).SetString(text, 10)
		d := batch.Dec128FromBig(v)
		for _, scale := range []int{0, 1, 2, 5, 19, 25} {
			if got, want := string(appendDecimal(nil, d, scale)), batch.FormatDecimal(d, scale); got != want {
				t.Errorf("appendDecimal(%s, %d) = %s, want %s", text, scale, got, want)
			}
		}
	}
}
