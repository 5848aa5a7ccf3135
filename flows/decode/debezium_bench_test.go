package decode

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
)

// updateEnvelopes returns n Debezium update envelopes of about 400 bytes,
// as the PostgreSQL connector writes them without the schema part.
func updateEnvelopes(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		row := func(amount int) string {
			return fmt.Sprintf(`{"id":%d,"name":"cust %05d","email":"c%05d@ex.com","amount":"%d.%02d","updated_at":%d,"birthday":"1990-01-%02d"}`,
				100000+i, i%100000, i%100000, amount, i%100, 1767323045123+int64(i), 1+i%28)
		}
		out[i] = fmt.Appendf(nil, `{"before":%s,"after":%s,"source":{"version":"2.7.0.Final","connector":"postgresql","ts_ms":%d,"db":"shop","table":"customers","lsn":%d},"op":"u","ts_ms":%d}`,
			row(i%1000), row(i%1000+1), 1767323045000+int64(i), 24023928+int64(i)*64, 1767323045500+int64(i))
	}
	return out
}

func updateRecords(msgs [][]byte) []batch.Record {
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "shop.public.customers", Offset: int64(i), Value: m}
	}
	return recs
}

// TestDebeziumAllocations keeps the hot path near zero allocations per row,
// as for JSON.
func TestDebeziumAllocations(t *testing.T) {
	msgs := updateEnvelopes(1000)
	if n := len(msgs[0]); n < 350 || n > 450 {
		t.Fatalf("envelopes of %d bytes, want about 400", n)
	}
	d := mustDebezium(t, dbzSchema(), false)
	recs := updateRecords(msgs)
	out := batch.New(dbzSchema(), len(msgs))
	var (
		ops  []cdc.Op
		from []int
		dls  []batch.DeadLetter
	)
	allocs := testing.AllocsPerRun(20, func() {
		out.Truncate(0)
		ops, from, dls = d.DecodeAll(recs, out, ops[:0], from[:0], dls[:0])
	})
	if len(dls) != 0 || out.Len() != len(msgs) || len(ops) != len(msgs) {
		t.Fatalf("decoded %d rows and %d dead letters (%v)", out.Len(), len(dls), dls)
	}
	if perRow := allocs / float64(len(msgs)); perRow > 0.05 {
		t.Fatalf("%.3f allocations per row, want at most 0.05", perRow)
	}
}

func BenchmarkDebezium(b *testing.B) {
	for _, tc := range []struct {
		name   string
		schema bool
	}{{"bare", false}, {"with schema", true}} {
		b.Run(tc.name, func(b *testing.B) {
			msgs := updateEnvelopes(1024)
			if tc.schema {
				for i, m := range msgs {
					msgs[i] = []byte(wrap(connectSchema(amountString, updatedMillis), string(m)))
				}
			}
			recs := updateRecords(msgs)
			d := mustDebezium(b, dbzSchema(), false)
			const batchRecs = 256
			out := batch.New(dbzSchema(), 10000)
			var size int64
			for _, m := range msgs {
				size += int64(len(m))
			}
			b.SetBytes(size / int64(len(msgs)) * batchRecs)
			b.ReportAllocs()
			var (
				ops  []cdc.Op
				from []int
				dls  []batch.DeadLetter
			)
			i := 0
			for b.Loop() {
				if out.Len()+batchRecs > 10000 {
					out = batch.New(dbzSchema(), 10000) // the previous batch goes to a sink
				}
				j := i % (len(recs) / batchRecs) * batchRecs
				ops, from, dls = d.DecodeAll(recs[j:j+batchRecs], out, ops[:0], from[:0], dls[:0])
				if len(dls) != 0 {
					b.Fatal(dls[0].Error)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchRecs), "ns/record")
		})
	}
}
