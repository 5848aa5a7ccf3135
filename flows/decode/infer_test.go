package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

func inferAll(t *testing.T, s batch.Schema, msgs ...string) (*batch.Batch, []batch.DeadLetter, []batch.Column) {
	t.Helper()
	out, dls, found, _ := governed(t, s, Contract{Columns: Evolve, DataType: Evolve}, msgs...)
	return out, dls, found
}

// governed decodes msgs with an inferring decoder of s under c, and
// returns the records it discarded too.
func governed(t *testing.T, s batch.Schema, c Contract, msgs ...string) (*batch.Batch, []batch.DeadLetter, []batch.Column, int64) {
	t.Helper()
	d, err := NewInferring(s, naming.SnakeCase)
	if err != nil {
		t.Fatal(err)
	}
	d.Govern(c)
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "t", Offset: int64(i), Value: []byte(m)}
	}
	out := batch.New(s, len(recs))
	dls := d.DecodeAll(recs, out, nil)
	return out, dls, d.Found(), int64(len(d.Discarded()))
}

func TestInferringFindsColumnsThenDecodes(t *testing.T) {
	msgs := []string{
		`{"id": 1, "userName": "ann", "at": "2024-05-01T10:00:00.5Z", "n": null}`,
		`{"id": 2, "score": 1, "ok": true}`,
		`{"id": 3, "score": 2.5, "at": "2024-05-01T10:00:01Z"}`,
	}
	_, dls, found := inferAll(t, batch.Schema{}, msgs...)
	if len(dls) != 0 {
		t.Fatalf("dead letters %v", dls)
	}
	want := []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "user_name", Type: batch.String, Nullable: true},
		{Name: "at", Type: batch.Timestamp, Nullable: true},
		{Name: "score", Type: batch.Float64, Nullable: true}, // an integer, then a fraction
		{Name: "ok", Type: batch.Bool, Nullable: true},
	}
	if got := (batch.Schema{Columns: found}); !got.Equal(batch.Schema{Columns: want}) {
		t.Fatalf("found %v, want %v", found, want)
	}
	out, dls, found := inferAll(t, batch.Schema{Columns: want}, msgs...)
	if len(dls) != 0 || len(found) != 0 {
		t.Fatalf("second pass: dead letters %v, found %v", dls, found)
	}
	if out.Len() != 3 || out.Vectors[1].Value(0) != "ann" || out.Vectors[3].Value(1) != 1.0 || out.Vectors[4].Value(0) != nil {
		t.Fatalf("rows %v", out)
	}
}

// Fields met at the same position in every record take the quick path of
// a new field (docs/schema.md#tables-typed-by-their-json-messages): the
// widening rules hold there too, and a value that widens nothing (a bool
// in a float64) is left to the variant columns.
func TestInferringWidensAtTheSamePosition(t *testing.T) {
	msgs := []string{
		`{"id": 1, "at": "2024-05-01T10:00:00Z", "s": "a", "f": 1.5}`,
		`{"id": 2, "at": "2024-05-01T10:00:01Z", "s": "b", "f": 2}`,
		`{"id": 2.5, "at": "soon", "s": "c", "f": 3}`,
		`{"id": 4, "at": "2024-05-01T10:00:02Z", "s": "d", "f": true}`,
		`{"id": 5, "at": "2024-05-01T10:00:03Z", "s": "e", "f": 5}`,
	}
	_, dls, found := inferAll(t, batch.Schema{}, msgs...)
	want := []batch.Column{
		{Name: "id", Type: batch.Float64, Nullable: true},
		{Name: "at", Type: batch.String, Nullable: true},
		{Name: "s", Type: batch.String, Nullable: true},
		{Name: "f", Type: batch.Float64, Nullable: true},
	}
	if got := (batch.Schema{Columns: found}); !got.Equal(batch.Schema{Columns: want}) {
		t.Fatalf("found %v, want %v", found, want)
	}
	if len(dls) != 0 {
		t.Fatalf("dead letters %v, want none: a value of another type goes to a variant column once the column exists", dls)
	}
}

func TestInferringRefusesWhatItCannotHold(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "at", Type: batch.Timestamp, Nullable: true},
		{Name: "user_name", Type: batch.String, Nullable: true},
	}}
	tests := []struct{ msg, reason, text string }{
		{`{"user_name": "a", "userName": "b"}`, batch.ReasonTypeMismatch, "both become column user_name"},
		{"{\"note\": \"caf\xe9\"}", batch.ReasonInvalidUTF8, "not valid UTF-8"},
	}
	for _, tc := range tests {
		out, dls, found := inferAll(t, s, tc.msg)
		if out.Len() != 0 || len(dls) != 1 || len(found) != 0 {
			t.Errorf("%s: %d rows, dead letters %v, found %v", tc.msg, out.Len(), dls, found)
			continue
		}
		if dls[0].Reason != tc.reason || !strings.Contains(dls[0].Error, tc.text) {
			t.Errorf("%s: %s %q, want %s with %q", tc.msg, dls[0].Reason, dls[0].Error, tc.reason, tc.text)
		}
	}
}

func TestInferringContracts(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "at", Type: batch.Timestamp, Nullable: true},
	}}
	withVariant := batch.Schema{Columns: append(slices.Clone(s.Columns), batch.Column{Name: "id__v_float64", Type: batch.Float64, Nullable: true})}
	tests := []struct {
		name     string
		schema   batch.Schema
		contract Contract
		msg      string
		rows     int
		reason   string // of the one dead letter, "" for none
		found    []string
		discard  int64
	}{
		{"evolve finds the variant", s, Contract{Evolve, Evolve}, `{"id": 1.5}`, 1, "", []string{"id__v_float64 float64"}, 0},
		{"evolve fills the variant", withVariant, Contract{Evolve, Evolve}, `{"id": 1.5}`, 1, "", nil, 0},
		{"an integer timestamp has a variant", s, Contract{Evolve, Evolve}, `{"at": 1714557600000}`, 1, "", []string{"at__v_int64 int64"}, 0},
		{"freeze type", s, Contract{Evolve, Freeze}, `{"id": 1.5}`, 0, batch.ReasonSchemaContract, nil, 0},
		{"discard_row type", s, Contract{Evolve, DiscardRow}, `{"id": 1.5}`, 0, "", nil, 1},
		{"discard_value type", s, Contract{Evolve, DiscardValue}, `{"id": 1.5, "at": "2024-01-01T00:00:00Z"}`, 1, "", nil, 0},
		{"freeze columns", s, Contract{Freeze, Evolve}, `{"id": 1, "x": 2}`, 0, batch.ReasonSchemaContract, nil, 0},
		{"discard_row columns", s, Contract{DiscardRow, Evolve}, `{"id": 1, "x": 2}`, 0, "", nil, 1},
		{"discard_value columns", s, Contract{DiscardValue, Evolve}, `{"id": 1, "x": 2}`, 1, "", nil, 0},
		{"a null field is no new column", s, Contract{Freeze, Freeze}, `{"id": 1, "x": null}`, 1, "", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, dls, found, discarded := governed(t, tc.schema, tc.contract, tc.msg)
			var names []string
			for _, c := range found {
				names = append(names, c.Name+" "+c.Type.String())
			}
			if out.Len() != tc.rows || !slices.Equal(names, tc.found) || discarded != tc.discard {
				t.Fatalf("%d rows, found %v, %d discarded; want %d, %v, %d", out.Len(), names, discarded, tc.rows, tc.found, tc.discard)
			}
			switch {
			case tc.reason == "" && len(dls) > 0:
				t.Fatalf("dead letters %v", dls)
			case tc.reason != "" && (len(dls) != 1 || dls[0].Reason != tc.reason):
				t.Fatalf("dead letters %v, want one %s", dls, tc.reason)
			}
		})
	}
	// The variant holds the value, the column NULL.
	out, _, _ := inferAll(t, withVariant, `{"id": 1.5}`, `{"id": 2}`)
	if got := []any{out.Vectors[0].Value(0), out.Vectors[2].Value(0), out.Vectors[0].Value(1), out.Vectors[2].Value(1)}; !slices.Equal(got, []any{nil, 1.5, int64(2), nil}) {
		t.Fatalf("values %v", got)
	}
}

func TestDeclaredContracts(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64, Nullable: true}}}
	for _, tc := range []struct {
		contract   Contract
		msg        string
		rows, dead int
		discarded  int64
	}{
		{Contract{}, `{"id": 1, "x": 2}`, 1, 0, 0},
		{Contract{Freeze, Freeze}, `{"id": 1, "x": 2}`, 0, 1, 0},
		{Contract{Freeze, Freeze}, `{"id": 1, "_kafka_offset": 2, "x": null}`, 1, 0, 0},
		{Contract{DiscardRow, Freeze}, `{"id": 1, "x": 2}`, 0, 0, 1},
		{Contract{DiscardValue, DiscardValue}, `{"id": "one"}`, 1, 0, 0},
		{Contract{DiscardValue, DiscardRow}, `{"id": "one"}`, 0, 0, 1},
		{Contract{DiscardValue, Freeze}, `{"id": "one"}`, 0, 1, 0},
	} {
		d, err := NewJSON(s)
		if err != nil {
			t.Fatal(err)
		}
		d.Govern(tc.contract)
		out := batch.New(s, 1)
		dls := d.DecodeAll([]batch.Record{{Value: []byte(tc.msg)}}, out, nil)
		if out.Len() != tc.rows || len(dls) != tc.dead || int64(len(d.Discarded())) != tc.discarded {
			t.Errorf("%v %s: %d rows, dead letters %v; want %d rows, %d dead, %d discarded", tc.contract, tc.msg, out.Len(), dls, tc.rows, tc.dead, tc.discarded)
		}
		if tc.dead == 1 && tc.contract.Columns == Freeze && dls[0].Reason != batch.ReasonSchemaContract {
			t.Errorf("%s: reason %s", tc.msg, dls[0].Reason)
		}
		if tc.dead == 1 && tc.contract.DataType == Freeze && tc.contract.Columns != Freeze && dls[0].Reason != batch.ReasonTypeMismatch {
			t.Errorf("%s: reason %s, a declared column's misfit is a type_mismatch", tc.msg, dls[0].Reason)
		}
	}
}

// TestInferringFlattens checks that nested objects become columns
// <parent>__<child> (names normalized), that a value deeper than
// max_nesting is its JSON text, and that a bad nested value names its
// path.
func TestInferringFlattens(t *testing.T) {
	decodeWith := func(s batch.Schema, maxNesting int, msgs ...string) (*batch.Batch, []batch.DeadLetter, []batch.Column) {
		t.Helper()
		d, err := NewInferring(s, naming.SnakeCase)
		if err != nil {
			t.Fatal(err)
		}
		d.SetMaxNesting(maxNesting)
		recs := make([]batch.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = batch.Record{Offset: int64(i), Value: []byte(m)}
		}
		out := batch.New(s, len(recs))
		dls := d.DecodeAll(recs, out, nil)
		return out, dls, d.Found()
	}
	msgs := []string{
		`{"id": 1, "customer": {"firstName": "ann", "address": {"zip": "1000", "geo": {"lat": 1.5}}}}`,
		`{"id": 2, "customer": {"firstName": "bob", "address": {"zip": "2000", "geo": {"lat": 2, "tags": [1]}}}}`,
	}
	_, dls, found := decodeWith(batch.Schema{}, 2, msgs...)
	if len(dls) != 0 {
		t.Fatalf("dead letters %v", dls)
	}
	s := batch.Schema{Columns: found}
	want := []string{"id", "customer__first_name", "customer__address__zip", "customer__address__geo"}
	if !slices.Equal(s.Names(), want) {
		t.Fatalf("found %v, want %v", s.Names(), want)
	}
	if c := s.Columns[3]; c.Type != batch.String {
		t.Fatalf("the level past max_nesting is %v, want its JSON text in a string", c)
	}
	out, dls, found := decodeWith(s, 2, msgs...)
	if len(dls) != 0 || len(found) != 0 {
		t.Fatalf("second pass: dead letters %v, found %v", dls, found)
	}
	if got := out.Vectors[3].Value(1); got != `{"lat": 2, "tags": [1]}` && got != `{"lat":2,"tags":[1]}` {
		t.Fatalf("JSON text %q", got)
	}
	if got := out.Vectors[1].Value(0); got != "ann" {
		t.Fatalf("customer__first_name %v", got)
	}

	// A bad value inside is its record's dead letter, named by its path;
	// the other records land.
	bad := []string{
		`{"id": 3, "customer": {"address": {"zip": 3000}}}`,
		"{\"id\": 4, \"customer\": {\"address\": {\"geo\": {\"name\": \"caf\xe9\"}}}}",
		`{"id": 5, "customer": {"firstName": "y", "first_name": "z"}}`,
		`{"id": 6, "customer": {"firstName": "cy"}}`,
	}
	out, dls, _ = decodeWith(s, 2, bad...)
	if out.Len() != 2 || len(dls) != 2 {
		t.Fatalf("%d rows, dead letters %v", out.Len(), dls)
	}
	if !strings.Contains(dls[0].Error, `field "customer.address.geo": `) || dls[0].Reason != batch.ReasonInvalidUTF8 {
		t.Errorf("dead letter %+v, want the invalid UTF-8 of customer.address.geo", dls[0])
	}
	if !strings.Contains(dls[1].Error, `fields "customer.firstName" and "customer.first_name" both become column customer__first_name`) {
		t.Errorf("dead letter %+v, want the collision", dls[1])
	}
	// zip 3000 does not fit the string column: its variant column.
	if _, _, found := decodeWith(s, 2, bad[0]); len(found) != 1 || found[0].Name != "customer__address__zip__v_int64" {
		t.Errorf("found %v, want the variant column of customer__address__zip", found)
	}

	// max_nesting 0 keeps every nested value whole.
	_, _, found = decodeWith(batch.Schema{}, 0, msgs...)
	if got := (batch.Schema{Columns: found}).Names(); !slices.Equal(got, []string{"id", "customer"}) {
		t.Fatalf("max_nesting 0: found %v", got)
	}
}
