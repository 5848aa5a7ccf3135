package decode

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

func inferAll(t *testing.T, s batch.Schema, msgs ...string) (*batch.Batch, []batch.DeadLetter, []batch.Column) {
	t.Helper()
	d, err := NewInferring(s, naming.SnakeCase)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "t", Offset: int64(i), Value: []byte(m)}
	}
	out := batch.New(s, len(recs))
	dls := d.DecodeAll(recs, out, nil)
	return out, dls, d.Found()
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

func TestInferringRefusesWhatItCannotHold(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "at", Type: batch.Timestamp, Nullable: true},
		{Name: "user_name", Type: batch.String, Nullable: true},
	}}
	tests := []struct{ msg, reason, text string }{
		{`{"id": 1.5}`, batch.ReasonTypeMismatch, "is not an integer"},
		{`{"at": 1714557600000}`, batch.ReasonTypeMismatch, "inferred from strings"},
		{`{"user_name": "a", "userName": "b"}`, batch.ReasonTypeMismatch, "both become column user_name"},
		{`{"items": [1, 2]}`, batch.ReasonTypeMismatch, "nested"},
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
