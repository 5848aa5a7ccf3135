package decode

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// show renders a vector value as text for comparisons.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case []byte:
		return "0x" + hex.EncodeToString(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func mustNew(t testing.TB, s batch.Schema) *JSON {
	t.Helper()
	d, err := NewJSON(s)
	if err != nil {
		t.Fatalf("NewJSON: %v", err)
	}
	return d
}

func TestDecodeField(t *testing.T) {
	dec := func(p, s int) batch.Type { return batch.Decimal(p, s) }
	cases := []struct {
		name     string
		typ      batch.Type
		nullable bool
		msg      string // the whole message
		want     string // show() of the value when it decodes
		reason   string // the reason when it does not
		errText  string // a substring of Error() when it does not
	}{
		// string
		{name: "string", typ: batch.String, msg: `{"f":"abc"}`, want: "abc"},
		{name: "string escapes", typ: batch.String, msg: `{"f":"a\"b\u00e9\n"}`, want: "a\"bé\n"},
		{name: "string empty", typ: batch.String, msg: `{"f":""}`, want: ""},
		{name: "string invalid utf-8", typ: batch.String, msg: "{\"f\":\"caf\xe9\"}", reason: batch.ReasonInvalidUTF8, errText: `field "f": "caf\xe9" is not valid UTF-8`},
		{name: "bytes keep any bytes", typ: batch.Bytes, msg: `{"f":"6Q=="}`, want: "0xe9"},
		{name: "string from number", typ: batch.String, msg: `{"f":12}`, reason: batch.ReasonTypeMismatch, errText: `field "f": 12 is not a string`},
		{name: "string from bool", typ: batch.String, msg: `{"f":true}`, reason: batch.ReasonTypeMismatch, errText: `field "f": true is not a string`},
		{name: "string from object", typ: batch.String, msg: `{"f":{"a":1}}`, reason: batch.ReasonTypeMismatch, errText: `field "f": a JSON object is not a string`},
		{name: "string from array", typ: batch.String, msg: `{"f":[1]}`, reason: batch.ReasonTypeMismatch, errText: `field "f": a JSON array is not a string`},
		{name: "string null", typ: batch.String, msg: `{"f":null}`, reason: batch.ReasonMissingField, errText: `field "f": null, and the column is not nullable`},
		{name: "string missing", typ: batch.String, msg: `{"g":"x"}`, reason: batch.ReasonMissingField, errText: `field "f": missing, and the column is not nullable`},
		{name: "nullable null", typ: batch.String, nullable: true, msg: `{"f":null}`, want: "NULL"},
		{name: "nullable missing", typ: batch.String, nullable: true, msg: `{}`, want: "NULL"},
		{name: "nullable still typed", typ: batch.String, nullable: true, msg: `{"f":1}`, reason: batch.ReasonTypeMismatch, errText: `field "f"`},
		{name: "last duplicate wins", typ: batch.String, msg: `{"f":"a","f":"b"}`, want: "b"},
		{name: "undeclared ignored", typ: batch.String, msg: `{"x":[{"y":1}],"f":"a","z":1-2}`, want: "a"},

		// int64
		{name: "int64", typ: batch.Int64, msg: `{"f":42}`, want: "42"},
		{name: "int64 negative", typ: batch.Int64, msg: `{"f":-7}`, want: "-7"},
		{name: "int64 max", typ: batch.Int64, msg: `{"f":9223372036854775807}`, want: "9223372036854775807"},
		{name: "int64 min", typ: batch.Int64, msg: `{"f":-9223372036854775808}`, want: "-9223372036854775808"},
		{name: "int64 beyond float precision", typ: batch.Int64, msg: `{"f":9007199254740993}`, want: "9007199254740993"},
		{name: "int64 overflow", typ: batch.Int64, msg: `{"f":9223372036854775808}`, reason: batch.ReasonTypeMismatch, errText: `field "f": 9223372036854775808 is out of range for int64`},
		{name: "int64 underflow", typ: batch.Int64, msg: `{"f":-9223372036854775809}`, reason: batch.ReasonTypeMismatch, errText: "out of range"},
		{name: "int64 fraction", typ: batch.Int64, msg: `{"f":1.5}`, reason: batch.ReasonTypeMismatch, errText: `field "f": 1.5 is not an integer`},
		{name: "int64 integral fraction", typ: batch.Int64, msg: `{"f":1.0}`, reason: batch.ReasonTypeMismatch, errText: "is not an integer"},
		{name: "int64 exponent", typ: batch.Int64, msg: `{"f":1e3}`, reason: batch.ReasonTypeMismatch, errText: "is not an integer"},
		{name: "int64 from string", typ: batch.Int64, msg: `{"f":"42"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "42" is not an int64`},
		{name: "int64 from bool", typ: batch.Int64, msg: `{"f":false}`, reason: batch.ReasonTypeMismatch, errText: "false is not an int64"},
		{name: "int64 leading zero", typ: batch.Int64, msg: `{"f":007}`, reason: batch.ReasonUndecodable, errText: `field "f": invalid JSON: 007 is not a number`},
		{name: "int64 malformed", typ: batch.Int64, msg: `{"f":1-2}`, reason: batch.ReasonUndecodable, errText: `field "f"`},
		{name: "int64 null", typ: batch.Int64, msg: `{"f":null}`, reason: batch.ReasonMissingField, errText: "null"},

		// float64
		{name: "float64", typ: batch.Float64, msg: `{"f":1.5}`, want: "1.5"},
		{name: "float64 from integer", typ: batch.Float64, msg: `{"f":42}`, want: "42"},
		{name: "float64 exponent", typ: batch.Float64, msg: `{"f":-2.5E-3}`, want: "-0.0025"},
		{name: "float64 max", typ: batch.Float64, msg: `{"f":1.7976931348623157e308}`, want: "1.7976931348623157e+308"},
		{name: "float64 underflow to zero", typ: batch.Float64, msg: `{"f":1e-400}`, want: "0"},
		{name: "float64 overflow", typ: batch.Float64, msg: `{"f":1e400}`, reason: batch.ReasonTypeMismatch, errText: `field "f": 1e400 is out of range for float64`},
		{name: "float64 from string", typ: batch.Float64, msg: `{"f":"abc"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "abc" is not a float64`},
		{name: "float64 NaN", typ: batch.Float64, msg: `{"f":NaN}`, reason: batch.ReasonUndecodable, errText: `field "f": invalid JSON`},
		{name: "float64 Inf", typ: batch.Float64, msg: `{"f":-Inf}`, reason: batch.ReasonUndecodable, errText: `field "f": invalid JSON`},

		// bool
		{name: "bool true", typ: batch.Bool, msg: `{"f":true}`, want: "true"},
		{name: "bool false", typ: batch.Bool, msg: `{"f":false}`, want: "false"},
		{name: "bool from string", typ: batch.Bool, msg: `{"f":"true"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "true" is not a bool`},
		{name: "bool from number", typ: batch.Bool, msg: `{"f":1}`, reason: batch.ReasonTypeMismatch, errText: "1 is not a bool"},

		// timestamp
		{name: "timestamp Z", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05.123Z"}`, want: "2026-01-02T03:04:05.123Z"},
		{name: "timestamp whole seconds", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05Z"}`, want: "2026-01-02T03:04:05Z"},
		{name: "timestamp offset and nanos truncated", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05.123456789+02:00"}`, want: "2026-01-02T01:04:05.123456Z"},
		{name: "timestamp negative offset crosses day", typ: batch.Timestamp, msg: `{"f":"2024-02-29T23:30:00-01:30"}`, want: "2024-03-01T01:00:00Z"},
		{name: "timestamp long fraction", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05.1234567891234Z"}`, want: "2026-01-02T03:04:05.123456Z"},
		{name: "timestamp lower case", typ: batch.Timestamp, msg: `{"f":"2026-01-02t03:04:05z"}`, want: "2026-01-02T03:04:05Z"},
		{name: "timestamp space", typ: batch.Timestamp, msg: `{"f":"2026-01-02 03:04:05Z"}`, want: "2026-01-02T03:04:05Z"},
		{name: "timestamp before epoch", typ: batch.Timestamp, msg: `{"f":"1969-12-31T23:59:59.5Z"}`, want: "1969-12-31T23:59:59.5Z"},
		{name: "timestamp epoch millis", typ: batch.Timestamp, msg: `{"f":1767323045123}`, want: "2026-01-02T03:04:05.123Z"},
		{name: "timestamp negative millis", typ: batch.Timestamp, msg: `{"f":-1}`, want: "1969-12-31T23:59:59.999Z"},
		{name: "timestamp millis overflow", typ: batch.Timestamp, msg: `{"f":9223372036854775807}`, reason: batch.ReasonTypeMismatch, errText: "out of range for a timestamp"},
		{name: "timestamp fractional millis", typ: batch.Timestamp, msg: `{"f":1767323045123.5}`, reason: batch.ReasonTypeMismatch, errText: "is not an integer number of epoch milliseconds"},
		{name: "timestamp no offset", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "2026-01-02T03:04:05" is not an RFC 3339 timestamp`},
		{name: "timestamp bad month", typ: batch.Timestamp, msg: `{"f":"2026-13-02T03:04:05Z"}`, reason: batch.ReasonTypeMismatch, errText: "RFC 3339"},
		{name: "timestamp no leap day", typ: batch.Timestamp, msg: `{"f":"2026-02-29T03:04:05Z"}`, reason: batch.ReasonTypeMismatch, errText: "RFC 3339"},
		{name: "timestamp bad hour", typ: batch.Timestamp, msg: `{"f":"2026-01-02T24:00:00Z"}`, reason: batch.ReasonTypeMismatch, errText: "RFC 3339"},
		{name: "timestamp empty fraction", typ: batch.Timestamp, msg: `{"f":"2026-01-02T03:04:05.Z"}`, reason: batch.ReasonTypeMismatch, errText: "RFC 3339"},
		{name: "timestamp from bool", typ: batch.Timestamp, msg: `{"f":true}`, reason: batch.ReasonTypeMismatch, errText: "true is not a timestamp"},

		// date
		{name: "date", typ: batch.Date, msg: `{"f":"2026-01-02"}`, want: "2026-01-02"},
		{name: "date before epoch", typ: batch.Date, msg: `{"f":"1969-12-31"}`, want: "1969-12-31"},
		{name: "date leap day", typ: batch.Date, msg: `{"f":"2000-02-29"}`, want: "2000-02-29"},
		{name: "date no leap day", typ: batch.Date, msg: `{"f":"1900-02-29"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "1900-02-29" is not a date (YYYY-MM-DD)`},
		{name: "date short", typ: batch.Date, msg: `{"f":"2026-1-2"}`, reason: batch.ReasonTypeMismatch, errText: "is not a date"},
		{name: "date with time", typ: batch.Date, msg: `{"f":"2026-01-02T00:00:00Z"}`, reason: batch.ReasonTypeMismatch, errText: "is not a date"},
		{name: "date from number", typ: batch.Date, msg: `{"f":20260102}`, reason: batch.ReasonTypeMismatch, errText: "20260102 is not a date"},

		// decimal
		{name: "decimal string", typ: dec(12, 2), msg: `{"f":"123.45"}`, want: "123.45"},
		{name: "decimal number", typ: dec(12, 2), msg: `{"f":123.45}`, want: "123.45"},
		{name: "decimal integer", typ: dec(12, 2), msg: `{"f":7}`, want: "7.00"},
		{name: "decimal negative", typ: dec(12, 2), msg: `{"f":"-0.5"}`, want: "-0.50"},
		{name: "decimal trailing zeros", typ: dec(12, 2), msg: `{"f":1.2300}`, want: "1.23"},
		{name: "decimal exponent", typ: dec(12, 2), msg: `{"f":"1e2"}`, want: "100.00"},
		{name: "decimal negative exponent", typ: dec(12, 2), msg: `{"f":1E-2}`, want: "0.01"},
		{name: "decimal spaces in string", typ: dec(12, 2), msg: `{"f":" 1.5 "}`, want: "1.50"},
		{name: "decimal 0.1 scale 1", typ: dec(1, 1), msg: `{"f":0.1}`, want: "0.1"},
		{name: "decimal 0.1 string scale 1", typ: dec(3, 1), msg: `{"f":"0.1"}`, want: "0.1"},
		{name: "decimal 38 digits", typ: dec(38, 2), msg: `{"f":"12345678901234567890.12"}`, want: "12345678901234567890.12"},
		{name: "decimal 38 digits number", typ: dec(38, 2), msg: `{"f":12345678901234567890.12}`, want: "12345678901234567890.12"},
		{name: "decimal precision max", typ: dec(38, 0), msg: `{"f":-99999999999999999999999999999999999999}`, want: "-99999999999999999999999999999999999999"},
		{name: "decimal precision overflow", typ: dec(38, 0), msg: `{"f":100000000000000000000000000000000000000}`, reason: batch.ReasonTypeMismatch, errText: "does not fit decimal(38,0)"},
		{name: "decimal too many fraction digits", typ: dec(12, 2), msg: `{"f":"1.234"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "1.234" has more than 2 fractional digits`},
		{name: "decimal too many integer digits", typ: dec(12, 2), msg: `{"f":10000000000}`, reason: batch.ReasonTypeMismatch, errText: "does not fit decimal(12,2)"},
		{name: "decimal not a number", typ: dec(12, 2), msg: `{"f":"abc"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "abc" is not a decimal(12,2)`},
		{name: "decimal fraction form", typ: dec(12, 2), msg: `{"f":"1/2"}`, reason: batch.ReasonTypeMismatch, errText: "is not a decimal(12,2)"},
		{name: "decimal hex", typ: dec(12, 2), msg: `{"f":"0x10"}`, reason: batch.ReasonTypeMismatch, errText: "is not a decimal(12,2)"},
		{name: "decimal underscore", typ: dec(12, 2), msg: `{"f":"1_0"}`, reason: batch.ReasonTypeMismatch, errText: "is not a decimal(12,2)"},
		{name: "decimal huge exponent", typ: dec(12, 2), msg: `{"f":1e999999999}`, reason: batch.ReasonTypeMismatch, errText: "does not fit"},
		{name: "decimal from bool", typ: dec(12, 2), msg: `{"f":true}`, reason: batch.ReasonTypeMismatch, errText: "true is not a decimal(12,2)"},

		// bytes
		{name: "bytes std", typ: batch.Bytes, msg: `{"f":"aGVsbG8="}`, want: "0x68656c6c6f"},
		{name: "bytes raw std", typ: batch.Bytes, msg: `{"f":"aGVsbG8"}`, want: "0x68656c6c6f"},
		{name: "bytes url", typ: batch.Bytes, msg: `{"f":"-_8="}`, want: "0xfbff"},
		{name: "bytes raw url", typ: batch.Bytes, msg: `{"f":"-_8"}`, want: "0xfbff"},
		{name: "bytes empty", typ: batch.Bytes, msg: `{"f":""}`, want: "0x"},
		{name: "bytes invalid", typ: batch.Bytes, msg: `{"f":"!!!!"}`, reason: batch.ReasonTypeMismatch, errText: `field "f": "!!!!" is not valid base64`},
		{name: "bytes bad padding", typ: batch.Bytes, msg: `{"f":"aGVsbG8=="}`, reason: batch.ReasonTypeMismatch, errText: "is not valid base64"},
		{name: "bytes from number", typ: batch.Bytes, msg: `{"f":5}`, reason: batch.ReasonTypeMismatch, errText: "5 is not a base64 string"},

		// the whole message
		{name: "not JSON", typ: batch.String, msg: `not json`, reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "truncated", typ: batch.String, msg: `{"f":"a"`, reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "trailing data", typ: batch.String, msg: `{"f":"a"} {}`, reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "empty message", typ: batch.String, msg: ``, reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "array", typ: batch.String, msg: `[1,2]`, reason: batch.ReasonUndecodable, errText: "the message is a JSON array, not an object"},
		{name: "string message", typ: batch.String, msg: `"f"`, reason: batch.ReasonUndecodable, errText: "the message is a JSON string, not an object"},
		{name: "null message", typ: batch.String, nullable: true, msg: `null`, reason: batch.ReasonUndecodable, errText: "the message is a JSON null, not an object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := batch.Schema{Columns: []batch.Column{{Name: "f", Type: tc.typ, Nullable: tc.nullable}}}
			d := mustNew(t, s)
			out := batch.New(s, 1)
			err := d.Decode(&batch.Record{Topic: "t", Value: []byte(tc.msg)}, out)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if out.Len() != 1 {
					t.Fatalf("batch has %d rows, want 1", out.Len())
				}
				if got := show(out.Vectors[0].Value(0)); got != tc.want {
					t.Fatalf("value %q, want %q", got, tc.want)
				}
				if err := out.Check(); err != nil {
					t.Fatal(err)
				}
				return
			}
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("Decode returned %v (%T), want *Error", err, err)
			}
			if de.Reason != tc.reason {
				t.Errorf("reason %q, want %q (%v)", de.Reason, tc.reason, err)
			}
			if !strings.Contains(err.Error(), tc.errText) {
				t.Errorf("error %q does not contain %q", err, tc.errText)
			}
			if out.Len() != 0 {
				t.Errorf("a failed decode left %d rows", out.Len())
			}
		})
	}
}

func TestDecodeTombstone(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{{Name: "f", Type: batch.String, Nullable: true}}}
	d := mustNew(t, s)
	out := batch.New(s, 1)
	err := d.Decode(&batch.Record{Topic: "t", Key: []byte("k")}, out)
	var de *Error
	if !errors.As(err, &de) || de.Reason != batch.ReasonUndecodable || de.Field != "" {
		t.Fatalf("tombstone: %#v, want an undecodable *Error without a field", err)
	}
	if !strings.Contains(err.Error(), "tombstone") {
		t.Errorf("error %q does not say tombstone", err)
	}
}

func TestDecodeRollsBackPartialRow(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "a", Type: batch.String, Nullable: true},
		{Name: "b", Type: batch.Int64, Nullable: true},
		{Name: "c", Type: batch.Decimal(5, 2)},
	}}
	d := mustNew(t, s)
	out := batch.New(s, 4)
	if err := d.Decode(&batch.Record{Value: []byte(`{"a":"x","b":1,"c":"1.5"}`)}, out); err != nil {
		t.Fatal(err)
	}
	// a and b append (b a null, creating its null flags) before c fails.
	err := d.Decode(&batch.Record{Value: []byte(`{"a":"y","b":null,"c":"1.555"}`)}, out)
	var de *Error
	if !errors.As(err, &de) || de.Field != "c" || de.Reason != batch.ReasonTypeMismatch {
		t.Fatalf("got %v, want a type mismatch on c", err)
	}
	if out.Len() != 1 {
		t.Fatalf("batch has %d rows after a failed row, want 1", out.Len())
	}
	if err := out.Check(); err != nil {
		t.Fatalf("batch inconsistent after rollback: %v", err)
	}
	if err := d.Decode(&batch.Record{Value: []byte(`{"a":null,"b":2,"c":3}`)}, out); err != nil {
		t.Fatal(err)
	}
	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"x", "1", "1.50"}, {"NULL", "2", "3.00"}}
	for i, row := range want {
		for c, w := range row {
			if got := show(out.Vectors[c].Value(i)); got != w {
				t.Errorf("row %d column %d = %q, want %q", i, c, got, w)
			}
		}
	}
}

func TestNewJSONErrors(t *testing.T) {
	cases := []struct {
		name string
		cols []batch.Column
		want string
	}{
		{"partition as string", []batch.Column{{Name: batch.FieldKafkaPartition, Type: batch.String}}, "_kafka_partition is int64, declared string"},
		{"offset as float", []batch.Column{{Name: batch.FieldKafkaOffset, Type: batch.Float64}}, "_kafka_offset is int64"},
		{"timestamp as int64", []batch.Column{{Name: batch.FieldKafkaTimestamp, Type: batch.Int64}}, "_kafka_timestamp is timestamp"},
		{"topic as bytes", []batch.Column{{Name: batch.FieldKafkaTopic, Type: batch.Bytes}}, "_kafka_topic is string"},
		{"key as int64", []batch.Column{{Name: batch.FieldKafkaKey, Type: batch.Int64}}, "_kafka_key is bytes or string, declared int64"},
		{"file path as int64", []batch.Column{{Name: FieldFilePath, Type: batch.Int64}}, "_file_path is string"},
		{"duplicate", []batch.Column{{Name: "a", Type: batch.String}, {Name: "a", Type: batch.Int64}}, `column "a" declared twice`},
		{"invalid type", []batch.Column{{Name: "a"}}, `column "a" has invalid type`},
		{"bad decimal", []batch.Column{{Name: "a", Type: batch.Decimal(40, 2)}}, `column "a" has invalid type decimal(40,2)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewJSON(batch.Schema{Columns: tc.cols})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewJSON error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeMetadata(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 678_901_234, time.UTC)
	cases := []struct {
		name   string
		cols   []batch.Column
		rec    batch.Record
		want   []string
		reason string
		field  string
	}{
		{
			name: "all kafka fields",
			cols: []batch.Column{
				{Name: "id", Type: batch.Int64},
				{Name: batch.FieldKafkaTopic, Type: batch.String},
				{Name: batch.FieldKafkaPartition, Type: batch.Int64},
				{Name: batch.FieldKafkaOffset, Type: batch.Int64},
				{Name: batch.FieldKafkaTimestamp, Type: batch.Timestamp},
				{Name: batch.FieldKafkaKey, Type: batch.Bytes},
			},
			rec:  batch.Record{Topic: "orders", Partition: 3, Offset: 42, Timestamp: ts, Key: []byte("k1"), Value: []byte(`{"id":1,"_kafka_topic":"spoofed"}`)},
			want: []string{"1", "orders", "3", "42", "2026-01-02T03:04:05.678901Z", "0x6b31"},
		},
		{
			name: "key as string and file path",
			cols: []batch.Column{
				{Name: batch.FieldKafkaKey, Type: batch.String},
				{Name: FieldFilePath, Type: batch.String},
			},
			rec:  batch.Record{Topic: "history/2025.jsonl", Key: []byte("k-7"), Value: []byte(`{}`)},
			want: []string{"k-7", "history/2025.jsonl"},
		},
		{
			name: "null key nullable",
			cols: []batch.Column{{Name: batch.FieldKafkaKey, Type: batch.Bytes, Nullable: true}},
			rec:  batch.Record{Topic: "t", Value: []byte(`{}`)},
			want: []string{"NULL"},
		},
		{
			name: "empty key is not null",
			cols: []batch.Column{{Name: batch.FieldKafkaKey, Type: batch.Bytes}},
			rec:  batch.Record{Topic: "t", Key: []byte{}, Value: []byte(`{}`)},
			want: []string{"0x"},
		},
		{
			name:   "null key not nullable",
			cols:   []batch.Column{{Name: batch.FieldKafkaKey, Type: batch.String}},
			rec:    batch.Record{Topic: "t", Value: []byte(`{}`)},
			reason: batch.ReasonMissingField,
			field:  batch.FieldKafkaKey,
		},
		{
			name: "no timestamp nullable",
			cols: []batch.Column{{Name: batch.FieldKafkaTimestamp, Type: batch.Timestamp, Nullable: true}},
			rec:  batch.Record{Topic: "t", Value: []byte(`{}`)},
			want: []string{"NULL"},
		},
		{
			name:   "no timestamp not nullable",
			cols:   []batch.Column{{Name: batch.FieldKafkaTimestamp, Type: batch.Timestamp}},
			rec:    batch.Record{Topic: "t", Value: []byte(`{}`)},
			reason: batch.ReasonMissingField,
			field:  batch.FieldKafkaTimestamp,
		},
		{
			name:   "metadata only still needs an object",
			cols:   []batch.Column{{Name: batch.FieldKafkaOffset, Type: batch.Int64}},
			rec:    batch.Record{Topic: "t", Value: []byte(`42`)},
			reason: batch.ReasonUndecodable,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := batch.Schema{Columns: tc.cols}
			d := mustNew(t, s)
			out := batch.New(s, 1)
			err := d.Decode(&tc.rec, out)
			if tc.reason != "" {
				var de *Error
				if !errors.As(err, &de) || de.Reason != tc.reason || de.Field != tc.field {
					t.Fatalf("got %#v, want reason %q on field %q", err, tc.reason, tc.field)
				}
				if tc.field != "" && !strings.Contains(err.Error(), strconv.Quote(tc.field)) {
					t.Errorf("error %q does not name %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for c, w := range tc.want {
				if got := show(out.Vectors[c].Value(0)); got != w {
					t.Errorf("column %s = %q, want %q", tc.cols[c].Name, got, w)
				}
			}
		})
	}
}

func TestDecodeAll(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "amount", Type: batch.Decimal(12, 2)},
		{Name: batch.FieldKafkaOffset, Type: batch.Int64},
	}}
	d := mustNew(t, s)
	recs := []batch.Record{
		{Topic: "orders", Partition: 1, Offset: 10, Value: []byte(`{"id":1,"name":"a","amount":"1.50"}`)},
		{Topic: "orders", Partition: 1, Offset: 11, Value: []byte(`{"id":2,"name":"b","amount":"abc"}`)},
		{Topic: "orders", Partition: 1, Offset: 12, Value: []byte(`{"id":3,"amount":2}`)},
		{Topic: "orders", Partition: 1, Offset: 13, Value: []byte(`{"id":`)},
		{Topic: "orders", Partition: 1, Offset: 14},
		{Topic: "orders", Partition: 1, Offset: 15, Value: []byte(`{"name":"c","amount":3}`)},
		{Topic: "orders", Partition: 1, Offset: 16, Value: []byte(`{"id":4,"name":null,"amount":-0.25}`)},
	}
	out := batch.New(s, len(recs))
	prior := []batch.DeadLetter{{Reason: "earlier"}}
	dls := d.DecodeAll(recs, out, prior)

	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for i := range out.Len() {
		var cells []string
		for _, v := range out.Row(i) {
			cells = append(cells, show(v))
		}
		rows = append(rows, strings.Join(cells, ","))
	}
	wantRows := []string{"1,a,1.50,10", "3,NULL,2.00,12", "4,NULL,-0.25,16"}
	if strings.Join(rows, "\n") != strings.Join(wantRows, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(wantRows, "\n"))
	}

	want := []struct{ pos, reason, err string }{
		{"1/11", batch.ReasonTypeMismatch, `field "amount": "abc" is not a decimal(12,2)`},
		{"1/13", batch.ReasonUndecodable, "invalid JSON"},
		{"1/14", batch.ReasonUndecodable, "the message is a tombstone (null value)"},
		{"1/15", batch.ReasonMissingField, `field "id": missing, and the column is not nullable`},
	}
	if len(dls) != 1+len(want) || dls[0].Reason != "earlier" {
		t.Fatalf("got %d dead letters (first %q), want the prior one and %d new", len(dls), dls[0].Reason, len(want))
	}
	for i, w := range want {
		dl := dls[i+1]
		off, _ := strconv.Atoi(w.pos[2:])
		rec := recs[off-10]
		if dl.Source != "orders" || dl.Position != w.pos || dl.Reason != w.reason || !strings.Contains(dl.Error, w.err) {
			t.Errorf("dead letter %d = %+v, want position %s reason %s error ~%q", i, dl, w.pos, w.reason, w.err)
		}
		if string(dl.Payload) != string(rec.Value) || (rec.Value == nil) != (dl.Payload == nil) {
			t.Errorf("dead letter %d payload %q, want %q", i, dl.Payload, rec.Value)
		}
		if dl.Pipeline != "" || dl.Flow != "" || dl.Target != "" || !dl.At.IsZero() {
			t.Errorf("dead letter %d sets caller fields: %+v", i, dl)
		}
	}
}

func TestDecodeKeepsNoReferenceToTheMessage(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "s", Type: batch.String},
		{Name: "b", Type: batch.Bytes},
		{Name: batch.FieldKafkaKey, Type: batch.Bytes},
	}}
	d := mustNew(t, s)
	out := batch.New(s, 2)
	msg := []byte(`{"s":"hello","b":"aGk="}`)
	key := []byte("key")
	if err := d.Decode(&batch.Record{Key: key, Value: msg}, out); err != nil {
		t.Fatal(err)
	}
	for i := range msg {
		msg[i] = 'x'
	}
	copy(key, "zzz")
	// Another message through the same parser and arena.
	if err := d.Decode(&batch.Record{Key: []byte("k2"), Value: []byte(`{"s":"world","b":"eW8="}`)}, out); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(show(out.Vectors[0].Value(0)), show(out.Vectors[1].Value(0)), show(out.Vectors[2].Value(0)))
	if want := fmt.Sprint("hello", "0x6869", "0x6b6579"); got != want {
		t.Fatalf("first row became %q, want %q", got, want)
	}
	// Appending to a decoded bytes value must not overwrite later values.
	_ = append(out.Vectors[1].Bytes[0], 'Z', 'Z', 'Z', 'Z')
	if got := show(out.Vectors[1].Value(1)); got != "0x796f" {
		t.Fatalf("second bytes value became %q after an append to the first", got)
	}
}

func TestDecodeLongStrings(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{{Name: "s", Type: batch.String}}}
	d := mustNew(t, s)
	out := batch.New(s, 0)
	var want []string
	// Strings beyond a chunk's eighth and many small ones that span chunks.
	for i := range 3000 {
		v := strings.Repeat(strconv.Itoa(i%10), 1+(i*37)%300)
		if i%500 == 0 {
			v = strings.Repeat("L", arenaChunk/4)
		}
		want = append(want, v)
		if err := d.Decode(&batch.Record{Value: []byte(`{"s":"` + v + `"}`)}, out); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range want {
		if out.Vectors[0].Strs[i] != w {
			t.Fatalf("row %d holds %d bytes %.10q..., want %d bytes %.10q...", i, len(out.Vectors[0].Strs[i]), out.Vectors[0].Strs[i], len(w), w)
		}
	}
}

func TestCloneConcurrent(t *testing.T) {
	s := orderSchema()
	d := mustNew(t, s)
	var wg sync.WaitGroup
	outs := make([]*batch.Batch, 4)
	for g := range outs {
		dd := d.Clone()
		if !dd.Schema().Equal(s) {
			t.Fatal("clone has another schema")
		}
		outs[g] = batch.New(dd.Schema(), 500)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				msg := fmt.Sprintf(`{"order_id":%d,"customer_id":"c-%d","amount":"%d.25","currency":"EUR","status":"paid","created_at":"2026-01-02T03:04:05.123Z","items":%d,"country":"DE"}`, i, g, i, g)
				if err := dd.Decode(&batch.Record{Value: []byte(msg)}, outs[g]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for g, out := range outs {
		if out.Len() != 500 {
			t.Fatalf("goroutine %d decoded %d rows", g, out.Len())
		}
		for i := range 500 {
			if got, want := out.Vectors[1].Strs[i], fmt.Sprintf("c-%d", g); got != want {
				t.Fatalf("goroutine %d row %d customer %q, want %q", g, i, got, want)
			}
			if got, want := show(out.Vectors[2].Value(i)), fmt.Sprintf("%d.25", i); got != want {
				t.Fatalf("goroutine %d row %d amount %q, want %q", g, i, got, want)
			}
		}
	}
}

func TestDecodePanicsOnForeignBatch(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{{Name: "a", Type: batch.Int64}}}
	d := mustNew(t, s)
	other := batch.New(batch.Schema{Columns: []batch.Column{{Name: "a", Type: batch.String}}}, 1)
	defer func() {
		if recover() == nil {
			t.Fatal("Decode into a batch of another schema did not panic")
		}
	}()
	_ = d.Decode(&batch.Record{Value: []byte(`{"a":1}`)}, other)
}

// TestDecodeTimestampUnits checks that an integer timestamp is read in its
// column's unit, and that what a timestamp cannot hold is refused.
func TestDecodeTimestampUnits(t *testing.T) {
	for _, tc := range []struct {
		unit, msg, want, errText string
	}{
		{"", `{"f":1700000000123}`, "2023-11-14T22:13:20.123Z", ""},
		{"ms", `{"f":1700000000123}`, "2023-11-14T22:13:20.123Z", ""},
		{"s", `{"f":1700000000}`, "2023-11-14T22:13:20Z", ""},
		{"us", `{"f":1700000000123456}`, "2023-11-14T22:13:20.123456Z", ""},
		{"ns", `{"f":1700000000123456000}`, "2023-11-14T22:13:20.123456Z", ""},
		{"ns", `{"f":1700000000123456789}`, "", "has a fraction of a microsecond"},
		{"s", `{"f":9223372036854775807}`, "", "is out of range for a timestamp"},
		{"s", `{"f":1.5}`, "", "is not an integer number of epoch seconds"},
		{"s", `{"f":"2024-01-02T03:04:05Z"}`, "2024-01-02T03:04:05Z", ""},
	} {
		d, err := NewJSON(batch.Schema{Columns: []batch.Column{{Name: "f", Type: batch.Timestamp}}}, Units{"f": tc.unit})
		if err != nil {
			t.Fatalf("unit %q: %v", tc.unit, err)
		}
		out := batch.New(d.Schema(), 1)
		e := d.Decode(&batch.Record{Value: []byte(tc.msg)}, out)
		switch {
		case tc.errText != "" && (e == nil || !strings.Contains(e.Error(), tc.errText)):
			t.Errorf("unit %q, %s: error %v, want %q", tc.unit, tc.msg, e, tc.errText)
		case tc.errText == "" && e != nil:
			t.Errorf("unit %q, %s: %v", tc.unit, tc.msg, e)
		case tc.errText == "" && show(out.Row(0)[0]) != tc.want:
			t.Errorf("unit %q, %s = %s, want %s", tc.unit, tc.msg, show(out.Row(0)[0]), tc.want)
		}
	}
	if _, err := NewJSON(batch.Schema{Columns: []batch.Column{{Name: "f", Type: batch.Timestamp}}}, Units{"f": "days"}); err == nil {
		t.Error("unit days: no error")
	}
	if _, err := NewJSON(batch.Schema{Columns: []batch.Column{{Name: "f", Type: batch.Int64}}}, Units{"f": "s"}); err == nil {
		t.Error("a unit on an int64 column: no error")
	}
}

// TestPaths checks declared columns that take nested fields: values are
// checked as any other, a missing one is NULL or a missing_field named by
// its path, and under columns: freeze the field holding a path is no
// stray field.
func TestPaths(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "zip", Type: batch.String},
		{Name: "first", Type: batch.Int64, Nullable: true},
	}}
	d, err := NewJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetPaths(Paths{"zip": "customer.address.zip", "first": "items.0.qty"}); err != nil {
		t.Fatal(err)
	}
	d.Govern(Contract{Columns: Freeze})
	msgs := []string{
		`{"id": 1, "customer": {"address": {"zip": "1000"}}, "items": [{"qty": 2}]}`,
		`{"id": 2, "customer": {"address": {"zip": "2000"}}}`,
		`{"id": 3, "customer": {"address": {}}}`,
		`{"id": 4, "customer": {"address": {"zip": 4}}}`,
		`{"id": 5, "zip": "5", "customer": {"address": {"zip": "5000"}}}`,
	}
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Offset: int64(i), Value: []byte(m)}
	}
	out := batch.New(s, len(recs))
	dls := d.DecodeAll(recs, out, nil)
	if got := rowsOf(out); !slices.Equal(got, []string{"1,1000,2", "2,2000,<nil>"}) {
		t.Fatalf("rows %q", got)
	}
	want := []string{
		`missing_field field "customer.address.zip": missing, and the column is not nullable`,
		`type_mismatch field "customer.address.zip": 4 is not a string`,
		`schema_contract field "zip": is not a column of the table (schema_contract columns: freeze)`,
	}
	var got []string
	for _, dl := range dls {
		got = append(got, dl.Reason+" "+dl.Error)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []Paths{{"nope": "a"}, {"zip": "a..b"}} {
		d, _ := NewJSON(s)
		if err := d.SetPaths(bad); err == nil {
			t.Errorf("SetPaths(%v) took it", bad)
		}
	}
}

func rowsOf(b *batch.Batch) []string {
	var out []string
	for r := range b.Len() {
		var vals []string
		for _, v := range b.Vectors {
			vals = append(vals, fmt.Sprint(v.Value(r)))
		}
		out = append(out, strings.Join(vals, ","))
	}
	return out
}

// TestArrays checks that a JSON list decodes into an array column element
// by element, and that a record failing later (a bad element, another
// column) leaves none of its elements behind.
func TestArrays(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "qty", Type: batch.ArrayOf(batch.Int64)},
		{Name: "id", Type: batch.Int64},
		{Name: "at", Type: batch.ArrayOf(batch.Timestamp)},
	}}
	d, err := NewJSON(s, Units{"at": "s"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []string{
		`{"qty": [1, 2], "id": 1, "at": [0, "1970-01-01T00:00:01Z"]}`,
		`{"qty": [3, 4], "id": "x", "at": []}`,
		`{"qty": [5, 6.5], "id": 3, "at": []}`,
		`{"qty": [], "id": 4, "at": [2]}`,
		`{"qty": [7], "id": 5, "at": [1, null]}`,
		`{"qty": {"a": 1}, "id": 6, "at": []}`,
		`{"qty": [9223372036854775808], "id": 7, "at": []}`,
	}
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Offset: int64(i), Value: []byte(m)}
	}
	out := batch.New(s, len(recs))
	dls := d.DecodeAll(recs, out, nil)
	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"[1 2],1,[1970-01-01 00:00:00 +0000 UTC 1970-01-01 00:00:01 +0000 UTC]",
		"[],4,[1970-01-01 00:00:02 +0000 UTC]",
	}
	if got := rowsOf(out); !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	if n := out.Vectors[0].Elems.Len(); n != 2 {
		t.Errorf("qty holds %d elements, want 2: a dropped record left some behind", n)
	}
	wantBad := []string{
		`type_mismatch field "id": "x" is not an int64`,
		`type_mismatch field "qty[1]": 6.5 is not an integer`,
		`type_mismatch field "at[1]": null, and the elements of array(timestamp) are never null`,
		`type_mismatch field "qty": a JSON object is not a JSON array, as array(int64) is`,
		`type_mismatch field "qty[0]": 9223372036854775808 is out of range for int64`,
	}
	var got []string
	for _, dl := range dls {
		got = append(got, dl.Reason+" "+dl.Error)
	}
	if !slices.Equal(got, wantBad) {
		t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantBad, "\n"))
	}
}
