package decode

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/valyala/fastjson"
)

func fuzzSchema() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: "s", Type: batch.String, Nullable: true},
		{Name: "i", Type: batch.Int64, Nullable: true},
		{Name: "f", Type: batch.Float64, Nullable: true},
		{Name: "b", Type: batch.Bool, Nullable: true},
		{Name: "t", Type: batch.Timestamp, Nullable: true},
		{Name: "d", Type: batch.Date, Nullable: true},
		{Name: "m", Type: batch.Decimal(20, 4), Nullable: true},
		{Name: "y", Type: batch.Bytes, Nullable: true},
		{Name: "k", Type: batch.String},
		{Name: batch.FieldKafkaKey, Type: batch.Bytes, Nullable: true},
	}}
}

var reasons = map[string]bool{
	batch.ReasonUndecodable:  true,
	batch.ReasonMissingField: true,
	batch.ReasonTypeMismatch: true,
}

func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"k":"x"}`,
		`{"k":"x","s":"a","i":1,"f":1.5,"b":true,"t":"2026-01-02T03:04:05Z","d":"2026-01-02","m":"1.5","y":"aGk="}`,
		`{"k":"x","i":9223372036854775808}`,
		`{"k":"x","t":1767323045123,"m":12345678901234567.1234}`,
		`{"k":"x","m":"1e999999999"}`,
		`{"k":null}`,
		`{"s":1}`,
		`[1]`,
		`{"k":"x","f":NaN}`,
		`{"k":"x","t":"2026-01-02T03:04:05.123456789+23:59"}`,
		``,
	} {
		f.Add([]byte(seed), true)
	}
	s := fuzzSchema()
	d := mustNew(f, s)
	f.Fuzz(func(t *testing.T, msg []byte, key bool) {
		out := batch.New(s, 2)
		// A first row, so that a rollback has something to keep.
		if err := d.Decode(&batch.Record{Value: []byte(`{"k":"seed","i":null}`)}, out); err != nil {
			t.Fatal(err)
		}
		rec := batch.Record{Topic: "t", Value: msg}
		if key {
			rec.Key = msg
		}
		err := d.Decode(&rec, out)
		want := 2
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || !reasons[de.Reason] || de.Error() == "" {
				t.Fatalf("Decode returned %#v", err)
			}
			want = 1
		}
		for i, v := range out.Vectors {
			if v.Len() != want {
				t.Fatalf("column %d has %d rows, want %d (err %v)", i, v.Len(), want, err)
			}
		}
		if err := out.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecimalFastPath checks that the fast path agrees with batch.ParseDecimal
// wherever it answers.
func FuzzDecimalFastPath(f *testing.F) {
	for _, seed := range []string{"0", "-0", "1.5", "123.45", "-0.50", "99999999999999.9999", "007.10", "+3", ".5", "5.", "1.000000000000000000001"} {
		f.Add(seed, 12, 2)
	}
	f.Fuzz(func(t *testing.T, text string, p, s int) {
		if p < 1 || p > batch.MaxDecimalPrecision || s < 0 || s > p || !isDecimalText(text) {
			return
		}
		fast, ok := parseDecimalFast(text, p, s)
		if !ok {
			return
		}
		slow, err := batch.ParseDecimal(text, p, s)
		if err != nil {
			t.Fatalf("fast path took %q as %v for decimal(%d,%d), ParseDecimal refuses: %v", text, fast, p, s, err)
		}
		if fast != slow {
			t.Fatalf("%q decimal(%d,%d): fast %v, ParseDecimal %v", text, p, s, fast, slow)
		}
	})
}

// FuzzTimestamp checks the RFC 3339 parser against time.Parse on the forms
// both accept.
func FuzzTimestamp(f *testing.F) {
	for _, seed := range []string{
		"2026-01-02T03:04:05Z", "2026-01-02T03:04:05.123456789+02:00", "0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59.999999999-23:59", "1969-12-31T23:59:59.9999995Z", "2024-02-29T12:00:00+00:30",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseTimestamp(s)
		ref, err := time.Parse(time.RFC3339Nano, s)
		if len(s) > 10 && s[10] != 'T' {
			return // time.Parse takes only T
		}
		if err == nil && !ok {
			if canonical(s) {
				t.Fatalf("%q: time.Parse takes it as %v, parseTimestamp refuses", s, ref)
			}
			return
		}
		if err == nil && got != ref.UnixMicro() {
			t.Fatalf("%q: %d µs, time.Parse says %d", s, got, ref.UnixMicro())
		}
		if err != nil && ok && !hasLowerZ(s) {
			t.Fatalf("%q: parseTimestamp takes it as %d, time.Parse refuses: %v", s, got, err)
		}
	})
}

// canonical reports whether s has RFC 3339's two-digit fields
// and offset (time.Parse also takes a one-digit hour, a comma before the
// fraction and offset minutes beyond 59).
func canonical(s string) bool {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(shape) {
		return false
	}
	for i := range len(shape) {
		if shape[i] == 'd' && !isDigit(s[i]) || shape[i] != 'd' && shape[i] != s[i] {
			return false
		}
	}
	if len(s) > len(shape) && s[len(shape)] == ',' {
		return false // time.Parse takes a comma before the fraction
	}
	if n := len(s); n >= 6 && (s[n-6] == '+' || s[n-6] == '-') {
		oh, ok1 := atoiN(s, n-5, 2)
		om, ok2 := atoiN(s, n-2, 2)
		return ok1 && ok2 && oh <= 23 && om <= 59 // time.Parse takes minutes up to 99
	}
	return true
}

func hasLowerZ(s string) bool { return len(s) > 0 && s[len(s)-1] == 'z' }

// FuzzSettledElements checks that the elements of a list decode into
// their child rows as they do one by one (the first element of a fresh
// decoder is decoded field by field, the next ones often in one visit):
// the same values, or a dead letter of the record when one of them does
// not decode alone.
func FuzzSettledElements(f *testing.F) {
	for _, seed := range []string{
		`[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"b": "z", "a": 3}]`,
		`[{"a": 1, "b": "x", "a": 4}, {"a": null, "b": "y"}, {}, {"a": 1.5}]`,
		`[{"a": 1, "b": "x"}, {"a": "two", "b": "y"}, {"a": 3, "b": {"c": 1}}]`,
		"[{\"a\": 1, \"b\": \"x\"}, {\"a\": 2, \"b\": \"caf\xe9\"}]",
		`[{"a": 1, "b": "x", "c": true}, {"a": 2, "c": false, "b": "y"}, {"a": 9223372036854775808}]`,
		`[{"a": 10, "b": "2024-01-01T00:00:00Z"}, {"a": -0, "b": "2024-01-01T00:00:00Z"}, {"a": 01}]`,
	} {
		f.Add([]byte(seed))
	}
	schema := func(found []batch.Column) batch.Schema { return withLinks(found) }
	root := batch.Schema{Columns: []batch.Column{{Name: batch.IDColumn, Type: batch.String, Nullable: true}}}
	f.Fuzz(func(t *testing.T, list []byte) {
		var p fastjson.Parser
		v, err := p.ParseBytes(list)
		if err != nil || v.Type() != fastjson.TypeArray {
			return
		}
		elems := v.GetArray()
		if len(elems) == 0 || len(elems) > 64 {
			return
		}
		for _, e := range elems {
			if e.Type() != fastjson.TypeObject {
				return
			}
		}
		msg := `{"items": ` + string(list) + `}`
		first, err := NewInferring(batch.Schema{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		first.DecodeAll([]batch.Record{{Topic: "t", Value: []byte(msg)}}, batch.New(batch.Schema{}, 0), nil)
		first.Found()
		kids := map[string]batch.Schema{}
		for suffix, c := range first.FoundChildren() {
			kids[suffix] = schema(c.Columns)
		}
		if _, ok := kids["items"]; !ok {
			return
		}
		decode := func(m string) (*batch.Batch, []batch.DeadLetter) {
			d, err := NewInferring(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			d.Govern(Contract{Columns: Freeze, DataType: Freeze})
			d.SetChildren(kids)
			out := batch.New(root, 1)
			dls := d.DecodeAll([]batch.Record{{Topic: "t", Value: []byte(m)}}, out, nil)
			return d.ChildRows()["items"], dls
		}
		all, dls := decode(msg)
		var want []string
		bad := false
		for _, e := range elems {
			one, odls := decode(`{"items": [` + string(e.MarshalTo(nil)) + `]}`)
			if len(odls) > 0 {
				bad = true
				continue
			}
			want = append(want, valuesText(one, 0))
		}
		if bad != (len(dls) > 0) {
			t.Fatalf("%s: dead letters %v, one by one bad=%v", msg, dls, bad)
		}
		if bad {
			if all.Len() != 0 {
				t.Fatalf("%s: a dead letter with %d child rows", msg, all.Len())
			}
			return
		}
		for i, w := range want {
			if got := valuesText(all, i); got != w {
				t.Fatalf("%s: element %d: %s, one by one %s", msg, i, got, w)
			}
		}
	})
}

// valuesText renders row i of a child table's columns other than the links.
func valuesText(b *batch.Batch, i int) string {
	var s []string
	for c, col := range b.Schema.Columns {
		if !batch.IsLinkColumn(col.Name) {
			s = append(s, fmt.Sprintf("%s=%v", col.Name, b.Vectors[c].Value(i)))
		}
	}
	return strings.Join(s, " ")
}
