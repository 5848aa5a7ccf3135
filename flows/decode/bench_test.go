package decode

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

func orderSchema() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: "order_id", Type: batch.Int64},
		{Name: "customer_id", Type: batch.String},
		{Name: "amount", Type: batch.Decimal(12, 2)},
		{Name: "currency", Type: batch.String},
		{Name: "status", Type: batch.String},
		{Name: "created_at", Type: batch.Timestamp},
		{Name: "items", Type: batch.Int64},
		{Name: "country", Type: batch.String, Nullable: true},
	}}
}

// orderMessages returns n order messages of about 200 bytes.
func orderMessages(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"order_id":%d,"customer_id":"c-%05d","amount":"%d.%02d","currency":"EUR","status":"paid","created_at":"2026-01-02T03:04:%02d.123Z","items":%d,"country":"DE","note":"gift wrap","channel":"web"}`,
			100000+i, i%100000, i%1000, i%100, i%60, i%10)
	}
	return out
}

// TestDecodeAllocations keeps the hot path near zero allocations per row:
// strings come from a shared arena, decimals and timestamps parse in place.
func TestDecodeAllocations(t *testing.T) {
	msgs := orderMessages(1000)
	d := mustNew(t, orderSchema())
	out := batch.New(orderSchema(), len(msgs))
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "orders", Offset: int64(i), Value: m}
	}
	var dls []batch.DeadLetter
	allocs := testing.AllocsPerRun(20, func() {
		out.Truncate(0)
		dls = d.DecodeAll(recs, out, dls[:0])
	})
	if len(dls) != 0 || out.Len() != len(msgs) {
		t.Fatalf("decoded %d rows and %d dead letters (%v)", out.Len(), len(dls), dls)
	}
	if perRow := allocs / float64(len(msgs)); perRow > 0.05 {
		t.Fatalf("%.3f allocations per row, want at most 0.05", perRow)
	}
}

func BenchmarkDecode(b *testing.B) {
	msgs := orderMessages(1024)
	d := mustNew(b, orderSchema())
	const batchRows = 10000
	out := batch.New(orderSchema(), batchRows)
	var size int64
	for _, m := range msgs {
		size += int64(len(m))
	}
	b.SetBytes(size / int64(len(msgs)))
	b.ReportAllocs()
	rec := batch.Record{Topic: "orders"}
	i := 0
	for b.Loop() {
		if out.Len() == batchRows {
			out = batch.New(orderSchema(), batchRows) // the previous batch goes to a sink
		}
		rec.Offset = int64(i)
		rec.Value = msgs[i%len(msgs)]
		if err := d.Decode(&rec, out); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDecodeInferred decodes the orders with an inferring decoder of
// the columns they infer (names normalized, new fields looked for)
// against a decoder of the same columns declared, alternating on the same
// messages: ratio is the inferring decoder's time over the declared one's.
func BenchmarkDecodeInferred(b *testing.B) {
	msgs := orderMessages(1024)
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "orders", Offset: int64(i), Value: m}
	}
	first, err := NewInferring(batch.Schema{}, naming.SnakeCase)
	if err != nil {
		b.Fatal(err)
	}
	first.DecodeAll(recs, batch.New(batch.Schema{}, 0), nil)
	inferred := batch.Schema{Columns: first.Found()}
	inf, err := NewInferring(inferred, naming.SnakeCase)
	if err != nil {
		b.Fatal(err)
	}
	inf.Govern(Contract{Columns: Evolve, DataType: Evolve})
	dec := mustNew(b, inferred) // the same columns, declared
	var declaredNS, inferredNS int64
	for b.Loop() {
		out := batch.New(inferred, len(recs))
		start := time.Now()
		if dls := dec.DecodeAll(recs, out, nil); len(dls) > 0 {
			b.Fatal(dls[0].Error)
		}
		declaredNS += time.Since(start).Nanoseconds()
		out = batch.New(inferred, len(recs))
		start = time.Now()
		if dls := inf.DecodeAll(recs, out, nil); len(dls) > 0 || len(inf.Found()) > 0 {
			b.Fatal("the inferred columns do not hold the orders")
		}
		inferredNS += time.Since(start).Nanoseconds()
	}
	rows := float64(b.N) * float64(len(recs))
	b.ReportMetric(float64(declaredNS)/rows, "declared_ns/row")
	b.ReportMetric(float64(inferredNS)/rows, "inferred_ns/row")
	b.ReportMetric(float64(inferredNS)/float64(declaredNS), "ratio")
}

// BenchmarkDecodeNested decodes orders each with a list of five items
// into a table typed by its messages and its child table, against the
// same orders without items: ratio is the nested time per order over the
// flat one. The first pass of a fresh table, which only finds the
// columns, is timed apart (first_ns/order).
func BenchmarkDecodeNested(b *testing.B) {
	flat := orderMessages(1024)
	nested := make([][]byte, len(flat))
	for i, m := range flat {
		w := append(append([]byte(nil), m[:len(m)-1]...), `,"lines":[`...)
		for j := range 5 {
			if j > 0 {
				w = append(w, ',')
			}
			w = fmt.Appendf(w, `{"sku":"sku-%06d","qty":%d,"price":"%d.%02d"}`, (i*7+j)%100_000, 1+j, i%500, j)
		}
		nested[i] = append(w, "]}"...)
	}
	type run struct {
		d    *JSON
		recs []batch.Record
		s    batch.Schema
	}
	firstPass := func(recs []batch.Record) *JSON {
		first, err := NewInferring(batch.Schema{}, naming.SnakeCase)
		if err != nil {
			b.Fatal(err)
		}
		first.DecodeAll(recs, batch.New(batch.Schema{}, 0), nil)
		return first
	}
	setup := func(msgs [][]byte) run {
		recs := make([]batch.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = batch.Record{Topic: "orders", Partition: 1, Offset: int64(i), Value: m}
		}
		first := firstPass(recs)
		s := batch.Schema{Columns: first.Found()}
		kids := map[string]batch.Schema{}
		for suffix, k := range first.FoundChildren() {
			kids[suffix] = batch.Schema{Columns: append(append([]batch.Column(nil), linkSchema().Columns...), k.Columns...)}
		}
		d, err := NewInferring(s, naming.SnakeCase)
		if err != nil {
			b.Fatal(err)
		}
		d.SetChildren(kids)
		d.Govern(Contract{Columns: Evolve, DataType: Evolve})
		return run{d: d, recs: recs, s: s}
	}
	f, n := setup(flat), setup(nested)
	var flatNS, nestedNS, flatFirstNS, nestedFirstNS int64
	for b.Loop() {
		for _, r := range []*run{&f, &n} {
			start := time.Now()
			firstPass(r.recs)
			if ns := time.Since(start).Nanoseconds(); r == &f {
				flatFirstNS += ns
			} else {
				nestedFirstNS += ns
			}
			out := batch.New(r.s, len(r.recs))
			start = time.Now()
			if dls := r.d.DecodeAll(r.recs, out, nil); len(dls) > 0 {
				b.Fatal(dls[0].Error)
			}
			r.d.ChildRows()
			ns := time.Since(start).Nanoseconds()
			if r == &f {
				flatNS += ns
			} else {
				nestedNS += ns
			}
		}
	}
	orders := float64(b.N) * float64(len(flat))
	b.ReportMetric(float64(flatNS)/orders, "flat_ns/order")
	b.ReportMetric(float64(nestedNS)/orders, "nested_ns/order")
	b.ReportMetric(float64(nestedNS)/float64(flatNS), "ratio")
	b.ReportMetric(float64(flatFirstNS)/orders, "flat_first_ns/order")
	b.ReportMetric(float64(nestedFirstNS)/orders, "nested_first_ns/order")
}

func linkSchema() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: batch.RootIDColumn, Type: batch.String},
		{Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.ListIdxColumn, Type: batch.Int64},
		{Name: batch.IDColumn, Type: batch.String},
	}}
}
