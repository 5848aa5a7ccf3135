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

// TestDecodeTombstoneKeyOrigins: a key column filled from the record (a
// metadata field such as _kafka_key) is read from the record, whatever the
// message key holds, and a key column with a path is read from the message
// key by its path, else by its name.
func TestDecodeTombstoneKeyOrigins(t *testing.T) {
	kkey := batch.Schema{Columns: []batch.Column{
		{Name: batch.FieldKafkaKey, Type: batch.String},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64},
	}}
	kbytes := batch.Schema{Columns: []batch.Column{{Name: batch.FieldKafkaKey, Type: batch.Bytes}, {Name: "seq", Type: batch.Int64}}}
	mixed := batch.Schema{Columns: []batch.Column{
		{Name: batch.FieldKafkaPartition, Type: batch.Int64},
		{Name: batch.FieldKafkaKey, Type: batch.String},
		{Name: "seq", Type: batch.Int64},
	}}
	withID := batch.Schema{Columns: []batch.Column{
		{Name: batch.FieldKafkaPartition, Type: batch.Int64},
		{Name: "id", Type: batch.Int64},
		{Name: "seq", Type: batch.Int64},
	}}
	nested := batch.Schema{Columns: []batch.Column{
		{Name: "cid", Type: batch.Int64},
		{Name: "region", Type: batch.String},
		{Name: "seq", Type: batch.Int64},
	}}
	paths := Paths{"cid": "customer.id", "region": "customer.address.region"}
	for _, tc := range []struct {
		name   string
		s      batch.Schema
		paths  Paths
		keys   []string
		format string
		key    string
		want   string // the row, or the error's text
		reason string
	}{
		{"_kafka_key, text", kkey, nil, []string{batch.FieldKafkaKey}, KeyJSON, `order-7`, "order-7,<nil>,0", ""},
		{"_kafka_key, JSON scalar", kkey, nil, []string{batch.FieldKafkaKey}, KeyJSON, `7`, "7,<nil>,0", ""},
		{"_kafka_key, JSON object", kkey, nil, []string{batch.FieldKafkaKey}, KeyJSON, `{"id":7}`, `{"id":7},<nil>,0`, ""},
		{"_kafka_key, key_format string", kkey, nil, []string{batch.FieldKafkaKey}, KeyString, `order-7`, "order-7,<nil>,0", ""},
		{"_kafka_key as bytes", kbytes, nil, []string{batch.FieldKafkaKey}, KeyJSON, "\xff\x01", "[255 1],0", ""},
		{"_kafka_key, not UTF-8", kkey, nil, []string{batch.FieldKafkaKey}, KeyJSON, "\xff", "not valid UTF-8", batch.ReasonInvalidUTF8},
		{"_kafka_partition and _kafka_key", mixed, nil, []string{batch.FieldKafkaPartition, batch.FieldKafkaKey}, KeyJSON, `k`, "3,k,0", ""},
		{"_kafka_partition and a field, scalar", withID, nil, []string{batch.FieldKafkaPartition, "id"}, KeyJSON, `7`, "3,7,0", ""},
		{"_kafka_partition and a field, text", withID, nil, []string{batch.FieldKafkaPartition, "id"}, KeyString, `7`, "3,7,0", ""},
		{"path, scalar", nested, Paths{"cid": "customer.id"}, []string{"cid"}, KeyJSON, `7`, "7,,0", ""},
		{"path, text", nested, Paths{"cid": "customer.id"}, []string{"cid"}, KeyString, `7`, "7,,0", ""},
		{"paths, object by path", nested, paths, []string{"cid", "region"}, KeyJSON, `{"customer":{"id":7,"address":{"region":"eu"}}}`, "7,eu,0", ""},
		{"paths, object by name", nested, paths, []string{"cid", "region"}, KeyJSON, `{"cid":7,"region":"eu"}`, "7,eu,0", ""},
		{"paths, connect envelope", nested, paths, []string{"cid", "region"}, KeyJSON, `{"schema":{},"payload":{"customer":{"id":7,"address":{"region":"eu"}}}}`, "7,eu,0", ""},
		{"path, missing", nested, paths, []string{"cid", "region"}, KeyJSON, `{"customer":{"id":7}}`, `in the message key, field "customer.address.region": missing`, batch.ReasonMissingField},
		{"path, wrong type by name", nested, paths, []string{"cid", "region"}, KeyJSON, `{"cid":"x","region":"eu"}`, `in the message key, field "cid": "x" is not an int64`, batch.ReasonTypeMismatch},
		{"path, wrong type", nested, paths, []string{"cid", "region"}, KeyJSON, `{"customer":{"id":"x","address":{"region":"eu"}}}`, `in the message key, field "customer.id": "x" is not an int64`, batch.ReasonTypeMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustNew(t, tc.s)
			if err := d.SetPaths(tc.paths); err != nil {
				t.Fatal(err)
			}
			out := batch.New(tc.s, 1)
			err := d.DecodeTombstone(&batch.Record{Topic: "t", Partition: 3, Offset: 12, Key: []byte(tc.key)}, out, tc.keys, tc.format)
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
}
