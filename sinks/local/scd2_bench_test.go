package local

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/sinks"
)

// verBench returns a fresh ver table of keys keys, each with a current
// version from start, and each key's current version's start.
func verBench(b *testing.B, keys int, start int64) (*Sink, []int64) {
	ctx := context.Background()
	s := openTest(b, testOpts(b.TempDir()))
	if err := s.Ensure(ctx, []sinks.Table{verTable}); err != nil {
		b.Fatal(err)
	}
	last := make([]int64, keys)
	var first verChange
	for id := range int64(keys) {
		first.up = append(first.up, ver{id, "a", start, 0})
		last[id] = start
	}
	if err := commitVer(ctx, s, first); err != nil {
		b.Fatal(err)
	}
	return s, last
}

// BenchmarkSCD2InOrder loads 10 batches of in-order changes into an SCD
// type 2 target of 100,000 keys: each closes the current version of 20,000
// keys and opens a new one, so the history grows by 20,000 versions a
// batch.
func BenchmarkSCD2InOrder(b *testing.B) {
	ctx := context.Background()
	const keys = 100_000
	for b.Loop() {
		b.StopTimer()
		s, last := verBench(b, keys, 1)
		b.StartTimer()
		for n := int64(2); n <= 11; n++ {
			var c verChange
			for i := range int64(20_000) {
				id := (i*5 + n) % keys
				c.up = append(c.up, ver{id, "a", last[id], n}, ver{id, "b", n, 0})
				last[id] = n
			}
			if err := commitVer(ctx, s, c); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSCD2Late loads 40 batches into an SCD type 2 target of 100,000
// keys: each closes the current version of 20,000 keys and opens a new one
// (as BenchmarkSCD2InOrder), and splits 2,000 of the versions the batch
// before closed, as late events do. Late events should rewrite the history
// files holding those recent versions, not a bucket's whole history.
func BenchmarkSCD2Late(b *testing.B) {
	ctx := context.Background()
	const keys, loads, updates, late = 100_000, 40, 20_000, 2_000
	for b.Loop() {
		b.StopTimer()
		s, last := verBench(b, keys, 10)
		b.StartTimer()
		var closed []ver // the versions the batch before closed
		for n := int64(2); n <= loads+1; n++ {
			var c verChange
			for i := 0; i < len(closed); i += len(closed) / late {
				v := closed[i]
				mid := v.end - 1
				c.up = append(c.up, ver{v.id, "a", v.start, mid}, ver{v.id, "late", mid, v.end})
			}
			closed = closed[:0]
			for i := range int64(updates) {
				id := (i*5 + n) % keys
				v := ver{id, "a", last[id], 10 * n}
				c.up = append(c.up, v, ver{id, "b", 10 * n, 0})
				closed = append(closed, v)
				last[id] = 10 * n
			}
			if err := commitVer(ctx, s, c); err != nil {
				b.Fatal(err)
			}
		}
	}
}
