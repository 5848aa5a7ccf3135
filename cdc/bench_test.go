package cdc

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

var benchSource = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "city", Type: batch.String, Nullable: true},
	{Name: "amount", Type: batch.Decimal(12, 2), Nullable: true},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "seq", Type: batch.Int64},
}}

// benchBatch is 100k upserts over 10k keys, ten per key, in offset order
// but not in sequence order within a key.
func benchBatch(round int) (*batch.Batch, []Position) {
	const rows, keys = 100_000, 10_000
	b := batch.New(benchSource, rows)
	pos := make([]Position, rows)
	cities := []string{"Oaxaca", "Monterrey", "Tijuana"}
	for i := range rows {
		k := i % keys
		n := i / keys // 0..9: the key's n-th event of the batch
		seq := int64(round*100 + (n*7)%10)
		b.Vectors[0].AppendInt(int64(k))
		b.Vectors[1].AppendString("name-" + strconv.Itoa(k) + "-" + strconv.Itoa(n/4))
		b.Vectors[2].AppendString(cities[(k+n)%3])
		b.Vectors[3].AppendDecimal(batch.Dec128FromInt64(int64(i)))
		b.Vectors[4].AppendNull()
		b.Vectors[5].AppendInt(seq)
		pos[i] = Position{Flow: "f", Topic: "cdc", Partition: 0, Offset: int64(round*rows + i)}
	}
	return b, pos
}

func benchApply(b *testing.B, scd int, steady bool) {
	c := Config{
		Pipeline: "p", Flow: "f", Target: "t", Source: benchSource, Kafka: true,
		Keys: []string{"id"}, SequenceBy: []string{"seq"},
		ApplyAsDeletes: `op == "D"`, ExceptColumnList: []string{"op", "seq"},
		SCDType: scd, TrackHistoryColumnList: nil, TombstoneRetention: time.Hour,
	}
	if scd == 2 {
		c.TrackHistoryColumnList = []string{"name"}
	}
	cache := NewCache(NewMemStore(), 1<<30)
	e, err := New(c, cache)
	if err != nil {
		b.Fatal(err)
	}
	const batches = 4
	ins := make([]Input, batches)
	for r := range batches {
		bt, pos := benchBatch(r)
		ins[r] = Input{Batch: bt, Positions: pos}
	}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in := ins[i%batches]
		if !steady || i%batches == 0 {
			b.StopTimer()
			cache.Reset()
			b.StartTimer()
		}
		now = now.Add(time.Hour)
		in.Now = now
		out, err := e.Apply(b.Context(), in)
		if err != nil {
			b.Fatal(err)
		}
		if out.Upserts.Len() == 0 {
			b.Fatal("no rows written")
		}
		cache.Commit(out)
	}
	b.ReportMetric(float64(b.N)*100_000/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkApplySCD1(b *testing.B) {
	b.Run("new keys", func(b *testing.B) { benchApply(b, 1, false) })
	b.Run("known keys", func(b *testing.B) { benchApply(b, 1, true) })
}

func BenchmarkApplySCD2(b *testing.B) {
	b.Run("new keys", func(b *testing.B) { benchApply(b, 2, false) })
	b.Run("known keys", func(b *testing.B) { benchApply(b, 2, true) })
}
