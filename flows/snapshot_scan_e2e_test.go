package flows_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/local"
)

// keyScans counts the rows the destination's key scans hand over.
type keyScans struct{ rows atomic.Int64 }

// The destinations with the rows of their key scans counted; every other
// method is the sink's own.
type (
	scannedLocal struct {
		*local.Sink
		*keyScans
	}
	scannedClickHouse struct {
		*clickhouse.Sink
		*keyScans
	}
)

func (s scannedLocal) ScanKeys(ctx context.Context, table string, cols []string, where sinks.KeyFilter, fn func(*batch.Batch) error) error {
	return s.Sink.ScanKeys(ctx, table, cols, where, s.counting(fn))
}

func (s scannedClickHouse) ScanKeys(ctx context.Context, table string, cols []string, where sinks.KeyFilter, fn func(*batch.Batch) error) error {
	return s.Sink.ScanKeys(ctx, table, cols, where, s.counting(fn))
}

func (k *keyScans) counting(fn func(*batch.Batch) error) func(*batch.Batch) error {
	return func(b *batch.Batch) error {
		k.rows.Add(int64(b.Len()))
		return fn(b)
	}
}

// TestSnapshotScansOpenVersions: an SCD type 2 snapshot at V reads, of the
// target, only the versions open at V or after it (__END_AT null or after
// V), not its whole history; the result is the same.
func TestSnapshotScansOpenVersions(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(2, "", ""))
		scans := &keyScans{}
		s.wrap = func(opened sinks.Sink) sinks.Sink {
			switch sink := opened.(type) {
			case *local.Sink:
				return scannedLocal{sink, scans}
			case *clickhouse.Sink:
				return scannedClickHouse{sink, scans}
			}
			t.Fatalf("unexpected sink %T", opened)
			return nil
		}
		const keys, versions = 10, 5
		for v := 1; v <= versions; v++ {
			var rows []rawRow
			for id := int64(1); id <= keys; id++ {
				rows = append(rows, rawRow{id, fmt.Sprint("v", v)})
			}
			snapshotAt(t, s.dir, fmt.Sprint(v), rows)
			s.update()
		}
		// Version 6 lacks key 10, and changes key 1.
		rows := []rawRow{{1, "new"}}
		for id := int64(2); id < keys; id++ {
			rows = append(rows, rawRow{id, fmt.Sprint("v", versions)})
		}
		snapshotAt(t, s.dir, "6", rows)
		scans.rows.Store(0)
		s.update()
		if n := scans.rows.Load(); n != keys {
			t.Errorf("the snapshot at 6 scanned %d rows of the target, want the %d open ones of its %d", n, keys, keys*versions)
		}
		var want []string
		for id := 1; id <= keys; id++ {
			for v := 1; v <= versions; v++ {
				end := fmt.Sprint(v + 1)
				if v == versions && id > 1 && id < keys {
					end = "∞"
				}
				want = append(want, fmt.Sprintf("%d,v%d,%d,%s", id, v, v, end))
			}
			if id == 1 {
				want = append(want, "1,new,6,∞")
			}
		}
		if got := s.rows("t"); !slices.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	})
}
