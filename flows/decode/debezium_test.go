package decode

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
)

// dbzSchema is a customers table as a Debezium flow declares it.
func dbzSchema() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "email", Type: batch.String},
		{Name: "amount", Type: batch.Decimal(10, 2), Nullable: true},
		{Name: "updated_at", Type: batch.Timestamp, Nullable: true},
		{Name: "birthday", Type: batch.Date, Nullable: true},
		{Name: FieldOp, Type: batch.String},
		{Name: FieldTsMs, Type: batch.Int64},
		{Name: "_source_ts_ms", Type: batch.Int64},
		{Name: "_source_lsn", Type: batch.Int64, Nullable: true},
		{Name: batch.FieldKafkaOffset, Type: batch.Int64},
	}}
}

const dbzSource = `{"version":"2.7.0.Final","connector":"postgresql","name":"shop","ts_ms":1700000000000,"snapshot":"false","db":"shop","schema":"public","table":"customers","txId":742,"lsn":42,"xmin":null}`

// envelope is a bare Debezium payload.
func envelope(op, before, after string) string {
	return `{"before":` + before + `,"after":` + after + `,"source":` + dbzSource + `,"op":"` + op + `","ts_ms":1700000000500,"transaction":null}`
}

// connectSchema is the schema part JsonConverter writes for the customers
// table: id, name and email, then the given field schemas.
func connectSchema(extra ...string) string {
	fields := `{"type":"int64","optional":false,"field":"id"},{"type":"string","optional":true,"field":"name"},{"type":"string","optional":false,"field":"email"}`
	for _, e := range extra {
		fields += "," + e
	}
	value := func(field string) string {
		return `{"type":"struct","fields":[` + fields + `],"optional":true,"name":"shop.public.customers.Value","field":"` + field + `"}`
	}
	return `{"type":"struct","fields":[` + value("before") + `,` + value("after") +
		`,{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}` +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"shop.public.customers.Envelope","version":1}`
}

func wrap(schema, payload string) string {
	return `{"schema":` + schema + `,"payload":` + payload + `}`
}

// Field schemas of the typed columns, as Debezium writes them.
const (
	amountPrecise   = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"amount"}`
	amountScale3    = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"3","connect.decimal.precision":"10"},"field":"amount"}`
	amountScale1    = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"1"},"field":"amount"}`
	amountBadScale  = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"two"},"field":"amount"}`
	amountNoScale   = `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","field":"amount"}`
	amountString    = `{"type":"string","optional":true,"field":"amount"}`
	amountDouble    = `{"type":"double","optional":true,"field":"amount"}`
	amountVariable  = `{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"optional":true,"name":"io.debezium.data.VariableScaleDecimal","field":"amount"}`
	updatedMillis   = `{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"updated_at"}`
	updatedConnect  = `{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"updated_at"}`
	updatedMicros   = `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"updated_at"}`
	updatedNanos    = `{"type":"int64","optional":true,"name":"io.debezium.time.NanoTimestamp","version":1,"field":"updated_at"}`
	updatedZoned    = `{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"updated_at"}`
	updatedDate     = `{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"updated_at"}`
	updatedTime     = `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"updated_at"}`
	birthdayDate    = `{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"birthday"}`
	birthdayConnect = `{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1,"field":"birthday"}`
	birthdayMillis  = `{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"birthday"}`
	birthdayMicros  = `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"birthday"}`
	birthdayNanos   = `{"type":"int64","optional":true,"name":"io.debezium.time.NanoTimestamp","version":1,"field":"birthday"}`
	birthdayTime    = `{"type":"int32","optional":true,"name":"io.debezium.time.Time","version":1,"field":"birthday"}`
)

const (
	annPlain  = `{"id":1,"name":"ann","email":"a@x","amount":"12.34","updated_at":1700000000123,"birthday":"2023-11-14"}`
	annTyped  = `{"id":1,"name":"ann","email":"a@x","amount":"BNI=","updated_at":1700000000123000,"birthday":19675}`
	annBefore = `{"id":1,"name":"an","email":"a@y","amount":"1.00","updated_at":1600000000000,"birthday":null}`
	annRow    = "1,ann,a@x,12.34,2023-11-14T22:13:20.123Z,2023-11-14"
	envRow    = ",1700000000500,1700000000000,42,7" // after _op: _ts_ms, _source_ts_ms, _source_lsn, _kafka_offset
)

var typedSchema = connectSchema(amountPrecise, updatedMicros, birthdayDate)

func mustDebezium(t testing.TB, s batch.Schema, scd2 bool) *Debezium {
	t.Helper()
	d, err := NewDebezium(s, []string{"id"}, scd2)
	if err != nil {
		t.Fatalf("NewDebezium: %v", err)
	}
	return d
}

// rowText renders row i of b as comma-separated show() values.
func rowText(b *batch.Batch, i int) string {
	var cells []string
	for _, v := range b.Row(i) {
		cells = append(cells, show(v))
	}
	return strings.Join(cells, ",")
}

type dbzResult struct {
	rows []string
	ops  []cdc.Op
	dls  []batch.DeadLetter
}

// decodeOne decodes one record (offset 7) with d and checks that the
// results line up.
func decodeOne(t *testing.T, d *Debezium, value, key *string) dbzResult {
	t.Helper()
	rec := batch.Record{Topic: "shop.public.customers", Partition: 0, Offset: 7}
	if value != nil {
		rec.Value = []byte(*value)
	}
	if key != nil {
		rec.Key = []byte(*key)
	}
	out := batch.New(d.Schema(), 1)
	ops, from, dls := d.DecodeAll([]batch.Record{rec}, out, nil, nil, nil)
	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	if len(ops) != out.Len() || len(from) != out.Len() || out.Len()+len(dls) > 1 {
		t.Fatalf("%d rows, %d ops, %d froms, %d dead letters", out.Len(), len(ops), len(from), len(dls))
	}
	var r dbzResult
	for i := range out.Len() {
		if from[i] != 0 {
			t.Fatalf("from[%d] = %d, want 0", i, from[i])
		}
		r.rows = append(r.rows, rowText(out, i))
	}
	r.ops, r.dls = ops, dls
	return r
}

func ptr(s string) *string { return &s }

func TestDebeziumOps(t *testing.T) {
	cases := []struct {
		name    string
		value   *string // nil: a tombstone
		key     *string
		scd2    bool
		tombs   Tombstones
		want    string // the row, when one is appended
		op      cdc.Op
		skipped bool
		reason  string
		errText string
	}{
		{name: "create", value: ptr(envelope("c", "null", annPlain)), want: annRow + ",c" + envRow, op: cdc.OpUpsert},
		{name: "read (snapshot)", value: ptr(envelope("r", "null", annPlain)), want: annRow + ",r" + envRow, op: cdc.OpUpsert},
		{name: "update takes after", value: ptr(envelope("u", annBefore, annPlain)), want: annRow + ",u" + envRow, op: cdc.OpUpsert},
		{name: "update on SCD2", value: ptr(envelope("u", annBefore, annPlain)), scd2: true, want: annRow + ",u" + envRow, op: cdc.OpUpsert},
		{name: "create with schema", value: ptr(wrap(typedSchema, envelope("c", "null", annTyped))), want: annRow + ",c" + envRow, op: cdc.OpUpsert},
		{name: "update with schema", value: ptr(wrap(typedSchema, envelope("u", annTyped, annTyped))), want: annRow + ",u" + envRow, op: cdc.OpUpsert},
		{name: "fields in any order", value: ptr(`{"ts_ms":1700000000500,"op":"c","source":` + dbzSource + `,"after":{"birthday":"2023-11-14","updated_at":1700000000123,"amount":12.34,"email":"a@x","name":"ann","id":1}}`), want: annRow + ",c" + envRow, op: cdc.OpUpsert},
		{name: "last repeated field wins", value: ptr(`{"op":"d","op":"c","after":` + annPlain + `,"source":` + dbzSource + `,"ts_ms":1700000000500}`), want: annRow + ",c" + envRow, op: cdc.OpUpsert},

		{name: "delete takes before", value: ptr(envelope("d", annPlain, "null")), want: annRow + ",d" + envRow, op: cdc.OpDelete},
		{name: "delete with schema", value: ptr(wrap(typedSchema, envelope("d", annTyped, "null"))), want: annRow + ",d" + envRow, op: cdc.OpDelete},
		{name: "delete with a key-only before", value: ptr(envelope("d", `{"id":1,"name":null,"email":null,"amount":null,"updated_at":null,"birthday":null}`, "null")),
			want: "1,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete with a sparse before", value: ptr(envelope("d", `{"id":1}`, "null")), want: "1,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete from the message key", value: ptr(envelope("d", "null", "null")), key: ptr(`{"id":9}`), want: "9,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete from a key with schema", value: ptr(wrap(typedSchema, envelope("d", "null", "null"))),
			key:  ptr(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"shop.public.customers.Key"},"payload":{"id":9}}`),
			want: "9,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete from a scalar key", value: ptr(envelope("d", "null", "null")), key: ptr(`9`), want: "9,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete from a wrapped scalar key", value: ptr(envelope("d", "null", "null")), key: ptr(`{"schema":{"type":"int64"},"payload":9}`), want: "9,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete without before ignores other key fields", value: ptr(`{"op":"d","source":` + dbzSource + `,"ts_ms":1700000000500}`), key: ptr(`{"tenant":"x","id":9}`), want: "9,NULL,,NULL,NULL,NULL,d" + envRow, op: cdc.OpDelete},
		{name: "delete on SCD2", value: ptr(envelope("d", annPlain, "null")), scd2: true, want: annRow + ",d" + envRow, op: cdc.OpDelete},

		{name: "truncate", value: ptr(envelope("t", "null", "null")), want: "0,NULL,,NULL,NULL,NULL,t" + envRow, op: cdc.OpTruncate},
		{name: "truncate with schema", value: ptr(wrap(typedSchema, envelope("t", "null", "null"))), want: "0,NULL,,NULL,NULL,NULL,t" + envRow, op: cdc.OpTruncate},
		{name: "truncate on SCD2", value: ptr(envelope("t", "null", "null")), scd2: true, reason: ReasonUnsupportedOp, errText: `field "op": "t" (a truncate) cannot apply to an SCD type 2 target`},

		{name: "message skipped", value: ptr(`{"op":"m","ts_ms":1700000000500,"source":` + dbzSource + `,"message":{"prefix":"p","content":"aGk="}}`), skipped: true},
		{name: "message with schema skipped", value: ptr(wrap(`{"type":"struct"}`, `{"op":"m"}`)), skipped: true},
		{name: "tombstone skipped", key: ptr(`{"id":1}`), skipped: true},
		{name: "tombstone deletes its key", key: ptr(`{"id":1}`), tombs: TombstoneDelete, want: "1,NULL,,NULL,NULL,NULL,d,0,0,NULL,7", op: cdc.OpTombstone},
		{name: "tombstone of a key with schema", key: ptr(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}]},"payload":{"id":9}}`),
			tombs: TombstoneDelete, scd2: true, want: "9,NULL,,NULL,NULL,NULL,d,0,0,NULL,7", op: cdc.OpTombstone},
		{name: "tombstone without a key", tombs: TombstoneDelete, reason: batch.ReasonMissingField, errText: "without a message key"},
		{name: "tombstone with a bad key", key: ptr(`{"id":"x"}`), tombs: TombstoneDelete, reason: batch.ReasonTypeMismatch, errText: `field "id": "x" is not an int64`},
		{name: "tombstone as a dead letter", key: ptr(`{"id":1}`), tombs: TombstoneDeadLetter, reason: batch.ReasonUndecodable, errText: "the message is a tombstone"},
		{name: "JSON null skipped", value: ptr(`null`), skipped: true},
		{name: "null payload skipped", value: ptr(`{"schema":null,"payload":null}`), skipped: true},

		{name: "not JSON", value: ptr(`{"op":`), reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "empty value", value: ptr(``), reason: batch.ReasonUndecodable, errText: "invalid JSON"},
		{name: "not an object", value: ptr(`[1,2]`), reason: batch.ReasonUndecodable, errText: "the message is a JSON array, not an object"},
		{name: "payload not an object", value: ptr(`{"schema":{},"payload":"x"}`), reason: batch.ReasonUndecodable, errText: "the message's payload is a JSON string, not an object"},
		{name: "no op", value: ptr(`{"after":` + annPlain + `}`), reason: batch.ReasonMissingField, errText: `field "op": missing`},
		{name: "null op", value: ptr(`{"op":null,"after":` + annPlain + `}`), reason: batch.ReasonMissingField, errText: `field "op": missing`},
		{name: "op not a string", value: ptr(`{"op":1,"after":` + annPlain + `}`), reason: batch.ReasonTypeMismatch, errText: `field "op": 1 is not a string`},
		{name: "unknown op", value: ptr(envelope("x", "null", annPlain)), reason: ReasonUnsupportedOp, errText: `field "op": "x" is not one of c, r, u, d, t, m`},
		{name: "op in capitals", value: ptr(envelope("C", "null", annPlain)), reason: ReasonUnsupportedOp, errText: `"C" is not one of`},
		{name: "create without after", value: ptr(envelope("c", "null", "null")), reason: batch.ReasonMissingField, errText: `field "after": missing: op "c" needs the row after the change`},
		{name: "update with after missing", value: ptr(`{"op":"u","before":` + annPlain + `,"source":` + dbzSource + `,"ts_ms":1}`), reason: batch.ReasonMissingField, errText: `field "after": missing`},
		{name: "after not an object", value: ptr(envelope("c", "null", `[1]`)), reason: batch.ReasonTypeMismatch, errText: `field "after": a JSON array is not an object`},
		{name: "before not an object", value: ptr(envelope("d", `"x"`, "null")), reason: batch.ReasonTypeMismatch, errText: `field "before": "x" is not an object`},
		{name: "source not an object", value: ptr(`{"op":"c","after":` + annPlain + `,"source":5,"ts_ms":1}`), reason: batch.ReasonTypeMismatch, errText: `field "source": 5 is not an object`},
		{name: "missing column in after", value: ptr(envelope("c", "null", `{"id":1,"name":"ann"}`)), reason: batch.ReasonMissingField, errText: `field "email": missing, and the column is not nullable`},
		{name: "null column in after", value: ptr(envelope("c", "null", `{"id":1,"email":null}`)), reason: batch.ReasonMissingField, errText: `field "email": null, and the column is not nullable`},
		{name: "wrong type in after", value: ptr(envelope("c", "null", `{"id":"one","email":"a@x"}`)), reason: batch.ReasonTypeMismatch, errText: `field "id": "one" is not an int64`},
		{name: "missing key in before", value: ptr(envelope("d", `{"name":"ann"}`, "null")), reason: batch.ReasonMissingField, errText: `field "id": missing, and the column is not nullable`},
		{name: "wrong type in before", value: ptr(envelope("d", `{"id":1,"amount":true}`, "null")), reason: batch.ReasonTypeMismatch, errText: `field "amount"`},
		{name: "delete without before or key", value: ptr(envelope("d", "null", "null")), reason: batch.ReasonMissingField, errText: `field "before": null, and the message has no key`},
		{name: "delete with a null key", value: ptr(envelope("d", "null", "null")), key: ptr(`null`), reason: batch.ReasonMissingField, errText: `the message key is null`},
		{name: "delete with a null key payload", value: ptr(envelope("d", "null", "null")), key: ptr(`{"schema":null,"payload":null}`), reason: batch.ReasonMissingField, errText: `the message key is null`},
		{name: "delete with a key that is not JSON", value: ptr(envelope("d", "null", "null")), key: ptr(`id=9`), reason: batch.ReasonUndecodable, errText: "message key: invalid JSON"},
		{name: "delete with a key missing the key column", value: ptr(envelope("d", "null", "null")), key: ptr(`{"uid":9}`), reason: batch.ReasonMissingField, errText: `field "id": missing from the message key, and the column is not nullable`},
		{name: "delete with a key of the wrong type", value: ptr(envelope("d", "null", "null")), key: ptr(`{"id":"nine"}`), reason: batch.ReasonTypeMismatch, errText: `field "id": "nine" is not an int64`},
		{name: "no _source_ts_ms", value: ptr(`{"op":"c","after":` + annPlain + `,"ts_ms":1700000000500}`), reason: batch.ReasonMissingField, errText: `field "_source_ts_ms": missing, and the column is not nullable`},
		{name: "no envelope ts_ms", value: ptr(`{"op":"c","after":` + annPlain + `,"source":` + dbzSource + `}`), reason: batch.ReasonMissingField, errText: `field "_ts_ms": missing`},
		{name: "truncate without source", value: ptr(`{"op":"t"}`), reason: batch.ReasonMissingField, errText: `field "_ts_ms": missing`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := mustDebezium(t, dbzSchema(), tc.scd2)
			d.SetTombstones(tc.tombs)
			r := decodeOne(t, d, tc.value, tc.key)
			switch {
			case tc.reason != "":
				if len(r.dls) != 1 || r.dls[0].Reason != tc.reason || !strings.Contains(r.dls[0].Error, tc.errText) {
					t.Fatalf("got rows %q, dead letters %+v; want reason %s with %q", r.rows, r.dls, tc.reason, tc.errText)
				}
				if r.dls[0].Position != "0/7" || r.dls[0].Source != "shop.public.customers" || (tc.value != nil && string(r.dls[0].Payload) != *tc.value) {
					t.Errorf("dead letter %+v does not carry the record", r.dls[0])
				}
			case tc.skipped:
				if len(r.rows) != 0 || len(r.dls) != 0 {
					t.Fatalf("got rows %q, dead letters %+v; want nothing", r.rows, r.dls)
				}
			default:
				if len(r.rows) != 1 {
					t.Fatalf("got no row, dead letters %+v", r.dls)
				}
				if r.rows[0] != tc.want || r.ops[0] != tc.op {
					t.Fatalf("got %s %q\nwant %s %q", r.ops[0], r.rows[0], tc.op, tc.want)
				}
			}
		})
	}
}

func TestDebeziumValues(t *testing.T) {
	cases := []struct {
		name    string
		schema  []string // field schemas of the schema part; nil: a bare payload
		field   string   // the column checked
		after   string   // fields of after besides id and email
		want    string
		reason  string
		errText string
	}{
		// decimal, string mode
		{name: "decimal string", field: "amount", after: `"amount":"12.34"`, want: "12.34"},
		{name: "decimal string with schema", schema: []string{amountString}, field: "amount", after: `"amount":"-0.5"`, want: "-0.50"},
		{name: "decimal string too precise", field: "amount", after: `"amount":"1.234"`, reason: batch.ReasonTypeMismatch, errText: "fractional digits"},
		{name: "decimal string with schema not a number", schema: []string{amountString}, field: "amount", after: `"amount":"BNI="`, reason: batch.ReasonTypeMismatch, errText: `"BNI=" is not a decimal(10,2)`},
		// decimal, double mode
		{name: "decimal double", field: "amount", after: `"amount":12.34`, want: "12.34"},
		{name: "decimal double with schema", schema: []string{amountDouble}, field: "amount", after: `"amount":-7.1`, want: "-7.10"},
		{name: "decimal double exponent", field: "amount", after: `"amount":1.5e3`, want: "1500.00"},
		{name: "decimal double not exact", field: "amount", after: `"amount":0.30000000000000004`, reason: batch.ReasonTypeMismatch, errText: "fractional digits"},
		{name: "decimal double too large", field: "amount", after: `"amount":123456789012`, reason: batch.ReasonTypeMismatch, errText: "does not fit decimal(10,2)"},
		{name: "decimal bool", field: "amount", after: `"amount":true`, reason: batch.ReasonTypeMismatch, errText: `true is not a decimal(10,2)`},
		// decimal, precise mode
		{name: "precise", schema: []string{amountPrecise}, field: "amount", after: `"amount":"BNI="`, want: "12.34"},
		{name: "precise negative", schema: []string{amountPrecise}, field: "amount", after: `"amount":"+y4="`, want: "-12.34"},
		{name: "precise minus one cent", schema: []string{amountPrecise}, field: "amount", after: `"amount":"/w=="`, want: "-0.01"},
		{name: "precise zero", schema: []string{amountPrecise}, field: "amount", after: `"amount":"AA=="`, want: "0.00"},
		{name: "precise without schema takes the column's scale", field: "amount", after: `"amount":"BNI="`, want: "12.34"},
		{name: "precise without parameters takes the column's scale", schema: []string{amountNoScale}, field: "amount", after: `"amount":"+y4="`, want: "-12.34"},
		{name: "precise unpadded", schema: []string{amountPrecise}, field: "amount", after: `"amount":"BNI"`, want: "12.34"},
		{name: "precise scale 3 rescaled exactly", schema: []string{amountScale3}, field: "amount", after: `"amount":"MDQ="`, want: "12.34"},
		{name: "precise scale 3 negative rescaled", schema: []string{amountScale3}, field: "amount", after: `"amount":"z8w="`, want: "-12.34"},
		{name: "precise scale 3 would lose a digit", schema: []string{amountScale3}, field: "amount", after: `"amount":"MDk="`, reason: batch.ReasonTypeMismatch, errText: `"MDk=" is 12.345, which has more fractional digits than decimal(10,2) takes`},
		{name: "precise scale 1 widened", schema: []string{amountScale1}, field: "amount", after: `"amount":"ew=="`, want: "12.30"},
		{name: "precise too large", schema: []string{amountPrecise}, field: "amount", after: `"amount":"DJ8snNBGdO3qQAAAAA=="`, reason: batch.ReasonTypeMismatch, errText: "which does not fit decimal(10,2)"},
		{name: "precise too large for the precision", schema: []string{amountPrecise}, field: "amount", after: `"amount":"F0h26AA="`, reason: batch.ReasonTypeMismatch, errText: "1000000000.00, which does not fit decimal(10,2)"},
		{name: "precise bad base64", schema: []string{amountPrecise}, field: "amount", after: `"amount":"B!I="`, reason: batch.ReasonTypeMismatch, errText: "is neither decimal text nor base64"},
		{name: "precise empty", schema: []string{amountPrecise}, field: "amount", after: `"amount":""`, reason: batch.ReasonTypeMismatch, errText: "is empty"},
		{name: "precise bad schema scale", schema: []string{amountBadScale}, field: "amount", after: `"amount":"BNI="`, reason: batch.ReasonTypeMismatch, errText: "schema scale"},
		{name: "precise numeric format", schema: []string{amountPrecise}, field: "amount", after: `"amount":12.34`, want: "12.34"},
		{name: "variable scale", schema: []string{amountVariable}, field: "amount", after: `"amount":{"scale":3,"value":"MDQ="}`, want: "12.34"},
		{name: "variable scale without schema", field: "amount", after: `"amount":{"scale":0,"value":"ew=="}`, want: "123.00"},
		{name: "variable scale losing digits", field: "amount", after: `"amount":{"scale":3,"value":"MDk="}`, reason: batch.ReasonTypeMismatch, errText: "more fractional digits"},
		{name: "variable scale malformed", field: "amount", after: `"amount":{"value":"MDk="}`, reason: batch.ReasonTypeMismatch, errText: "needs a scale and a base64 value"},

		// timestamps
		{name: "timestamp millis without schema", field: "updated_at", after: `"updated_at":1700000000123`, want: "2023-11-14T22:13:20.123Z"},
		{name: "timestamp RFC 3339 without schema", field: "updated_at", after: `"updated_at":"2023-11-14T22:13:20.123456Z"`, want: "2023-11-14T22:13:20.123456Z"},
		{name: "Timestamp", schema: []string{updatedMillis}, field: "updated_at", after: `"updated_at":1700000000123`, want: "2023-11-14T22:13:20.123Z"},
		{name: "connect Timestamp", schema: []string{updatedConnect}, field: "updated_at", after: `"updated_at":-1`, want: "1969-12-31T23:59:59.999Z"},
		{name: "MicroTimestamp", schema: []string{updatedMicros}, field: "updated_at", after: `"updated_at":1700000000123456`, want: "2023-11-14T22:13:20.123456Z"},
		{name: "NanoTimestamp", schema: []string{updatedNanos}, field: "updated_at", after: `"updated_at":1700000000123456000`, want: "2023-11-14T22:13:20.123456Z"},
		{name: "NanoTimestamp before the epoch", schema: []string{updatedNanos}, field: "updated_at", after: `"updated_at":-1000`, want: "1969-12-31T23:59:59.999999Z"},
		{name: "NanoTimestamp with nanoseconds", schema: []string{updatedNanos}, field: "updated_at", after: `"updated_at":1700000000123456789`, reason: batch.ReasonTypeMismatch, errText: "has a fraction of a microsecond"},
		{name: "ZonedTimestamp", schema: []string{updatedZoned}, field: "updated_at", after: `"updated_at":"2023-11-14T23:13:20.5+01:00"`, want: "2023-11-14T22:13:20.5Z"},
		{name: "Date into a timestamp", schema: []string{updatedDate}, field: "updated_at", after: `"updated_at":19675`, want: "2023-11-14T00:00:00Z"},
		{name: "MicroTime into a timestamp", schema: []string{updatedTime}, field: "updated_at", after: `"updated_at":3600000000`, reason: batch.ReasonTypeMismatch, errText: "is a time of day, not a timestamp"},
		{name: "timestamp millis out of range", field: "updated_at", after: `"updated_at":9223372036854776`, reason: batch.ReasonTypeMismatch, errText: "out of range for a timestamp"},
		{name: "timestamp not an integer", schema: []string{updatedMicros}, field: "updated_at", after: `"updated_at":1.5`, reason: batch.ReasonTypeMismatch, errText: "is not an integer"},
		{name: "timestamp bad string", schema: []string{updatedZoned}, field: "updated_at", after: `"updated_at":"yesterday"`, reason: batch.ReasonTypeMismatch, errText: "is not an RFC 3339 timestamp"},
		{name: "timestamp bool", field: "updated_at", after: `"updated_at":false`, reason: batch.ReasonTypeMismatch, errText: "is not a timestamp"},
		{name: "timestamp null", field: "updated_at", after: `"updated_at":null`, want: "NULL"},

		// dates
		{name: "date text", field: "birthday", after: `"birthday":"2023-11-14"`, want: "2023-11-14"},
		{name: "date days without schema", field: "birthday", after: `"birthday":19675`, want: "2023-11-14"},
		{name: "date before the epoch", field: "birthday", after: `"birthday":-1`, want: "1969-12-31"},
		{name: "Date", schema: []string{birthdayDate}, field: "birthday", after: `"birthday":19675`, want: "2023-11-14"},
		{name: "connect Date", schema: []string{birthdayConnect}, field: "birthday", after: `"birthday":0`, want: "1970-01-01"},
		{name: "date from a midnight Timestamp", schema: []string{birthdayMillis}, field: "birthday", after: `"birthday":1699920000000`, want: "2023-11-14"},
		{name: "date from a midnight MicroTimestamp", schema: []string{birthdayMicros}, field: "birthday", after: `"birthday":1699920000000000`, want: "2023-11-14"},
		{name: "date from a midnight NanoTimestamp", schema: []string{birthdayNanos}, field: "birthday", after: `"birthday":1699920000000000000`, want: "2023-11-14"},
		{name: "date from a Timestamp not at midnight", schema: []string{birthdayMillis}, field: "birthday", after: `"birthday":1699920000001`, reason: batch.ReasonTypeMismatch, errText: "not a midnight"},
		{name: "date from a Time", schema: []string{birthdayTime}, field: "birthday", after: `"birthday":1000`, reason: batch.ReasonTypeMismatch, errText: "is a time of day, not a date"},
		{name: "date out of range", field: "birthday", after: `"birthday":99999999`, reason: batch.ReasonTypeMismatch, errText: "out of range for a date"},
		{name: "date bad text", field: "birthday", after: `"birthday":"14/11/2023"`, reason: batch.ReasonTypeMismatch, errText: "is not a date (YYYY-MM-DD)"},

		// other types follow the JSON rules
		{name: "string", field: "name", after: `"name":"\u00e9"`, want: "é"},
		{name: "string from number", field: "name", after: `"name":5`, reason: batch.ReasonTypeMismatch, errText: `field "name": 5 is not a string`},
		{name: "int64 from float", field: "id", after: `"id":1.5`, reason: batch.ReasonTypeMismatch, errText: `field "id": 1.5 is not an integer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			after := `{"id":1,"email":"a@x",` + tc.after + `}`
			if strings.Contains(tc.after, `"id"`) {
				after = `{"email":"a@x",` + tc.after + `}`
			}
			msg := envelope("c", "null", after)
			if tc.schema != nil {
				msg = wrap(connectSchema(tc.schema...), msg)
			}
			d := mustDebezium(t, dbzSchema(), false)
			r := decodeOne(t, d, &msg, nil)
			if tc.reason != "" {
				if len(r.dls) != 1 || r.dls[0].Reason != tc.reason || !strings.Contains(r.dls[0].Error, tc.errText) {
					t.Fatalf("got rows %q, dead letters %+v; want reason %s with %q", r.rows, r.dls, tc.reason, tc.errText)
				}
				if !strings.Contains(r.dls[0].Error, fmt.Sprintf("field %q", tc.field)) {
					t.Errorf("error %q does not name %s", r.dls[0].Error, tc.field)
				}
				return
			}
			if len(r.rows) != 1 {
				t.Fatalf("no row; dead letters %+v", r.dls)
			}
			col := dbzSchema().Index(tc.field)
			if got := strings.Split(r.rows[0], ",")[col]; got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.field, got, tc.want)
			}
		})
	}
}

// TestDebeziumEnvelopeFields covers _op, _ts_ms (both types), _source_<field>
// of several types, and the Kafka metadata fields.
func TestDebeziumEnvelopeFields(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: batch.FieldKafkaPartition, Type: batch.Int64},
		{Name: "id", Type: batch.Int64},
		{Name: FieldTsMs, Type: batch.Timestamp},
		{Name: "_source_file", Type: batch.String, Nullable: true},
		{Name: "_source_pos", Type: batch.Int64, Nullable: true},
		{Name: "_source_ts_ms", Type: batch.Timestamp},
		{Name: "_source_snapshot", Type: batch.String, Nullable: true},
		{Name: "_source_lsn", Type: batch.Int64, Nullable: true},
		{Name: FieldOp, Type: batch.String, Nullable: true},
		{Name: batch.FieldKafkaKey, Type: batch.String, Nullable: true},
	}}
	mysql := `{"version":"2.7.0.Final","connector":"mysql","name":"shop","ts_ms":1700000000000,"snapshot":"last","db":"shop","table":"customers","server_id":1,"file":"mysql-bin.000003","pos":154,"row":0}`
	cases := []struct {
		name  string
		value string
		key   *string
		want  string
	}{
		{name: "mysql", value: `{"op":"u","after":{"id":3},"source":` + mysql + `,"ts_ms":1700000000456}`, key: ptr(`{"id":3}`),
			want: `2,3,2023-11-14T22:13:20.456Z,mysql-bin.000003,154,2023-11-14T22:13:20Z,last,NULL,u,{"id":3}`},
		{name: "postgres", value: envelope("c", "null", `{"id":4}`),
			want: `2,4,2023-11-14T22:13:20.5Z,NULL,NULL,2023-11-14T22:13:20Z,false,42,c,NULL`},
		{name: "truncate keeps the envelope", value: envelope("t", "null", "null"),
			want: `2,0,2023-11-14T22:13:20.5Z,NULL,NULL,2023-11-14T22:13:20Z,false,42,t,NULL`},
		{name: "key-only delete keeps the envelope", value: `{"op":"d","source":` + mysql + `,"ts_ms":1700000000456}`, key: ptr(`{"id":5}`),
			want: `2,5,2023-11-14T22:13:20.456Z,mysql-bin.000003,154,2023-11-14T22:13:20Z,last,NULL,d,{"id":5}`},
		{name: "source with schema", value: wrap(`{"type":"struct","fields":[{"type":"struct","field":"source","fields":[{"type":"int64","name":"io.debezium.time.MicroTimestamp","field":"ts_ms"}]}]}`,
			`{"op":"c","after":{"id":6},"source":{"ts_ms":1700000000000001},"ts_ms":1700000000456}`),
			want: `2,6,2023-11-14T22:13:20.456Z,NULL,NULL,2023-11-14T22:13:20.000001Z,NULL,NULL,c,NULL`},
	}
	d, err := NewDebezium(s, []string{"id"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := batch.Record{Topic: "t", Partition: 2, Offset: 9, Value: []byte(tc.value)}
			if tc.key != nil {
				rec.Key = []byte(*tc.key)
			}
			out := batch.New(s, 1)
			ops, _, dls := d.DecodeAll([]batch.Record{rec}, out, nil, nil, nil)
			if len(dls) != 0 || len(ops) != 1 {
				t.Fatalf("ops %v, dead letters %+v", ops, dls)
			}
			if got := rowText(out, 0); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDebeziumDecodeAll(t *testing.T) {
	s := dbzSchema()
	d := mustDebezium(t, s, false)
	vals := []*string{
		ptr(envelope("c", "null", annPlain)),                    // 0: row
		ptr(envelope("m", "null", "null")),                      // 1: skipped
		nil,                                                     // 2: tombstone, skipped
		ptr(envelope("c", "null", `{"id":"x"}`)),                // 3: dead letter
		ptr(envelope("d", annPlain, "null")),                    // 4: row
		ptr(`{"op":"q"}`),                                       // 5: dead letter
		ptr(envelope("t", "null", "null")),                      // 6: row
		ptr(wrap(typedSchema, envelope("u", "null", annTyped))), // 7: row
	}
	recs := make([]batch.Record, len(vals))
	for i, v := range vals {
		recs[i] = batch.Record{Topic: "c", Partition: 1, Offset: int64(100 + i)}
		if v != nil {
			recs[i].Value = []byte(*v)
		}
	}
	out := batch.New(s, 1)
	for i, v := range out.Vectors { // rows already in the batch stay
		appendZero(&column{typ: v.Type, nullable: s.Columns[i].Nullable}, v)
	}
	out.Vectors[0].Ints[0] = -1
	ops, from, dls := d.DecodeAll(recs, out, []cdc.Op{cdc.OpDelete}, []int{-1}, []batch.DeadLetter{{Reason: "earlier"}})
	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	wantOps := []cdc.Op{cdc.OpDelete, cdc.OpUpsert, cdc.OpDelete, cdc.OpTruncate, cdc.OpUpsert}
	wantFrom := []int{-1, 0, 4, 6, 7}
	if fmt.Sprint(ops) != fmt.Sprint(wantOps) || fmt.Sprint(from) != fmt.Sprint(wantFrom) || out.Len() != len(wantOps) {
		t.Fatalf("ops %v from %v (%d rows), want %v from %v", ops, from, out.Len(), wantOps, wantFrom)
	}
	for i := 1; i < out.Len(); i++ {
		if id := out.Vectors[0].Ints[i]; (from[i] == 6) != (id == 0) || (from[i] != 6 && id != 1) {
			t.Errorf("row %d (record %d) has id %d", i, from[i], id)
		}
		if off := out.Column(batch.FieldKafkaOffset).Ints[i]; off != int64(100+from[i]) {
			t.Errorf("row %d has offset %d, its record %d", i, off, 100+from[i])
		}
	}
	if len(dls) != 3 || dls[0].Reason != "earlier" || dls[1].Position != "1/103" || dls[1].Reason != batch.ReasonTypeMismatch ||
		dls[2].Position != "1/105" || dls[2].Reason != ReasonUnsupportedOp || string(dls[2].Payload) != `{"op":"q"}` {
		t.Fatalf("dead letters %+v", dls)
	}
}

func TestDebeziumRollsBackPartialRow(t *testing.T) {
	d := mustDebezium(t, dbzSchema(), false)
	out := batch.New(dbzSchema(), 2)
	good := ptr(envelope("c", "null", annPlain))
	// The failing field (_source_ts_ms) comes after every data column.
	bad := ptr(`{"op":"c","after":` + annPlain + `,"source":{"ts_ms":"x"},"ts_ms":1}`)
	recs := []batch.Record{{Value: []byte(*good)}, {Value: []byte(*bad)}, {Value: []byte(*good)}}
	ops, _, dls := d.DecodeAll(recs, out, nil, nil, nil)
	if len(ops) != 2 || len(dls) != 1 || !strings.Contains(dls[0].Error, `field "_source_ts_ms"`) {
		t.Fatalf("ops %v dead letters %+v", ops, dls)
	}
	for i, v := range out.Vectors {
		if v.Len() != 2 {
			t.Fatalf("column %d has %d rows, want 2", i, v.Len())
		}
	}
	if rowText(out, 1) != rowText(out, 0) {
		t.Fatalf("rows differ: %s / %s", rowText(out, 0), rowText(out, 1))
	}
}

func TestNewDebeziumErrors(t *testing.T) {
	base := []batch.Column{{Name: "id", Type: batch.Int64}}
	cases := []struct {
		name string
		cols []batch.Column
		keys []string
		want string
	}{
		{name: "no keys", keys: nil, want: "needs the flow's keys"},
		{name: "unknown key", keys: []string{"uid"}, want: `key "uid" is not a column`},
		{name: "key twice", keys: []string{"id", "id"}, want: `key "id" named twice`},
		{name: "_op not a string", cols: []batch.Column{{Name: FieldOp, Type: batch.Int64}}, keys: []string{"id"}, want: "_op is string, declared int64"},
		{name: "_ts_ms a string", cols: []batch.Column{{Name: FieldTsMs, Type: batch.String}}, keys: []string{"id"}, want: "_ts_ms is int64 or timestamp"},
		{name: "bare source prefix", cols: []batch.Column{{Name: SourcePrefix, Type: batch.String}}, keys: []string{"id"}, want: "names no source field"},
		{name: "duplicate column", cols: []batch.Column{{Name: "id", Type: batch.String}}, keys: []string{"id"}, want: "declared twice"},
		{name: "metadata field of the wrong type", cols: []batch.Column{{Name: batch.FieldKafkaOffset, Type: batch.String}}, keys: []string{"id"}, want: "_kafka_offset is int64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewDebezium(batch.Schema{Columns: append(append([]batch.Column{}, base...), tc.cols...)}, tc.keys, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDebeziumCloneConcurrent(t *testing.T) {
	d := mustDebezium(t, dbzSchema(), false)
	msgs := []string{
		envelope("c", "null", annPlain),
		wrap(typedSchema, envelope("u", annTyped, annTyped)),
		envelope("d", "null", "null"),
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		c := d.Clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := batch.New(dbzSchema(), 300)
			recs := make([]batch.Record, 300)
			for i := range recs {
				recs[i] = batch.Record{Offset: 7, Key: []byte(`{"id":1}`), Value: []byte(msgs[(i+g)%len(msgs)])}
			}
			ops, _, dls := c.DecodeAll(recs, out, nil, nil, nil)
			if len(dls) != 0 || len(ops) != 300 {
				errs <- fmt.Sprintf("goroutine %d: %d ops, %v", g, len(ops), dls)
				return
			}
			for i := range out.Len() {
				want := annRow + ",c" + envRow
				switch ops[i] {
				case cdc.OpUpsert:
					if (i+g)%len(msgs) == 1 {
						want = annRow + ",u" + envRow
					}
				case cdc.OpDelete:
					want = "1,NULL,,NULL,NULL,NULL,d" + envRow
				}
				if got := rowText(out, i); got != want {
					errs <- fmt.Sprintf("goroutine %d row %d: %s, want %s", g, i, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestDebeziumPanicsOnForeignBatch(t *testing.T) {
	d := mustDebezium(t, dbzSchema(), false)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	d.DecodeAll(nil, batch.New(batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}, 0), nil, nil, nil)
}

// TestDebeziumDeleteZeroValues checks what a key-only delete holds in
// non-nullable non-key columns of every type: the type's zero value.
func TestDebeziumDeleteZeroValues(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "s", Type: batch.String},
		{Name: "f", Type: batch.Float64},
		{Name: "b", Type: batch.Bool},
		{Name: "y", Type: batch.Bytes},
		{Name: "m", Type: batch.Decimal(5, 1)},
		{Name: "t", Type: batch.Timestamp},
		{Name: "d", Type: batch.Date},
		{Name: "n", Type: batch.Float64, Nullable: true},
	}}
	d, err := NewDebezium(s, []string{"id"}, false)
	if err != nil {
		t.Fatal(err)
	}
	out := batch.New(s, 1)
	recs := []batch.Record{{Key: []byte(`{"id":9}`), Value: []byte(`{"op":"d","before":null}`)}}
	ops, _, dls := d.DecodeAll(recs, out, nil, nil, nil)
	if len(dls) != 0 || len(ops) != 1 || ops[0] != cdc.OpDelete {
		t.Fatalf("ops %v, dead letters %+v", ops, dls)
	}
	if err := out.Check(); err != nil {
		t.Fatal(err)
	}
	want := "9,,0,false,0x,0.0,1970-01-01T00:00:00Z,1970-01-01,NULL"
	if got := rowText(out, 0); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if out.Column("y").Bytes[0] == nil {
		t.Error("a non-null bytes value is nil")
	}
}

// TestDebeziumSchemalessUnit checks that without a schema part (no logical
// name) an integer timestamp is read in the column's declared unit: a
// schemaless MicroTimestamp with unit us is 2023, not year 50438; a
// logical name in the schema part still decides.
func TestDebeziumSchemalessUnit(t *testing.T) {
	d, err := NewDebezium(dbzSchema(), []string{"id"}, false, Units{"updated_at": "us"})
	if err != nil {
		t.Fatal(err)
	}
	col := dbzSchema().Index("updated_at")
	msg := envelope("c", "null", `{"id":1,"email":"a@x","updated_at":1700000000123456}`)
	r := decodeOne(t, d, &msg, nil)
	if len(r.rows) != 1 || strings.Split(r.rows[0], ",")[col] != "2023-11-14T22:13:20.123456Z" {
		t.Fatalf("schemaless with unit us: rows %q, dead letters %+v", r.rows, r.dls)
	}
	msg = wrap(connectSchema(updatedMillis), envelope("c", "null", `{"id":1,"email":"a@x","updated_at":1700000000123}`))
	r = decodeOne(t, d, &msg, nil)
	if len(r.rows) != 1 || strings.Split(r.rows[0], ",")[col] != "2023-11-14T22:13:20.123Z" {
		t.Fatalf("Timestamp in the schema part: rows %q, dead letters %+v", r.rows, r.dls)
	}
}
