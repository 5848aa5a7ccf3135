package clickhouse

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/sinks"
)

// BenchmarkLoad commits loads of 100,000 rows over three partitions, each
// continuing the previous one, and reports rows per second.
func BenchmarkLoad(b *testing.B) {
	addr := serverAddr(b)
	db := newDatabase(b, addr)
	s := openSink(b, addr, db)
	ctx := context.Background()
	if err := s.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
		b.Fatal(err)
	}
	const rows = 100_000
	batch := events(0, rows)
	b.ReportAllocs()
	b.ResetTimer()
	from := int64(-1)
	for i := range b.N {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("bench-%d", i), Pipeline: "p", Flow: "f", Targets: []string{"events"}})
		if err != nil {
			b.Fatal(err)
		}
		if err := ld.Write(ctx, "events", batch); err != nil {
			b.Fatal(err)
		}
		to := int64((i + 1) * rows)
		if err := ld.Commit(ctx, sinks.Commit{From: kafkaPos(from), To: kafkaPos(to), Rows: rows}); err != nil {
			b.Fatal(err)
		}
		from = to
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
}
