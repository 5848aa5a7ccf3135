package wire

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluicehq/sluice/flows/batch"
)

// BenchmarkAvroRecords measures rewriting Avro orders (the demo's fields)
// as JSON text, in records per second.
func BenchmarkAvroRecords(b *testing.B) {
	fake, reg := newRegistry(&testing.T{})
	defer fake.Close()
	const schema = `{"type":"record","name":"Order","fields":[
 {"name":"order_id","type":"long"},{"name":"customer_id","type":"string"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"currency","type":"string"},{"name":"status","type":"string"},{"name":"items","type":"long"},
 {"name":"country","type":["null","string"]},{"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"channel","type":"string"},{"name":"note","type":"string"}]}`
	id, _, err := fake.RegisterSchema("o", sr.Schema{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	s := avro.MustParse(schema)
	recs := make([]batch.Record, 1000)
	for i := range recs {
		v, err := avro.Marshal(s, map[string]any{"order_id": int64(i), "customer_id": "cust-153874", "amount": big.NewRat(3082178, 100),
			"currency": "CHF", "status": "paid", "items": int64(3), "country": map[string]any{"string": "GB"},
			"created_at": time.Date(2026, 1, 1, 0, 0, 0, i*1000, time.UTC), "channel": "web", "note": "sample order for the sluice demo"})
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = batch.Record{Value: frame(id, v)}
	}
	d := NewDecoder(reg, Avro, nil)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if res, err := d.Records(ctx, recs); err != nil || len(res.Records) != len(recs) {
			b.Fatal(err, res.DeadLetters)
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
