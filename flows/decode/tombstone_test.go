package decode

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// TestDecodeTombstoneKeys reads the key a tombstone deletes out of its
// message key, in each key format; the other columns are NULL or zero.
func TestDecodeTombstoneKeys(t *testing.T) {
	one := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64},
		{Name: batch.FieldKafkaOffset, Type: batch.Int64},
	}}
	two := batch.Schema{Columns: []batch.Column{
		{Name: "region", Type: batch.String},
		{Name: "id", Type: batch.Int64},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	text := batch.Schema{Columns: []batch.Column{{Name: "sku", Type: batch.String}, {Name: "seq", Type: batch.Int64}}}
	raw := batch.Schema{Columns: []batch.Column{{Name: "hash", Type: batch.Bytes}, {Name: "seq", Type: batch.Int64}}}
	for _, tc := range []struct {
		name   string
		s      batch.Schema
		keys   []string
		format string
		key    string
		want   string // the row, or the error's text
		reason string
	}{
		{"object", one, []string{"id"}, KeyJSON, `{"id":7}`, "7,<nil>,0,12", ""},
		{"connect envelope", one, []string{"id"}, KeyJSON, `{"schema":{"type":"struct"},"payload":{"id":7}}`, "7,<nil>,0,12", ""},
		{"scalar", one, []string{"id"}, KeyJSON, `7`, "7,<nil>,0,12", ""},
		{"two keys", two, []string{"region", "id"}, KeyJSON, `{"id":1,"region":"eu"}`, "eu,1,<nil>", ""},
		{"text of an int64", one, []string{"id"}, KeyString, `42`, "42,<nil>,0,12", ""},
		{"text of a string", text, []string{"sku"}, KeyString, `A-1`, "A-1,0", ""},
		{"text that looks like JSON", text, []string{"sku"}, KeyString, `{"x":1}`, `{"x":1},0`, ""},
		{"text of bytes", raw, []string{"hash"}, KeyString, "\x01\x02", "[1 2],0", ""},
		{"binary key of bytes", raw, []string{"hash"}, KeyString, "\xff\x00", "[255 0],0", ""},
		{"not a number", one, []string{"id"}, KeyString, `x1`, `in the message key, field "id": "x1" is not an int64`, batch.ReasonTypeMismatch},
		{"key missing", two, []string{"region", "id"}, KeyJSON, `{"id":1}`, `in the message key, field "region": missing, and the column is not nullable`, batch.ReasonMissingField},
		{"plain text as JSON", text, []string{"sku"}, KeyJSON, `A-1`, "message key: invalid JSON", batch.ReasonUndecodable},
		{"scalar for two keys", two, []string{"region", "id"}, KeyJSON, `1`, "not an object with the flow's key columns", batch.ReasonUndecodable},
		{"null key", one, []string{"id"}, KeyJSON, `null`, "its message key is null", batch.ReasonMissingField},
		{"invalid UTF-8", text, []string{"sku"}, KeyString, "\xff", "not valid UTF-8", batch.ReasonInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, tc.s)
			out := batch.New(tc.s, 1)
			err := d.DecodeTombstone(&batch.Record{Topic: "t", Offset: 12, Key: []byte(tc.key)}, out, tc.keys, tc.format)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := rowsOf(out); !slices.Equal(got, []string{tc.want}) {
					t.Fatalf("row %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil || err.Reason != tc.reason || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %s: %q", err, tc.reason, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("%d rows left behind", out.Len())
			}
		})
	}
	d := mustNew(t, one)
	if err := d.DecodeTombstone(&batch.Record{Topic: "t"}, batch.New(one, 1), []string{"id"}, KeyJSON); err == nil || err.Reason != batch.ReasonMissingField {
		t.Errorf("a tombstone without a message key: %v, want missing_field", err)
	}
}
