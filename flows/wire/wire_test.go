package wire

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
)

// newRegistry serves schemas from franz-go's in-memory registry.
func newRegistry(t *testing.T) (*srfake.Registry, *Registry) {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	reg, err := NewRegistry(Config{URL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return fake, reg
}

func register(t *testing.T, fake *srfake.Registry, subject string, s sr.Schema) int {
	t.Helper()
	id, _, err := fake.RegisterSchema(subject, s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func frame(id int, b []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), b...)
}

// decodeOne decodes one value and returns its JSON or its dead letter.
func decodeOne(t *testing.T, d *Decoder, value []byte) (string, *batch.DeadLetter) {
	t.Helper()
	res, err := d.Records(context.Background(), []batch.Record{{Topic: "t", Offset: 7, Value: value}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeadLetters) == 1 {
		return "", &res.DeadLetters[0]
	}
	if string(res.Records[0].Raw) != string(value) {
		t.Errorf("Raw %q, want the message's bytes", res.Records[0].Raw)
	}
	return string(res.Records[0].Value), nil
}

const logical = `{"type":"record","name":"R","fields":[
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}},
 {"name":"fdec","type":{"type":"fixed","name":"F","size":5,"logicalType":"decimal","precision":10,"scale":2}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"uid","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"b","type":"bytes"},
 {"name":"s","type":"string"},
 {"name":"e","type":{"type":"enum","name":"E","symbols":["X","Y"]}},
 {"name":"m","type":{"type":"map","values":"long"}},
 {"name":"a","type":{"type":"array","items":"int"}},
 {"name":"u","type":["null","string","long"]},
 {"name":"vsd","type":{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","connect.name":"io.debezium.data.VariableScaleDecimal","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}]}},
 {"name":"dbzdate","type":{"type":"int","connect.name":"io.debezium.time.Date"}},
 {"name":"dbzts","type":{"type":"long","connect.name":"io.debezium.time.NanoTimestamp"}}]}`

// TestAvroLogicalTypes writes every logical type as the value it stands
// for, in the text the decoders read.
func TestAvroLogicalTypes(t *testing.T) {
	fake, reg := newRegistry(t)
	id := register(t, fake, "r", sr.Schema{Schema: logical})
	s, err := avro.ParseWithCache(logical, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	v := map[string]any{
		"dec": big.NewRat(-12345, 1000), "fdec": big.NewRat(-5, 100), "day": at, "tm": 3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond,
		"tu": time.Duration(1) * time.Microsecond, "tsm": at, "tsu": at, "uid": [16]byte{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e},
		"f": float32(1.5), "d": math.Inf(1), "b": []byte{0, 1, 2}, "s": "a\"b\\c\n\x01é", "e": "Y", "m": map[string]any{"k": int64(1)}, "a": []int{1, 2},
		"u": map[string]any{"long": int64(5)}, "vsd": map[string]any{"scale": 2, "value": []byte{0xff, 0x38}}, "dbzdate": 20000, "dbzts": int64(1_700_000_000_123_456_789),
	}
	b, err := avro.Marshal(s, v)
	if err != nil {
		t.Fatal(err)
	}
	got, dl := decodeOne(t, NewDecoder(reg, Avro, nil), frame(id, b))
	if dl != nil {
		t.Fatalf("dead letter %+v", dl)
	}
	want := `{"dec":"-12.345","fdec":"-0.05","day":"2026-01-02","tm":"03:04:05.006","tu":"00:00:00.000001","tsm":"2026-01-02T03:04:05.123Z",` +
		`"tsu":"2026-01-02T03:04:05.123456Z","uid":"0f8fad5b-d9cb-469f-a165-70867728950e","f":1.5,"d":"+Inf","b":"AAEC","s":"a\"b\\c\n\u0001é",` +
		`"e":"Y","m":{"k":1},"a":[1,2],"u":5,"vsd":"-2.00","dbzdate":"2024-10-04","dbzts":"2023-11-14T22:13:20.123456789Z"}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Error("not valid JSON")
	}
}

// TestAvroRefusals makes dead letters of messages that do not decode
// exactly, each with its reason.
func TestAvroRefusals(t *testing.T) {
	fake, reg := newRegistry(t)
	id := register(t, fake, "r", sr.Schema{Schema: `{"type":"record","name":"R","fields":[{"name":"x","type":"long"},{"name":"u","type":["null","long"]}]}`})
	pid := register(t, fake, "p", sr.Schema{Schema: `syntax = "proto3"; message M { int64 x = 1; }`, Type: sr.TypeProtobuf})
	aid := register(t, fake, "a", sr.Schema{Schema: `{"type":"array","items":"long"}`})
	d := NewDecoder(reg, Avro, nil)
	for _, tc := range []struct {
		name, reason, msg string
		value             []byte
	}{
		{"unframed", batch.ReasonUndecodable, "not in the Schema Registry wire format", []byte(`{"x":1}`)},
		{"unknown id", ReasonUnknownSchema, "schema id 4242", frame(4242, []byte{2, 0})},
		{"trailing bytes", batch.ReasonUndecodable, "bytes left after the record", frame(id, []byte{2, 0, 9})},
		{"short", batch.ReasonUndecodable, "invalid Avro data", frame(id, []byte{2})},
		{"union branch", batch.ReasonUndecodable, "branch index", frame(id, []byte{2, 8})},
		{"other type", batch.ReasonUndecodable, "is Protobuf, and the flow reads format avro", frame(pid, []byte{0, 8, 1})},
		{"huge block count", batch.ReasonUndecodable, "a block of 50000000 items", frame(aid, []byte{0x80, 0xc2, 0xd7, 0x2f})},
	} {
		_, dl := decodeOne(t, d, tc.value)
		if dl == nil || dl.Reason != tc.reason || !strings.Contains(dl.Error, tc.msg) || dl.Position != "0/7" || string(dl.Payload) != string(tc.value) {
			t.Errorf("%s: dead letter %+v, want reason %s and %q", tc.name, dl, tc.reason, tc.msg)
		}
	}
}

// TestAvroLargeValues reads a string larger than the library's default
// bound of 1 MiB.
func TestAvroLargeValues(t *testing.T) {
	fake, reg := newRegistry(t)
	id := register(t, fake, "s", sr.Schema{Schema: `"string"`})
	big := strings.Repeat("x", 3<<20)
	b, err := avro.Marshal(avro.MustParse(`"string"`), big)
	if err != nil {
		t.Fatal(err)
	}
	got, dl := decodeOne(t, NewDecoder(reg, Avro, nil), frame(id, b))
	if dl != nil || len(got) != len(big)+2 {
		t.Fatalf("a 3 MiB string: %d bytes, dead letter %+v", len(got), dl)
	}
}

// TestFramedKeys decodes a framed message key, and leaves JSON values of
// a Debezium topic as they are.
func TestFramedKeys(t *testing.T) {
	fake, reg := newRegistry(t)
	kid := register(t, fake, "k", sr.Schema{Schema: `{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}`})
	d := NewDecoder(reg, Framed, nil)
	res, err := d.Records(context.Background(), []batch.Record{
		{Key: frame(kid, []byte{6}), Value: nil},
		{Key: []byte(`{"id":3}`), Value: []byte(`{"op":"c"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 2 || string(res.Records[0].Key) != `{"id":3}` || res.Records[0].Value != nil ||
		string(res.Records[1].Value) != `{"op":"c"}` || res.Records[1].Raw != nil {
		t.Errorf("records %+v", res.Records)
	}
	// A key that only looks framed (a long of the Kafka serializer) stays
	// as it is, and its record decodes.
	long42 := []byte{0, 0, 0, 0, 0, 0, 0, 42}
	res, err = d.Records(context.Background(), []batch.Record{{Key: long42, Value: []byte(`{"op":"c"}`)}})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Key) != string(long42) || len(res.DeadLetters) != 0 {
		t.Errorf("a long key: %+v, %v", res, err)
	}
	// A string key schema, under key_format: string, is its text.
	sid := register(t, fake, "ks", sr.Schema{Schema: `"string"`})
	d.KeyText = true
	res, err = d.Records(context.Background(), []batch.Record{{Key: frame(sid, []byte{6, 'a', '"', 'b'}), Value: nil}})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Key) != `a"b` {
		t.Errorf("string key %+v, %v; want its text a\"b", res.Records, err)
	}
}

// TestRegistryOutage tells an unreachable registry (retryable, naming the
// remedy) from an unknown schema id, and caches what it fetched.
func TestRegistryOutage(t *testing.T) {
	fake, reg := newRegistry(t)
	id := register(t, fake, "r", sr.Schema{Schema: `"long"`})
	calls := 0
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool { calls++; return false })
	for range 2 {
		if _, err := reg.Schema(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Errorf("%d registry requests for one schema fetched twice, want 1", calls)
	}
	if _, err := reg.Schema(context.Background(), 77); !errors.Is(err, ErrUnknownSchema) || (Classifier{}).Retryable(err) {
		t.Errorf("unknown id: %v", err)
	}
	down, err := NewRegistry(Config{URL: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = down.Schema(context.Background(), 1)
	if !(Classifier{}).Retryable(err) || !strings.Contains(err.Error(), "schema_registry.url") {
		t.Errorf("unreachable registry: %v (retryable %v)", err, (Classifier{}).Retryable(err))
	}
	d := NewDecoder(down, Avro, nil)
	if _, err := d.Records(context.Background(), []batch.Record{{Value: frame(1, []byte{2})}}); err == nil || isRecordError(err) {
		t.Errorf("Records with the registry down: %v, want the outage as the error", err)
	}
}

// TestDecimalText checks appendDecimal against big.Rat for any unscaled
// value and scale.
func TestDecimalText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := new(big.Int).SetBytes(rapid.SliceOfN(rapid.Byte(), 1, 20).Draw(t, "bytes"))
		if rapid.Bool().Draw(t, "neg") {
			v.Neg(v)
		}
		scale := rapid.IntRange(0, 20).Draw(t, "scale")
		b := twosComplement(v)
		var got string
		if err := json.Unmarshal(appendDecimal(nil, b, scale), &got); err != nil {
			t.Fatal(err)
		}
		r, ok := new(big.Rat).SetString(got)
		want := new(big.Rat).SetFrac(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
		if !ok || r.Cmp(want) != 0 {
			t.Fatalf("%x at scale %d: %q, want %s", b, scale, got, want.FloatString(scale))
		}
		if i := strings.IndexByte(got, '.'); scale > 0 && (i < 0 || len(got)-i-1 != scale) {
			t.Fatalf("%q has not %d digits after the point", got, scale)
		}
	})
}

// TestStringText checks that appendString writes JSON that reads back as
// the same text.
func TestStringText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		var got string
		if err := json.Unmarshal(appendString(nil, []byte(s)), &got); err != nil || got != s {
			t.Fatalf("%q: read back %q (%v)", s, got, err)
		}
	})
}

func twosComplement(v *big.Int) []byte {
	if v.Sign() >= 0 {
		b := v.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	n := len(v.Bytes()) + 1
	m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(n*8)), v)
	b := m.Bytes()
	for len(b) < n {
		b = append([]byte{0xff}, b...)
	}
	return b
}
