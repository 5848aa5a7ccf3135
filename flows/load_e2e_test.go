package flows_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/local"
)

// errAfterCommit is what a load's Commit returns, once its commit point is
// passed, when failCommits makes it fail: the destination classifies it
// as retryable, as it does a publication that failed.
var errAfterCommit = errors.New("injected: publishing failed after the commit point")

// failCommits counts down the commits that fail after their commit point.
type failCommits struct{ left atomic.Int32 }

func (f *failCommits) commit(ctx context.Context, ld sinks.Load, c sinks.Commit) error {
	err := ld.Commit(ctx, c)
	if err == nil && f.left.Add(-1) >= 0 {
		return errAfterCommit
	}
	return err
}

type failingLoad struct {
	sinks.Load
	f *failCommits
}

func (l failingLoad) Commit(ctx context.Context, c sinks.Commit) error {
	return l.f.commit(ctx, l.Load, c)
}

type failingCDCLoad struct {
	sinks.CDCLoad
	f *failCommits
}

func (l failingCDCLoad) Commit(ctx context.Context, c sinks.Commit) error {
	return l.f.commit(ctx, l.CDCLoad, c)
}

func wrapLoad(ld sinks.Load, f *failCommits) sinks.Load {
	if cl, ok := ld.(sinks.CDCLoad); ok {
		return failingCDCLoad{cl, f}
	}
	return failingLoad{ld, f}
}

type failingLocal struct {
	*local.Sink
	f *failCommits
}

func (s failingLocal) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return wrapLoad(ld, s.f), nil
}

func (s failingLocal) Retryable(err error) bool {
	return errors.Is(err, errAfterCommit) || s.Sink.Retryable(err)
}

type failingClickHouse struct {
	*clickhouse.Sink
	f *failCommits
}

func (s failingClickHouse) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return wrapLoad(ld, s.f), nil
}

func (s failingClickHouse) Retryable(err error) bool {
	return errors.Is(err, errAfterCommit) || s.Sink.Retryable(err)
}

// failAfterCommit makes a stepper's sink fail every commit, after its
// commit point, n times.
func failAfterCommit(t *testing.T, s *stepper, n int32) *failCommits {
	f := &failCommits{}
	f.left.Store(n)
	s.wrap = func(opened sinks.Sink) sinks.Sink {
		switch sink := opened.(type) {
		case *local.Sink:
			return failingLocal{sink, f}
		case *clickhouse.Sink:
			return failingClickHouse{sink, f}
		}
		t.Fatalf("unexpected sink %T", opened)
		return nil
	}
	return f
}

// TestCommittedLoadRetried: a load whose commit failed after its commit
// point is retried by the runner under a new load id, refused as stale,
// and counted as committed, for every kind of slot: a Kafka partition, the
// chunks of files (an append flow and an auto_cdc flow) and a snapshot
// version. Every row is in its target once, and nothing is retried for
// ever.
func TestCommittedLoadRetried(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "retried_" + dname
		s := newStepper(t, broker.Addr(), dest(t), fmt.Sprintf(`tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: live
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: cur
  - name: snap
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: bf
    target: raw
    kind: append
    once: true
    source: {files: {path: "in/*.parquet"}}
    batch: {rows: 2}
  - name: k
    target: live
    kind: append
    source: {kafka: {topic: %s, format: json}}
  - name: hist
    target: cur
    kind: auto_cdc
    once: true
    source:
      files:
        path: "cdc/*.parquet"
        columns:
          - {name: order_id, type: int64}
          - {name: status, type: string}
          - {name: seq, type: int64}
    keys: [order_id]
    sequence_by: seq
    stored_as_scd_type: 1
    batch: {rows: 2}
  - name: sn
    target: snap
    kind: auto_cdc_from_snapshot
    source: {files: {path: "snap/*.parquet"}}
    snapshot_version: "1"
    keys: [id]
    stored_as_scd_type: 1
`, topic))
		var raw []string
		for i := range 5 {
			raw = append(raw, fmt.Sprintf("%d,n%d", i, i))
		}
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []rawRow{{0, "n0"}, {1, "n1"}, {2, "n2"}, {3, "n3"}, {4, "n4"}})
		writeParquet(t, filepath.Join(s.dir, "cdc", "a.parquet"), []orderRow{{1, "new", 1}, {2, "new", 1}, {1, "paid", 2}, {3, "new", 1}, {2, "paid", 3}})
		writeParquet(t, filepath.Join(s.dir, "snap", "a.parquet"), []rawRow{{7, "x"}, {8, "y"}})
		s.produce(topic, `{"id": 10, "name": "a"}`, `{"id": 11, "name": "b"}`)

		// Every commit fails once after its commit point, a few times over.
		f := failAfterCommit(t, s, 6)
		s.update()
		if left := f.left.Load(); left > 0 {
			t.Fatalf("%d injected failures left: the flows made fewer commits than the test meant to fail", left)
		}
		if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, raw) {
			t.Errorf("raw: %q, want %q", got, raw)
		}
		if got, want := s.rows("live", "_sluice_load_id"), []string{"10,a", "11,b"}; !slices.Equal(got, want) {
			t.Errorf("live: %q, want %q", got, want)
		}
		if got, want := s.rows("cur"), []string{"1,paid,2", "2,paid,3", "3,new,1"}; !slices.Equal(got, want) {
			t.Errorf("cur: %q, want %q", got, want)
		}
		if got, want := s.rows("snap"), []string{"7,x", "8,y"}; !slices.Equal(got, want) {
			t.Errorf("snap: %q, want %q", got, want)
		}
		// A second update finds everything done.
		s.wrap = nil
		s.update()
		if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, raw) {
			t.Errorf("raw after a second update: %q, want %q", got, raw)
		}
	})
}
