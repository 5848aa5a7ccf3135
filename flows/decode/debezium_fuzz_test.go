package decode

import (
	"testing"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
)

// FuzzDebezium checks that any value and key decode without a panic, that
// rows, operations and record indexes stay aligned, that every record ends
// as at most one row or one dead letter with a known reason, and that the
// batch stays consistent.
func FuzzDebezium(f *testing.F) {
	for _, seed := range []struct{ value, key string }{
		{envelope("c", "null", annPlain), `{"id":1}`},
		{envelope("u", annBefore, annPlain), ``},
		{envelope("d", "null", "null"), `{"id":9}`},
		{envelope("d", "null", "null"), `9`},
		{envelope("d", `{"id":1}`, "null"), `{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":9}}`},
		{envelope("t", "null", "null"), ``},
		{envelope("m", "null", "null"), ``},
		{wrap(typedSchema, envelope("c", "null", annTyped)), ``},
		{wrap(connectSchema(amountScale3, updatedNanos, birthdayMillis), envelope("c", "null", `{"id":1,"email":"x","amount":"MDk=","updated_at":-1,"birthday":1699920000000}`)), ``},
		{envelope("c", "null", `{"id":1,"email":"x","amount":{"scale":-3,"value":"/w=="}}`), ``},
		{`{"schema":null,"payload":null}`, `null`},
		{`{"op":"x"}`, ``},
		{`[`, `{`},
	} {
		f.Add([]byte(seed.value), []byte(seed.key), false)
		f.Add([]byte(seed.value), []byte(seed.key), true)
	}
	s := dbzSchema()
	decoders := [2]*Debezium{mustDebezium(f, s, false), mustDebezium(f, s, true)}
	good := []byte(envelope("c", "null", annPlain))
	f.Fuzz(func(t *testing.T, value, key []byte, scd2 bool) {
		d := decoders[0]
		if scd2 {
			d = decoders[1]
		}
		recs := []batch.Record{{Value: good}, {Value: value, Key: key}, {Value: good}}
		if len(key) == 0 {
			recs[1].Key = nil
		}
		out := batch.New(s, 3)
		ops, from, dls := d.DecodeAll(recs, out, nil, nil, nil)
		if len(ops) != out.Len() || len(from) != out.Len() {
			t.Fatalf("%d rows, %d ops, %d froms", out.Len(), len(ops), len(from))
		}
		if err := out.Check(); err != nil {
			t.Fatal(err)
		}
		perRecord := [3]int{}
		for i, r := range from {
			if r < 0 || r > 2 || (i > 0 && r <= from[i-1]) {
				t.Fatalf("from %v", from)
			}
			perRecord[r]++
			if ops[i] > cdc.OpTruncate || (scd2 && ops[i] == cdc.OpTruncate) {
				t.Fatalf("row %d has op %v (scd2 %v)", i, ops[i], scd2)
			}
		}
		if perRecord[0] != 1 || perRecord[2] != 1 || perRecord[1]+len(dls) > 1 {
			t.Fatalf("rows per record %v, %d dead letters", perRecord, len(dls))
		}
		for _, dl := range dls {
			switch dl.Reason {
			case batch.ReasonUndecodable, batch.ReasonMissingField, batch.ReasonTypeMismatch, ReasonUnsupportedOp:
			default:
				t.Fatalf("dead letter reason %q", dl.Reason)
			}
			if dl.Error == "" || string(dl.Payload) != string(value) {
				t.Fatalf("dead letter %+v", dl)
			}
		}
		if rowText(out, out.Len()-1) != rowText(out, 0) {
			t.Fatalf("the last good row decoded as %s, the first as %s", rowText(out, out.Len()-1), rowText(out, 0))
		}
	})
}
