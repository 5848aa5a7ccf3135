package cdc

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

var historySource = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "amount", Type: batch.Decimal(12, 2), Nullable: true},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "seq", Type: batch.Int64},
}}

// historyBatches is 1M events over 100k keys in 10 batches of 100k, one in
// ten a delete, names and amounts from small sets so that consecutive
// versions are often equal. Shuffled, a key's events arrive out of order;
// otherwise each batch has every key's next event.
func historyBatches(shuffled bool) []Input {
	const events, keys, batches = 1_000_000, 100_000, 10
	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(events)
	if !shuffled {
		for i := range order {
			order[i] = i
		}
	}
	names := []string{"ana", "bo", "cy", ""}
	ins := make([]Input, batches)
	per := events / batches
	for bi := range batches {
		b := batch.New(historySource, per)
		pos := make([]Position, per)
		for j := range per {
			i := order[bi*per+j]
			k, n := i%keys, i/keys
			b.Vectors[0].AppendInt(int64(k))
			if nm := names[rng.IntN(len(names))]; nm == "" {
				b.Vectors[1].AppendNull()
			} else {
				b.Vectors[1].AppendString(nm + strconv.Itoa(k%7))
			}
			b.Vectors[2].AppendDecimal(batch.Dec128FromInt64(int64(rng.IntN(5) * 100)))
			if rng.IntN(10) == 0 {
				b.Vectors[3].AppendString("D")
			} else {
				b.Vectors[3].AppendString("U")
			}
			b.Vectors[4].AppendInt(int64(n))
			pos[j] = Position{Flow: "f", Topic: "cdc", Partition: int32(rng.IntN(4)), Offset: int64(bi*per + j)}
		}
		ins[bi] = Input{Batch: b, Positions: pos}
	}
	return ins
}

// BenchmarkApplySCD2History applies 10 batches of 100k events over 100k
// keys to an empty target: a key's history grows batch by batch.
func BenchmarkApplySCD2History(b *testing.B) {
	b.Run("shuffled", func(b *testing.B) { benchHistory(b, true) })
	b.Run("in order", func(b *testing.B) { benchHistory(b, false) })
}

func benchHistory(b *testing.B, shuffled bool) {
	c := Config{
		Pipeline: "p", Flow: "f", Target: "t", Source: historySource, Kafka: true,
		Keys: []string{"id"}, SequenceBy: []string{"seq"},
		ApplyAsDeletes: `op == "D"`, ExceptColumnList: []string{"op", "seq"},
		SCDType: 2,
	}
	ins := historyBatches(shuffled)
	var stateBytes, stateKeys int
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		store := NewMemStore()
		cache := NewCache(store, 1<<30)
		e, err := New(c, cache)
		if err != nil {
			b.Fatal(err)
		}
		now := t0
		b.StartTimer()
		for _, in := range ins {
			now = now.Add(time.Second)
			in.Now = now
			out, err := e.Apply(b.Context(), in)
			if err != nil {
				b.Fatal(err)
			}
			if out.Upserts.Len() == 0 {
				b.Fatal("no rows written")
			}
			if err := store.Commit(out); err != nil {
				b.Fatal(err)
			}
			cache.Commit(out)
		}
		stateBytes, stateKeys = 0, len(store.keys)
		for _, data := range store.keys {
			stateBytes += len(data)
		}
	}
	b.ReportMetric(float64(b.N)*1_000_000/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(stateBytes)/float64(stateKeys), "state-B/key")
}
